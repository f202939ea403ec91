"""A2A ↔ cogmesh, as plain code: task ids, request checks, events → task state, the agent card.

A task is one turn and its context is the turn's session. The task id carries the
session, the turn and the seq just before the turn's first event, so any gateway
replica sharing the event log rebuilds the task from the log alone: no task store.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from a2a.types import a2a_pb2
from google.protobuf import json_format, struct_pb2, timestamp_pb2

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import webhooks_pb2
from gateway.a2a.errors import ContentTypeNotSupported, InvalidParams, VersionNotSupported
from services.kit.protos import MAX_ID
from services.lib.agents import AgentDefinition

PROTOCOL_VERSION = "1.0"
GRPC_BINDING = "GRPC"
ANSWER_ARTIFACT = "answer"
TEXT = "text/plain"
_TEXT_MODES = {TEXT, "text/*", "*/*", "text"}
MAX_CONTENT = 100_000  # as the gateway's SendMessage
TERMINAL_STATES = frozenset({a2a_pb2.TASK_STATE_COMPLETED, a2a_pb2.TASK_STATE_FAILED, a2a_pb2.TASK_STATE_CANCELED})
_APPROVE = {"approve", "approved", "yes", "y", "ok"}
_REJECT = {"reject", "rejected", "no", "n", "deny"}


@dataclass(frozen=True)
class TaskRef:
    """What a task id names: `<session_id>:<turn_id>:<seq before the turn's first event>`."""

    session_id: str
    turn_id: str
    start_seq: int

    @property
    def task_id(self) -> str:
        return f"{self.session_id}:{self.turn_id}:{self.start_seq}"

    @classmethod
    def parse(cls, task_id: str) -> TaskRef | None:
        """None when `task_id` is not one of ours (the caller answers TASK_NOT_FOUND)."""
        session_id, _, rest = task_id.partition(":")
        turn_id, _, seq = rest.partition(":")
        if not session_id or not turn_id or not seq.isdigit() or len(task_id) > 2 * MAX_ID:
            return None
        return cls(session_id, turn_id, int(seq))


def check_version(header: str) -> None:
    """Only A2A 1.x; no header means 1.0 (0.3 used another gRPC service name, so it cannot land here)."""
    if not header:
        return
    major, _, rest = header.strip().partition(".")
    minor = rest.partition(".")[0] or "0"
    if (major, minor) != ("1", "0"):
        raise VersionNotSupported(f"A2A version {header!r} is not supported; this server speaks {PROTOCOL_VERSION}")


def exposed(agents: Sequence[AgentDefinition]) -> list[AgentDefinition]:
    """Agents reachable through A2A: marked `a2a_exposed` and able to own a session."""
    return [a for a in agents if a.a2a_exposed and a.is_primary]


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class SendInput:
    """A checked SendMessageRequest."""

    content: str
    agent: str  # "" unless the caller named one in metadata.agent
    context_id: str
    task_id: str
    return_immediately: bool
    push: a2a_pb2.TaskPushNotificationConfig | None = None  # where to push the task's updates


def text_of(message: a2a_pb2.Message, problems: list[tuple[str, str]]) -> str:
    """The message's text parts joined by blank lines; other part kinds are refused by name."""
    texts: list[str] = []
    for index, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if kind != "text":
            raise ContentTypeNotSupported(
                f"message.parts[{index}] is a {kind or 'empty'} part; this agent takes text parts only",
                {"field": f"message.parts[{index}]"},
            )
        texts.append(part.text)
    content = "\n\n".join(t for t in texts if t.strip())
    if not message.parts:
        problems.append(("message.parts", "is required: at least one text part"))
    elif not content:
        problems.append(("message.parts", "hold no text"))
    elif len(content) > MAX_CONTENT:
        problems.append(("message.parts", f"must hold at most {MAX_CONTENT} characters of text"))
    return content


def check_tenant(tenant: str, caller_tenant: str, problems: list[tuple[str, str]]) -> None:
    if tenant and tenant != caller_tenant:
        problems.append(("tenant", "must be empty or the caller's own tenant (the API key decides the tenant)"))


def parse_send(request: a2a_pb2.SendMessageRequest, caller_tenant: str) -> SendInput:
    problems: list[tuple[str, str]] = []
    check_tenant(request.tenant, caller_tenant, problems)
    config = request.configuration
    push = config.task_push_notification_config if config.HasField("task_push_notification_config") else None
    if push is not None and not push.url:
        problems.append(("configuration.task_push_notification_config.url", "is required"))
    modes = list(config.accepted_output_modes)
    if modes and not _TEXT_MODES & {m.strip().lower() for m in modes}:
        raise ContentTypeNotSupported(
            f"configuration.accepted_output_modes {modes} leaves out {TEXT}, the only mode the answers come in"
        )
    if config.history_length < 0:
        problems.append(("configuration.history_length", "must be >= 0"))
    if not request.HasField("message"):
        problems.append(("message", "is required"))
        raise InvalidParams(problems)
    message = request.message
    if message.role != a2a_pb2.ROLE_USER:
        problems.append(("message.role", "must be ROLE_USER"))
    if not message.message_id.strip():
        problems.append(("message.message_id", "is required"))
    content = text_of(message, problems)
    if len(message.context_id) > MAX_ID:
        problems.append(("message.context_id", f"must be at most {MAX_ID} characters"))
    agent = ""
    for where, metadata in (("metadata", request.metadata), ("message.metadata", message.metadata)):
        if "agent" in metadata.fields:
            value = metadata.fields["agent"]
            if value.WhichOneof("kind") != "string_value" or not value.string_value:
                problems.append((f"{where}.agent", "must be a string naming an A2A-exposed agent"))
            else:
                agent = agent or value.string_value
    if problems:
        raise InvalidParams(problems)
    return SendInput(content, agent, message.context_id, message.task_id, config.return_immediately, push)


def approval_answer(text: str) -> bool | None:
    """An A2A reply to an approval: True approves, False rejects, None is neither."""
    word = text.strip().strip(".!").lower()
    return True if word in _APPROVE else False if word in _REJECT else None


# --------------------------------------------------------------------------- events → task


def _text_parts(text: str) -> list[a2a_pb2.Part]:
    return [a2a_pb2.Part(text=text, media_type=TEXT)]


@dataclass
class TaskView:
    """A task folded from its turn's events; `apply` also says what a live stream sends for the event."""

    ref: TaskRef
    state: a2a_pb2.TaskState = a2a_pb2.TASK_STATE_SUBMITTED
    status_message: a2a_pb2.Message | None = None
    status_time: timestamp_pb2.Timestamp | None = None
    answer: str = ""
    final: events_pb2.FinalResult | None = None
    waiting: str = ""  # what a paused turn asks for, as shown to the A2A caller
    seen: bool = False
    chunks: int = 0  # answer deltas so far: the first one starts the artifact, the others append

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def _message(self, event: events_pb2.RuntimeEvent, text: str) -> a2a_pb2.Message:
        return a2a_pb2.Message(
            message_id=f"{self.ref.task_id}:{event.seq}",  # stable: a replay sends the same ids
            context_id=self.ref.session_id,
            task_id=self.ref.task_id,
            role=a2a_pb2.ROLE_AGENT,
            parts=_text_parts(text),
        )

    def _status(
        self, event: events_pb2.RuntimeEvent, state: a2a_pb2.TaskState, text: str = ""
    ) -> a2a_pb2.StreamResponse:
        self.state = state
        self.status_message = self._message(event, text) if text else None
        self.status_time = event.create_time
        return a2a_pb2.StreamResponse(
            status_update=a2a_pb2.TaskStatusUpdateEvent(
                task_id=self.ref.task_id, context_id=self.ref.session_id, status=self.status()
            )
        )

    def _artifact(
        self, text: str, *, append: bool, last: bool, data: struct_pb2.Value | None = None
    ) -> a2a_pb2.StreamResponse:
        artifact = self.artifact(text, data)
        return a2a_pb2.StreamResponse(
            artifact_update=a2a_pb2.TaskArtifactUpdateEvent(
                task_id=self.ref.task_id,
                context_id=self.ref.session_id,
                artifact=artifact,
                append=append,
                last_chunk=last,
            )
        )

    def apply(self, event: events_pb2.RuntimeEvent) -> list[a2a_pb2.StreamResponse]:
        """Fold one event of the turn; returns the updates a live stream sends for it."""
        self.seen = True
        kind = event.WhichOneof("payload")
        if kind == "assistant_delta":
            updates = self._working(event)
            self.answer += event.assistant_delta.text
            self.chunks += 1
            return [*updates, self._artifact(event.assistant_delta.text, append=self.chunks > 1, last=False)]
        if kind == "status":
            state = event.status.state
            if state == events_pb2.TURN_STATE_PAUSED:
                text = self.waiting or event.status.text or "the agent waits for input"
                return [self._status(event, a2a_pb2.TASK_STATE_INPUT_REQUIRED, text)]
            if state == events_pb2.TURN_STATE_QUEUED:
                return []
            return self._working(event)
        if kind == "approval_required":
            ask = event.approval_required
            args = json.dumps(json_format.MessageToDict(ask.arguments), sort_keys=True)
            about = f" ({ask.description})" if ask.description else ""
            self.waiting = f"Approve {ask.action_name} {args}{about}? Reply 'approve' or 'reject'."
            return []
        if kind == "user_input_requested":
            self.waiting = event.user_input_requested.prompt or "the agent asks for your input"
            return []
        if kind == "client_tool_call":
            self.waiting = f"the agent waits for the client-side tool {event.client_tool_call.call.name!r}"
            return []
        if kind == "approval_decided":  # a human decided: the task runs again
            return self._working(event)
        if kind == "tool_call_started":
            return [self._status(event, a2a_pb2.TASK_STATE_WORKING, f"calling {event.tool_call_started.name}")]
        if kind == "final":
            self.final = event.final
            text = event.final.text or self.answer
            data = event.final.structured_output if event.final.HasField("structured_output") else None
            self.answer = text
            return [
                self._artifact(text, append=False, last=True, data=data),
                self._status(event, a2a_pb2.TASK_STATE_COMPLETED),
            ]
        if kind == "error":
            error = event.error
            if error.partial_text and not self.answer:
                self.answer = error.partial_text
            cancelled = error.kind == events_pb2.ERROR_KIND_CANCELLED
            ended = a2a_pb2.TASK_STATE_CANCELED if cancelled else a2a_pb2.TASK_STATE_FAILED
            kind_name = events_pb2.ErrorKind.Name(error.kind).removeprefix("ERROR_KIND_").lower()
            return [self._status(event, ended, f"{kind_name}: {error.message}")]
        return []  # usage, notices, delegation, compaction: no A2A counterpart

    def _working(self, event: events_pb2.RuntimeEvent) -> list[a2a_pb2.StreamResponse]:
        if self.state == a2a_pb2.TASK_STATE_WORKING:
            return []
        return [self._status(event, a2a_pb2.TASK_STATE_WORKING)]

    def artifact(self, text: str, data: struct_pb2.Value | None = None) -> a2a_pb2.Artifact:
        parts = _text_parts(text)
        if data is not None:
            parts.append(a2a_pb2.Part(data=data, media_type="application/json"))
        return a2a_pb2.Artifact(artifact_id=ANSWER_ARTIFACT, name=ANSWER_ARTIFACT, parts=parts)

    def status(self) -> a2a_pb2.TaskStatus:
        status = a2a_pb2.TaskStatus(state=self.state)
        if self.status_message is not None:
            status.message.CopyFrom(self.status_message)
        if self.status_time is not None:
            status.timestamp.CopyFrom(self.status_time)
        return status

    def task(self) -> a2a_pb2.Task:
        task = a2a_pb2.Task(id=self.ref.task_id, context_id=self.ref.session_id, status=self.status())
        if self.answer or self.final is not None:
            data = self.final.structured_output if self.final and self.final.HasField("structured_output") else None
            task.artifacts.append(self.artifact(self.answer, data))
        if self.final is not None:
            metrics = self.final.metrics
            task.metadata.update(
                {
                    "model": self.final.model,
                    "input_tokens": metrics.input_tokens,
                    "output_tokens": metrics.output_tokens,
                    "cost_usd": metrics.cost_usd,
                }
            )
        return task


# --------------------------------------------------------------------------- push notifications


def push_config(stored: webhooks_pb2.StoredWebhook) -> a2a_pb2.TaskPushNotificationConfig:
    """A stored A2A webhook as its push config; the token and credentials stay sealed (never returned)."""
    config = a2a_pb2.TaskPushNotificationConfig(
        id=stored.a2a.config_id, task_id=stored.a2a.task_id, url=stored.webhook.url
    )
    if stored.a2a.auth_scheme:
        config.authentication.scheme = stored.a2a.auth_scheme
    return config


# --------------------------------------------------------------------------- agent card


def agent_card(agents: Sequence[AgentDefinition], url: str, secured: bool, version: str) -> a2a_pb2.AgentCard:
    """The gateway's card: one gRPC interface, one skill per exposed agent (`metadata.agent` picks it)."""
    card = a2a_pb2.AgentCard(
        name="cogmesh",
        description=(
            "LLM agents as a service. Each skill is an agent; name it in the request's metadata.agent "
            "(default: the 'default' agent, else the first listed). context_id is a cogmesh session."
        ),
        version=version,
        supported_interfaces=[
            a2a_pb2.AgentInterface(url=url, protocol_binding=GRPC_BINDING, protocol_version=PROTOCOL_VERSION)
        ],
        capabilities=a2a_pb2.AgentCapabilities(streaming=True, push_notifications=True, extended_agent_card=True),
        default_input_modes=[TEXT],
        default_output_modes=[TEXT],
        skills=[
            a2a_pb2.AgentSkill(
                id=agent.name,
                name=agent.name,
                description=agent.description or f"the {agent.name} agent",
                tags=["agent", *agent.tools],
                input_modes=[TEXT],
                output_modes=[TEXT, "application/json"] if agent.output_schema else [TEXT],
            )
            for agent in exposed(agents)
        ],
    )
    if secured:
        card.security_schemes["bearer"].http_auth_security_scheme.CopyFrom(
            a2a_pb2.HTTPAuthSecurityScheme(
                scheme="Bearer", description="a cogmesh API key, sent as `authorization: Bearer <key>` metadata"
            )
        )
        card.security_requirements.add().schemes["bearer"].CopyFrom(a2a_pb2.StringList())
    return card
