"""AG-UI on the browser edge: `POST /agui/{agent}` runs a turn and streams it as AG-UI events over SSE.

An AG-UI client (`@ag-ui/client`'s HttpAgent, CopilotKit...) posts a RunAgentInput; the edge
makes it ONE GatewayService call on the caller's own key (SendMessage for a new user message,
AnswerInterrupt for a resume entry or a client tool's result, CancelTurn for a cancelled
interrupt) and translates that call's RuntimeEvents into AG-UI events in one place, `Translator`.
Auth, tenancy, limits and errors are the gateway's: an error before the turn's first event is
an HTTP error with a JSON body, an error after it a RUN_ERROR. docs/ag-ui.md has the mapping.

Ids: threadId is the cogmesh session id (an empty or unknown one opens a session of the agent in
the path, whose id RUN_STARTED carries); runId is the turn id (`<turn id>:<seq>` for a run that
resumes a paused turn, seq being its first event's). A client tool call's toolCallId is
`<interrupt id>.<call id>`, so the tool message that answers it names the paused turn's interrupt
and this edge keeps no state between runs.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    TokenUsage,
    Tool,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from google.protobuf import json_format, struct_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from cogmesh.common.v1 import events_pb2, messages_pb2, resources_pb2, turns_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.web.forward import FORWARDED_HEADERS
from services.kit.errors import CogmeshError, InvalidArgument, NotFound

PROTOCOL_VERSION = "1.0"
CLIENT_TOOL_ID_SEPARATOR = "."  # "<interrupt id>.<call id>": cogmesh's interrupt ids ("int_<hex>") hold no dot
EMPTY_PARAMETERS = {"type": "object", "properties": {}}
OPTIONS_KEY = "cogmesh"  # forwardedProps.cogmesh: this edge's own options
OPTION_NAMES = ("scope", "model")

# The same HTTP status for each code as the edge's Connect errors (the Connect protocol's table).
HTTP_STATUS = {
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}
CODES = {code.value[0]: code for code in grpc.StatusCode}

APPROVAL_DECISIONS = {
    "approve": events_pb2.APPROVAL_DECISION_APPROVE,
    "edit": events_pb2.APPROVAL_DECISION_EDIT,
    "reject": events_pb2.APPROVAL_DECISION_REJECT,
}
DECISION_NAMES = {value: name for name, value in APPROVAL_DECISIONS.items()}
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"enum": ["approve", "edit", "reject"]},
        "arguments": {"type": "object", "description": "with edit: the arguments to run the call with instead"},
        "reason": {"type": "string", "description": "with reject: why, given back to the model"},
    },
    "required": ["decision"],
    "additionalProperties": False,
}
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "minLength": 1}},
    "required": ["answer"],
    "additionalProperties": False,
}
TURN_STATES = {
    events_pb2.TURN_STATE_QUEUED: "queued",
    events_pb2.TURN_STATE_RUNNING: "running",
    events_pb2.TURN_STATE_PAUSED: "paused",
    events_pb2.TURN_STATE_COMPLETED: "completed",
    events_pb2.TURN_STATE_FAILED: "failed",
    events_pb2.TURN_STATE_CANCELLED: "cancelled",
}
TODO_STATES = {
    events_pb2.TODO_STATUS_PENDING: "pending",
    events_pb2.TODO_STATUS_IN_PROGRESS: "in_progress",
    events_pb2.TODO_STATUS_COMPLETED: "completed",
}


def routes(channel: Callable[[], grpc.aio.Channel | None]) -> list[BaseRoute]:
    """The AG-UI route, calling the gateway over the edge's channel (`channel()`: None while not connected)."""
    return [Route("/agui/{agent}", AguiEndpoint(channel).run, methods=["POST"])]


# --------------------------------------------------------------------------- what a run does


@dataclass(frozen=True)
class Send:
    """A new user message: SendMessage."""

    content: str
    tools: list[messages_pb2.ToolSpec]


@dataclass(frozen=True)
class Answer:
    """A resume entry or a client tool's result: AnswerInterrupt."""

    request: gateway_pb2.AnswerInterruptRequest
    answered_call_id: str = ""  # a client tool call the frontend answered: its result is the frontend's own


@dataclass(frozen=True)
class Cancel:
    """A resume entry with status cancelled: CancelTurn gives the paused turn up."""

    interrupt_id: str


Plan = Send | Answer | Cancel


@dataclass(frozen=True)
class Options:
    """forwardedProps.cogmesh."""

    scope: dict[str, str] = field(default_factory=dict)
    model: str = ""


def options_of(input: RunAgentInput) -> Options:
    props = input.forwarded_props
    given = props.get(OPTIONS_KEY) if isinstance(props, dict) else None
    if given is None:
        return Options()
    where = f"forwardedProps.{OPTIONS_KEY}"
    if not isinstance(given, dict):
        raise InvalidArgument([(where, "must be an object")])
    problems = [
        (f"{where}.{name}", f"is not an option (options: {', '.join(OPTION_NAMES)})")
        for name in given
        if name not in OPTION_NAMES
    ]
    scope, model = given.get("scope", {}), given.get("model", "")
    if not isinstance(scope, dict) or not all(isinstance(v, str) for v in scope.values()):
        problems.append((f"{where}.scope", "must be an object of strings"))
    if not isinstance(model, str):
        problems.append((f"{where}.model", "must be a string"))
    if problems:
        raise InvalidArgument(problems)
    return Options(scope=dict(scope), model=model)


def plan_of(input: RunAgentInput) -> Plan:
    """What the input asks for: answers to the last run's interrupts, a client tool's result, or a user message.

    Checked before any call to the gateway; an Answer's request gets its session_id once the thread is found.
    """
    if input.resume:
        return resume_plan(input)
    messages = input.messages
    last = messages[-1] if messages else None
    if isinstance(last, ToolMessage):
        trailing = 0
        while trailing < len(messages) and isinstance(messages[-1 - trailing], ToolMessage):
            trailing += 1
        if trailing > 1:
            raise InvalidArgument(
                [("messages", f"ends with {trailing} tool messages: a cogmesh turn waits on one client tool call")]
            )
        return tool_result_plan(last, len(messages) - 1)
    if isinstance(last, UserMessage):
        index = len(messages) - 1
        content = text_of(last.content, f"messages[{index}].content")
        if not content.strip():
            raise InvalidArgument([(f"messages[{index}].content", "is empty: a turn needs a user message with text")])
        return Send(content, [tool_spec(tool, i) for i, tool in enumerate(input.tools or [])])
    ends = f"ends with a {last.role} message" if last is not None else "is empty"
    raise InvalidArgument(
        [
            (
                "messages",
                f"{ends}: a run needs a user message last, a tool message answering a client tool call, "
                "or resume entries answering the last run's interrupt",
            )
        ]
    )


def resume_plan(input: RunAgentInput) -> Plan:
    entries = input.resume or []
    if len(entries) != 1:
        raise InvalidArgument(
            [("resume", f"holds {len(entries)} entries: a cogmesh turn pauses on one interrupt at a time")]
        )
    entry = entries[0]
    if entry.status == "cancelled":
        return Cancel(entry.interrupt_id)
    where, payload = "resume[0].payload", entry.payload
    request = gateway_pb2.AnswerInterruptRequest(interrupt_id=entry.interrupt_id)
    if isinstance(payload, dict) and "decision" in payload:
        request.approval.CopyFrom(approval_of(payload, where))
    elif isinstance(payload, dict) and "answer" in payload:
        extra = sorted(set(payload) - {"answer"})
        answer = payload["answer"]
        if extra or not isinstance(answer, str) or not answer:
            raise InvalidArgument([(where, f"must match {json.dumps(ANSWER_SCHEMA)}")])
        request.user_input = answer
    else:
        raise InvalidArgument([(where, 'must be {"decision": ...} for an approval or {"answer": ...} for a question')])
    return Answer(request)


def approval_of(payload: dict[str, Any], where: str) -> turns_pb2.ApprovalAnswer:
    decision = APPROVAL_DECISIONS.get(payload["decision"]) if isinstance(payload["decision"], str) else None
    arguments, reason = payload.get("arguments"), payload.get("reason", "")
    problems = [
        (f"{where}.{name}", "is not a field of an approval")
        for name in sorted(set(payload) - set(APPROVAL_SCHEMA["properties"]))
    ]
    if decision is None:
        problems.append((f"{where}.decision", "must be approve, edit or reject"))
    if decision == events_pb2.APPROVAL_DECISION_EDIT and not isinstance(arguments, dict):
        problems.append((f"{where}.arguments", "must be an object: the arguments to run the call with"))
    elif arguments is not None and decision != events_pb2.APPROVAL_DECISION_EDIT:
        problems.append((f"{where}.arguments", "only goes with the edit decision"))
    if not isinstance(reason, str):
        problems.append((f"{where}.reason", "must be a string"))
    if problems:
        raise InvalidArgument(problems)
    answer = turns_pb2.ApprovalAnswer(decision=decision, reason=reason)
    if isinstance(arguments, dict):
        answer.edited_arguments.update(arguments)
    return answer


def tool_result_plan(message: ToolMessage, index: int) -> Answer:
    interrupt_id, separator, call_id = message.tool_call_id.partition(CLIENT_TOOL_ID_SEPARATOR)
    if not separator or not interrupt_id or not call_id:
        raise InvalidArgument(
            [
                (
                    f"messages[{index}].toolCallId",
                    f"{message.tool_call_id!r} is not a client tool call of this endpoint "
                    "(those are <interrupt id>.<call id>, from TOOL_CALL_START)",
                )
            ]
        )
    content = text_of(message.content, f"messages[{index}].content")
    result = turns_pb2.ClientToolResult(content=content or (message.error or ""), is_error=message.error is not None)
    request = gateway_pb2.AnswerInterruptRequest(interrupt_id=interrupt_id, tool_result=result)
    return Answer(request, answered_call_id=call_id)


def text_of(content: str | list[Any], where: str) -> str:
    """A message's text: cogmesh turns take text only."""
    if isinstance(content, str):
        return content
    texts = []
    for i, part in enumerate(content):
        if not isinstance(part, TextPart):
            raise InvalidArgument([(f"{where}[{i}]", f"is a {part.type} part: cogmesh takes text parts only")])
        texts.append(part.text)
    return "\n".join(texts)


def tool_spec(tool: Tool, index: int) -> messages_pb2.ToolSpec:
    parameters = struct_pb2.Struct()
    schema: Any = tool.parameters if tool.parameters is not None else EMPTY_PARAMETERS
    if not isinstance(schema, dict):
        raise InvalidArgument([(f"tools[{index}].parameters", "must be a JSON Schema object")])
    parameters.update(schema)
    return messages_pb2.ToolSpec(name=tool.name, description=tool.description, parameters=parameters)


# --------------------------------------------------------------------------- cogmesh events -> AG-UI events


def millis(event: events_pb2.RuntimeEvent) -> int | None:
    return event.create_time.ToMilliseconds() if event.HasField("create_time") else None


def struct_json(value: struct_pb2.Struct) -> str:
    return json.dumps(json_format.MessageToDict(value), separators=(",", ":"))


@dataclass
class Speaker:
    """One agent's place in the stream (the session's agent, or a subagent it delegated to)."""

    message_id: str = ""  # the assistant message its text and tool calls go in ("": a new one)
    text_open: bool = False


class Translator:
    """One run's RuntimeEvents as AG-UI events: the one place that maps cogmesh's events to AG-UI's."""

    def __init__(self, session: resources_pb2.Session, answered_call_id: str = "") -> None:
        self.session = session
        self.thread_id = session.session_id
        self.run_id = ""
        self.speakers: dict[str, Speaker] = {}
        self.skip_results = {answered_call_id} if answered_call_id else set()
        self.usage: dict[tuple[str, str], list[int]] = {}
        self.streamed_text = False
        self.interrupt: Interrupt | None = None
        self.pending_tool_call = ""
        self.ended = False

    # ----------------------------------------------------------------- run framing

    def start(self, first: events_pb2.RuntimeEvent, resumed: bool) -> list[BaseEvent]:
        self.run_id = f"{first.turn_id}:{first.seq}" if resumed else first.turn_id
        metadata = {"cogmesh": {"sessionId": self.thread_id, "turnId": first.turn_id, "firstSeq": first.seq}}
        snapshot = {
            "sessionId": self.thread_id,
            "agent": self.session.agent,
            "scope": dict(self.session.scope),
            "userId": self.session.user_id,
            "topicId": self.session.topic_id,
            "turn": {"id": first.turn_id, "state": "running", "status": ""},
        }
        return [
            RunStartedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                protocol_version=PROTOCOL_VERSION,
                timestamp=millis(first),
                metadata=metadata,
            ),
            StateSnapshotEvent(snapshot=snapshot, timestamp=millis(first)),
        ]

    def cancelled_run(self, turn_id: str) -> list[BaseEvent]:
        """A paused turn given up by a cancelled resume entry: a run that ends cancelled at once."""
        self.run_id = f"{turn_id}:cancel"
        self.ended = True
        return [
            RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, protocol_version=PROTOCOL_VERSION),
            RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=RunFinishedCancelledOutcome()),
        ]

    def stream_failed(self, code: grpc.StatusCode, message: str) -> list[BaseEvent]:
        """The gateway's stream broke after the run started (the turn itself may run on)."""
        self.ended = True
        return [*self.close_all(), RunErrorEvent(message=message, code=code.name, usage=self.usage_list())]

    def stream_ended(self) -> list[BaseEvent]:
        """The gateway's stream ended: a pause ends the run here; anything else without an end is an error."""
        if self.ended:
            return []
        self.ended = True
        events = self.close_all()
        if self.interrupt is not None:
            outcome: Any = RunFinishedInterruptOutcome(interrupts=[self.interrupt])
        elif self.pending_tool_call:
            outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=[self.pending_tool_call])
        else:
            message = "the gateway's stream ended before the turn did: follow the session with Subscribe"
            return [*events, RunErrorEvent(message=message, code="UNAVAILABLE", usage=self.usage_list())]
        events.append(self.turn_state("paused", "waiting"))
        events.append(
            RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, outcome=outcome, usage=self.usage_list())
        )
        return events

    # ----------------------------------------------------------------- one event

    def translate(self, event: events_pb2.RuntimeEvent) -> list[BaseEvent]:
        kind = event.WhichOneof("payload")
        at = millis(event)
        speaker = self.speakers.setdefault(event.agent, Speaker())
        # A subagent's text and tool calls are its own assistant messages, named in their metadata.
        tag = {"cogmesh": {"agent": event.agent}} if event.agent else None
        if kind == "assistant_delta":
            if not event.assistant_delta.text:
                return []
            events = [] if speaker.text_open else self.open_text(event, speaker, at, tag)
            if not event.agent:
                self.streamed_text = True
            events.append(
                TextMessageContentEvent(message_id=speaker.message_id, delta=event.assistant_delta.text, timestamp=at)
            )
            return events
        if kind == "tool_call_started":
            started = event.tool_call_started
            if started.source == "client":  # its TOOL_CALL_START comes with its client_tool_call, which has the id
                return self.close_text(speaker)
            return self.tool_call(event, speaker, started.correlation_id, started.name, started.arguments, tag)
        if kind == "client_tool_call":
            call = event.client_tool_call
            tool_call_id = f"{call.interrupt_id}{CLIENT_TOOL_ID_SEPARATOR}{call.call.id}"
            self.pending_tool_call = tool_call_id
            return self.tool_call(event, speaker, tool_call_id, call.call.name, call.call.arguments, tag)
        if kind == "tool_call_finished":
            finished = event.tool_call_finished
            events = self.close_text(speaker)
            speaker.message_id = ""  # what the model says after its tools' results is a new message
            if finished.correlation_id in self.skip_results:
                return events  # the frontend's own tool message carries this result
            metadata = {
                "cogmesh": {**(tag or {}).get("cogmesh", {}), "ok": finished.ok, "durationMs": finished.duration_ms}
            }
            events.append(
                ToolCallResultEvent(
                    message_id=f"{event.turn_id}:{event.seq}",
                    tool_call_id=finished.correlation_id,
                    content=finished.result_summary,
                    role="tool",
                    timestamp=at,
                    metadata=metadata,
                )
            )
            return events
        if kind == "approval_required":
            approval = event.approval_required
            self.interrupt = Interrupt(
                id=approval.interrupt_id,
                reason="tool_approval",
                message=approval.prompt or approval.description or f"approve the {approval.action_name} call?",
                tool_call_id=approval.correlation_id or None,
                response_schema=APPROVAL_SCHEMA,
                metadata={
                    "cogmesh": {
                        "kind": "approval",
                        "tool": approval.action_name,
                        "arguments": json_format.MessageToDict(approval.arguments),
                        "allowedDecisions": [
                            DECISION_NAMES[d] for d in approval.allowed_decisions if d in DECISION_NAMES
                        ],
                        "description": approval.description,
                        "defaults": json_format.MessageToDict(approval.defaults),
                    }
                },
            )
            return self.close_text(speaker)
        if kind == "user_input_requested":
            question = event.user_input_requested
            self.interrupt = Interrupt(
                id=question.interrupt_id,
                reason="user_input",
                message=question.prompt,
                tool_call_id=question.correlation_id or None,
                response_schema=ANSWER_SCHEMA,
                metadata={"cogmesh": {"kind": "question"}},
            )
            return self.close_text(speaker)
        if kind == "status":
            status = event.status
            if status.state == events_pb2.TURN_STATE_PAUSED:
                return []  # the run ends with the stream, on the interrupt or the client tool call
            return [self.turn_state(TURN_STATES.get(status.state, "running"), status.text, at)]
        if kind == "usage":
            usage = event.usage
            counts = self.usage.setdefault((usage.provider, usage.model), [0, 0])
            counts[0] += usage.input_tokens
            counts[1] += usage.output_tokens
            return []
        if kind == "plan" and not event.agent:  # the session agent's todo list is shared state
            plan = event.plan
            items = [
                {"id": i.id, "content": i.content, "status": TODO_STATES.get(i.status, "pending")} for i in plan.items
            ]
            patch = [{"op": "add", "path": "/plan", "value": {"version": plan.version, "items": items}}]
            return [StateDeltaEvent(delta=patch, timestamp=at)]
        if kind == "handoff":  # the agent that answers changes; the CUSTOM event says who handed over and why
            patch = [{"op": "replace", "path": "/agent", "value": event.handoff.to_agent}]
            return [StateDeltaEvent(delta=patch, timestamp=at), self.custom(event, kind, tag, at)]
        if kind == "final":
            return self.finish(event, at)
        if kind == "error":
            return self.fail(event, at)
        return [self.custom(event, kind or "unknown", tag, at)]

    def open_text(
        self, event: events_pb2.RuntimeEvent, speaker: Speaker, at: int | None, tag: dict[str, Any] | None
    ) -> list[BaseEvent]:
        events = self.close_other_texts(speaker)
        speaker.message_id = speaker.message_id or f"{event.turn_id}:{event.seq}"
        speaker.text_open = True
        events.append(
            TextMessageStartEvent(message_id=speaker.message_id, role="assistant", timestamp=at, metadata=tag)
        )
        return events

    def close_text(self, speaker: Speaker) -> list[BaseEvent]:
        if not speaker.text_open:
            return []
        speaker.text_open = False
        return [TextMessageEndEvent(message_id=speaker.message_id)]

    def close_other_texts(self, speaker: Speaker) -> list[BaseEvent]:
        return [e for other in self.speakers.values() if other is not speaker for e in self.close_text(other)]

    def close_all(self) -> list[BaseEvent]:
        return [e for speaker in self.speakers.values() for e in self.close_text(speaker)]

    def tool_call(
        self,
        event: events_pb2.RuntimeEvent,
        speaker: Speaker,
        tool_call_id: str,
        name: str,
        arguments: struct_pb2.Struct,
        tag: dict[str, Any] | None,
    ) -> list[BaseEvent]:
        at = millis(event)
        events = self.close_all()
        speaker.message_id = speaker.message_id or f"{event.turn_id}:{event.seq}"
        return [
            *events,
            ToolCallStartEvent(
                tool_call_id=tool_call_id,
                tool_call_name=name,
                parent_message_id=speaker.message_id,
                timestamp=at,
                metadata=tag,
            ),
            ToolCallArgsEvent(tool_call_id=tool_call_id, delta=struct_json(arguments), timestamp=at),
            ToolCallEndEvent(tool_call_id=tool_call_id, timestamp=at),
        ]

    def finish(self, event: events_pb2.RuntimeEvent, at: int | None) -> list[BaseEvent]:
        final = event.final
        events = self.close_all()
        if final.text and not self.streamed_text:  # a model that did not stream: its answer as one message
            message_id = f"{event.turn_id}:{event.seq}"
            events += [
                TextMessageStartEvent(message_id=message_id, role="assistant", timestamp=at),
                TextMessageContentEvent(message_id=message_id, delta=final.text, timestamp=at),
                TextMessageEndEvent(message_id=message_id, timestamp=at),
            ]
        self.ended = True
        metrics = json_format.MessageToDict(final.metrics)
        result = json_format.MessageToDict(final)["structuredOutput"] if final.HasField("structured_output") else None
        events.append(self.turn_state("completed", "", at))
        events.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                result=result,
                outcome=RunFinishedSuccessOutcome(),
                usage=self.usage_list(),
                timestamp=at,
                metadata={"cogmesh": {"model": final.model, "metrics": metrics}},
            )
        )
        return events

    def fail(self, event: events_pb2.RuntimeEvent, at: int | None) -> list[BaseEvent]:
        error = event.error
        events = self.close_all()
        self.ended = True
        if error.kind == events_pb2.ERROR_KIND_CANCELLED:
            events.append(self.turn_state("cancelled", error.message, at))
            outcome = RunFinishedCancelledOutcome()
            events.append(
                RunFinishedEvent(
                    thread_id=self.thread_id, run_id=self.run_id, outcome=outcome, usage=self.usage_list(), timestamp=at
                )
            )
            return events
        code = events_pb2.ErrorKind.Name(error.kind).removeprefix("ERROR_KIND_")
        metadata = {"cogmesh": {"retryable": error.retryable, "partialText": error.partial_text}}
        events.append(self.turn_state("failed", error.message, at))
        events.append(
            RunErrorEvent(message=error.message, code=code, usage=self.usage_list(), timestamp=at, metadata=metadata)
        )
        return events

    def custom(
        self, event: events_pb2.RuntimeEvent, kind: str, tag: dict[str, Any] | None, at: int | None
    ) -> BaseEvent:
        """Events AG-UI has no type for (notices, compaction, delegation) as CUSTOM `cogmesh.<payload>`."""
        value = json_format.MessageToDict(getattr(event, kind)) if event.HasField(kind) else {}
        return CustomEvent(name=f"cogmesh.{kind}", value=value, timestamp=at, metadata=tag)

    def turn_state(self, state: str, status: str, at: int | None = None) -> StateDeltaEvent:
        patch = [
            {"op": "replace", "path": "/turn/state", "value": state},
            {"op": "replace", "path": "/turn/status", "value": status},
        ]
        return StateDeltaEvent(delta=patch, timestamp=at)  # pydantic reads the dicts as patch operations

    def usage_list(self) -> list[TokenUsage] | None:
        if not self.usage:
            return None
        return [
            TokenUsage(
                provider=provider,
                model=model,
                input_tokens=counts[0],
                output_tokens=counts[1],
                total_tokens=counts[0] + counts[1],
            )
            for (provider, model), counts in self.usage.items()
        ]


# --------------------------------------------------------------------------- errors


def status_of(exc: grpc.aio.AioRpcError) -> status_pb2.Status:
    try:
        status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    except ValueError:  # details disagree with the status: keep code and message
        status = None
    return status or status_pb2.Status(code=exc.code().value[0], message=exc.details() or "")


def error_response(status: status_pb2.Status) -> JSONResponse:
    """The gateway's status as {"error": {code, message, reason, metadata, violations}}, HTTP status as Connect's."""
    code = CODES.get(status.code, grpc.StatusCode.UNKNOWN)
    body: dict[str, Any] = {"code": code.name.lower(), "message": status.message}
    headers = {}
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            body["reason"], body["metadata"] = info.reason, dict(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            body["violations"] = [{"field": v.field, "description": v.description} for v in bad.field_violations]
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            headers["retry-after"] = str(max(1, round(retry.retry_delay.ToTimedelta().total_seconds())))
    return JSONResponse({"error": body}, HTTP_STATUS.get(code, 500), headers=headers)


def validation_error(exc: ValidationError) -> InvalidArgument:
    problems = []
    for problem in exc.errors(include_url=False)[:20]:
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in problem["loc"]).lstrip(".")
        problems.append((path or "body", problem["msg"]))
    return InvalidArgument(problems)


# --------------------------------------------------------------------------- the endpoint


class AguiEndpoint:
    def __init__(self, channel: Callable[[], grpc.aio.Channel | None]) -> None:
        self._channel = channel
        self._stubs: tuple[grpc.aio.Channel, Any] | None = None

    def _stub(self) -> Any:
        channel = self._channel()
        if channel is None:
            raise Unavailable("the edge is not connected to the gateway (starting or stopping)")
        if self._stubs is None or self._stubs[0] is not channel:
            self._stubs = (channel, gateway_pb2_grpc.GatewayServiceStub(channel))  # type: ignore[no-untyped-call]
        return self._stubs[1]

    async def run(self, request: Request) -> Response:
        agent = request.path_params["agent"]
        metadata = tuple((name, request.headers[name]) for name in FORWARDED_HEADERS if name in request.headers)
        try:
            try:
                input = RunAgentInput.model_validate_json(await request.body())
            except ValidationError as exc:
                raise validation_error(exc) from None
            stub = self._stub()
            options = options_of(input)
            plan = plan_of(input)
            session = await self._session(
                stub, agent, input.thread_id, options, metadata, create=isinstance(plan, Send)
            )
            if isinstance(plan, Answer):
                plan.request.session_id = session.session_id
            translator = Translator(session, plan.answered_call_id if isinstance(plan, Answer) else "")
            if isinstance(plan, Cancel):
                reply = await stub.CancelTurn(
                    gateway_pb2.CancelTurnRequest(session_id=session.session_id), metadata=metadata
                )
                if not reply.cancelled:
                    raise NotFound(
                        f"thread {session.session_id!r} has no paused turn to give up "
                        f"for interrupt {plan.interrupt_id!r}",
                        metadata={"interrupt_id": plan.interrupt_id},
                    )
                return sse(iter_events(translator.cancelled_run(reply.turn_id)))
            call = self._open(stub, plan, session.session_id, options, metadata)
            replies = call.__aiter__()
            try:
                first: list[events_pb2.RuntimeEvent] = []
                while not first:  # an error before the turn's first event is an HTTP error
                    first = list((await anext(replies)).events)
            except BaseException:
                call.cancel()
                raise
        except grpc.aio.AioRpcError as exc:
            return error_response(status_of(exc))
        except CogmeshError as exc:
            return error_response(exc.to_status())
        return sse(self._stream(translator, call, replies, first, resumed=isinstance(plan, Answer)))

    async def _session(
        self,
        stub: Any,
        agent: str,
        thread_id: str,
        options: Options,
        metadata: tuple[tuple[str, str], ...],
        create: bool,
    ) -> resources_pb2.Session:
        """The thread's session; an empty or unknown thread opens a new one (unless the run answers an interrupt)."""
        if thread_id:
            try:
                reply = await stub.GetSession(gateway_pb2.GetSessionRequest(session_id=thread_id), metadata=metadata)
            except grpc.aio.AioRpcError as exc:
                unknown = exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)
                if not unknown or not create:
                    raise
            else:
                session: resources_pb2.Session = reply.session
                if session.agent != agent:
                    raise InvalidArgument(
                        [("agent", f"thread {thread_id!r} is a session of agent {session.agent!r}, not of {agent!r}")]
                    )
                return session
        elif not create:
            raise InvalidArgument([("threadId", "is empty: resuming needs the thread of the interrupted run")])
        created = await stub.CreateSession(
            gateway_pb2.CreateSessionRequest(agent=agent, scope=options.scope), metadata=metadata
        )
        return created.session  # type: ignore[no-any-return]

    @staticmethod
    def _open(stub: Any, plan: Send | Answer, session_id: str, options: Options, metadata: Any) -> Any:
        if isinstance(plan, Answer):
            return stub.AnswerInterrupt(plan.request, metadata=metadata)
        request = gateway_pb2.SendMessageRequest(
            session_id=session_id,
            content=plan.content,
            model=options.model,
            client_tools=plan.tools,
            # An AG-UI client stops a run by aborting its request (abortRun): the turn stops with it.
            cancel_on_disconnect=True,
        )
        return stub.SendMessage(request, metadata=metadata)

    @staticmethod
    async def _stream(
        translator: Translator,
        call: Any,
        replies: AsyncIterator[Any],
        first: list[events_pb2.RuntimeEvent],
        resumed: bool,
    ) -> AsyncIterator[BaseEvent]:
        batch = first
        try:
            for event in translator.start(batch[0], resumed):
                yield event
            while True:
                for runtime_event in batch:
                    if not translator.ended:  # the stream ends right after the turn's end: read it to its end
                        for event in translator.translate(runtime_event):
                            yield event
                try:
                    batch = list((await anext(replies)).events)
                except StopAsyncIteration:
                    break
            for event in translator.stream_ended():
                yield event
        except grpc.aio.AioRpcError as exc:
            for event in translator.stream_failed(exc.code(), exc.details() or exc.code().name):
                yield event
        finally:
            # The client went away (or the run ended): stop the gateway's stream, freeing its slot;
            # SendMessage's cancel_on_disconnect then cancels a turn still running.
            call.cancel()


class Unavailable(CogmeshError):
    code = grpc.StatusCode.UNAVAILABLE


async def iter_events(events: list[BaseEvent]) -> AsyncIterator[BaseEvent]:
    for event in events:
        yield event


def sse(events: AsyncIterator[BaseEvent]) -> StreamingResponse:
    encoder = EventEncoder()

    async def body() -> AsyncIterator[str]:
        async for event in events:
            yield encoder.encode(event)

    return StreamingResponse(
        body(),
        media_type=encoder.get_content_type(),
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )
