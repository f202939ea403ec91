"""cogmesh turns behind the OpenAI-compatible API: the gateway calls, the ids, and the one event mapping.

Both APIs (Chat Completions and Responses) start or resume a turn here and read its events
through `TurnReader`, which maps each cogmesh event one way to a protocol-neutral piece:

    assistant_delta (the session's agent)   -> Text
    client_tool_call                        -> ClientCall  (the turn pauses)
    approval_required, user_input_requested -> Text (what is asked) + Interrupt  (the turn pauses)
    usage                                   -> Usage
    final / error / paused status           -> End
    anything else (statuses, cogmesh's own tool calls, notices, delegation, handoffs, plans, decisions,
    a subagent's text): nothing

The ids handed out carry what they name, so no store is needed and any edge replica answers:
a response (or completion) id names the session, the turn and the seq before its first event; a
client tool call's id names the session and the interrupt its result answers.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc
from google.protobuf import json_format, struct_pb2
from starlette.requests import Request

from cogmesh.client.results import is_paused, voided
from cogmesh.common.v1 import events_pb2, messages_pb2, resources_pb2, turns_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway.web.openai.errors import GatewayStatus, OpenAIError, from_gateway, invalid, is_paused_refusal
from services.kit.protos import MAX_ID

# Request headers that mean something to the gateway: the key, and the trace the call belongs to.
FORWARDED_HEADERS = ("authorization", "traceparent", "tracestate")
SESSION_HEADER = "x-cogmesh-session"
_SEP = "\x1f"  # never in a session, turn or interrupt id
_APPROVE = re.compile(r"\s*approved?\s*[.!]?\s*", re.IGNORECASE)
_REJECT = re.compile(r"\s*reject(?:ed)?\s*(?:[:\-—]\s*(?P<reason>.*?))?\s*[.!]?\s*", re.IGNORECASE | re.DOTALL)
_EDIT = re.compile(r"\s*edit\s*:\s*(?P<arguments>\{.*\})\s*", re.IGNORECASE | re.DOTALL)
_DECISIONS = {
    events_pb2.APPROVAL_DECISION_APPROVE: "approve",
    events_pb2.APPROVAL_DECISION_EDIT: "edit",
    events_pb2.APPROVAL_DECISION_REJECT: "reject",
}


# --------------------------------------------------------------------------- ids


def _pack(*parts: str) -> str:
    return base64.urlsafe_b64encode(_SEP.join(parts).encode()).decode().rstrip("=")


def _unpack(token: str, count: int) -> list[str] | None:
    if not token or len(token) > 4 * MAX_ID:
        return None
    try:
        parts = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode().split(_SEP)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return parts if len(parts) == count and all(parts) else None


@dataclass(frozen=True)
class ResponseRef:
    """A response (or chat completion): its session, its turn, and the seq just before its first event."""

    session_id: str
    turn_id: str
    start_seq: int

    @property
    def token(self) -> str:
        return _pack(self.session_id, self.turn_id, str(self.start_seq))

    @classmethod
    def parse(cls, token: str) -> ResponseRef | None:
        parts = _unpack(token, 3)
        if parts is None or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]))


@dataclass(frozen=True)
class CallRef:
    """A client tool call handed to the caller: the session and the interrupt its result answers."""

    session_id: str
    interrupt_id: str

    @property
    def call_id(self) -> str:
        return f"call_{_pack(self.session_id, self.interrupt_id)}"

    @classmethod
    def parse(cls, call_id: str) -> CallRef | None:
        parts = _unpack(call_id.removeprefix("call_"), 2) if call_id.startswith("call_") else None
        return None if parts is None else cls(parts[0], parts[1])


# --------------------------------------------------------------------------- the gateway


class Refused(Exception):
    """The gateway refused a call: its status, to translate (or to act on: a paused session)."""

    def __init__(self, status: GatewayStatus):
        super().__init__(status.message)
        self.status = status

    def openai(self) -> OpenAIError:
        return from_gateway(self.status)


class Gateway:
    """The public GatewayService on behalf of one HTTP request: its key and trace travel with every call."""

    def __init__(self, channel: grpc.aio.Channel | None, request: Request):
        if channel is None:
            raise OpenAIError(503, "the edge is not connected to the gateway (starting or stopping)", "server_error")
        self._stub: Any = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        self._metadata = tuple((name, request.headers[name]) for name in FORWARDED_HEADERS if name in request.headers)

    async def call(self, method: str, request: Any) -> Any:
        try:
            return await getattr(self._stub, method)(request, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise Refused(GatewayStatus.of(exc)) from None

    async def open(self, method: str, request: Any) -> TurnStream:
        """A streaming call with its first message read: a refusal comes out here, before any reply is written."""
        call = getattr(self._stub, method)(request, metadata=self._metadata)
        try:
            first = await call.read()
        except grpc.aio.AioRpcError as exc:
            raise Refused(GatewayStatus.of(exc)) from None
        if first is grpc.aio.EOF or not first.events:
            call.cancel()
            raise OpenAIError(502, f"the gateway's {method} stream ended before the turn's first event", "server_error")
        return TurnStream(call, list(first.events))

    def subscribe(self, session_id: str, after_seq: int) -> Any:
        request = gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=after_seq, stop_when_idle=True)
        return self._stub.Subscribe(request, metadata=self._metadata)


class TurnStream:
    """The events of one SendMessage or AnswerInterrupt call, from its (already read) first message on."""

    def __init__(self, call: Any, first: list[events_pb2.RuntimeEvent]):
        self._call, self._first = call, first
        self.ref = ResponseRef(first[0].session_id, first[0].turn_id, first[0].seq - 1)

    async def events(self) -> AsyncGenerator[events_pb2.RuntimeEvent, None]:
        try:
            for event in self._first:
                yield event
            async for reply in self._call:
                for event in reply.events:
                    yield event
        except grpc.aio.AioRpcError as exc:
            raise Refused(GatewayStatus.of(exc)) from None
        finally:
            # The caller went away (or we stopped reading): end the gateway's stream too, which frees the
            # tenant's stream slot and, for SendMessage (cancel_on_disconnect), cancels the turn.
            self._call.cancel()


# --------------------------------------------------------------------------- what a request asks for


@dataclass(frozen=True)
class ToolResult:
    """A role "tool" message / function_call_output: the result of a client tool call we handed out."""

    call_id: str
    content: str
    param: str  # where in the request, for errors


@dataclass
class TurnInput:
    """One request, translated: which agent or session, and what the turn gets."""

    agent: str  # "" when continuing a session without naming its agent
    session_id: str  # "" opens a new session
    content: str = ""  # the user message (or the answer to a question or approval)
    tool_result: ToolResult | None = None
    client_tools: list[messages_pb2.ToolSpec] = field(default_factory=list)
    user_id: str = ""
    model_param: str = "model"


def check_agent(model: Any, *, required: bool) -> str:
    """`model` names a cogmesh agent; versions and aliases (`agent@version`) come with agent versions."""
    if model is None or model == "":
        if required:
            raise invalid("model", "`model` is required: name the cogmesh agent to talk to (GET /v1/models lists them)")
        return ""
    if not isinstance(model, str):
        raise invalid("model", "`model` must be a string: a cogmesh agent's name")
    if "@" in model:
        raise invalid(
            "model",
            f"`model` {model!r} names a version or alias, which cogmesh agents do not have yet: "
            "name the agent alone (GET /v1/models lists them)",
        )
    if len(model) > MAX_ID:
        raise invalid("model", f"`model` must be at most {MAX_ID} characters")
    return model


def compose(history: Sequence[tuple[str, str]], content: str) -> str:
    """A new session's first message: the conversation the caller sent before it, then the message itself.

    cogmesh sessions keep their own history and the agent its own system prompt, so a new
    session's earlier messages (system and developer ones included) reach the model as a
    labelled transcript at the head of the turn's message.
    """
    lines = [f"{role}: {text}" for role, text in history if text]
    if not lines:
        return content
    return "<conversation so far>\n" + "\n".join(lines) + "\n</conversation so far>\n\n" + content


def function_tool(name: Any, description: Any, parameters: Any, param: str) -> messages_pb2.ToolSpec:
    """A caller's function tool as a cogmesh client tool of this turn."""
    if not isinstance(name, str) or not name:
        raise invalid(f"{param}.name", "a function tool needs a name")
    if description is not None and not isinstance(description, str):
        raise invalid(f"{param}.description", "must be a string")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise invalid(f"{param}.parameters", "must be a JSON Schema object")
    spec = messages_pb2.ToolSpec(name=name, description=description or "")
    try:
        spec.parameters.update(parameters)
    except (ValueError, TypeError) as exc:
        raise invalid(f"{param}.parameters", f"is not a JSON object protobuf can hold: {exc}") from None
    return spec


def check_tool_choice(value: Any, param: str = "tool_choice") -> bool:
    """Whether the turn offers the caller's tools: "auto" (the default) yes, "none" no; forcing is not possible."""
    if value is None or value == "auto":
        return True
    if value == "none":
        return False
    raise invalid(
        param,
        'cogmesh agents choose their own tool calls: `tool_choice` may be "auto" or "none", '
        f"not {json.dumps(value)[:200]}",
        code="unsupported_value",
    )


# --------------------------------------------------------------------------- starting a turn


async def open_session(gateway: Gateway, turn: TurnInput) -> resources_pb2.Session:
    """The session the turn runs in: the named one (of the named agent, if any), else a new one."""
    if turn.session_id:
        reply = await gateway.call("GetSession", gateway_pb2.GetSessionRequest(session_id=turn.session_id))
        session: resources_pb2.Session = reply.session
        if turn.agent and turn.agent != session.agent:
            raise invalid(
                turn.model_param,
                f"session {session.session_id!r} runs agent {session.agent!r}, not {turn.agent!r}: "
                "a session keeps its agent (leave `model` as it was, or open a new session)",
            )
        return session
    created = await gateway.call(
        "CreateSession", gateway_pb2.CreateSessionRequest(agent=turn.agent, user_id=turn.user_id)
    )
    return created.session  # type: ignore[no-any-return]


async def start_turn(gateway: Gateway, session_id: str, turn: TurnInput) -> TurnStream:
    """Send the message, answer the client tool call, or answer the question or approval the session waits on."""
    if turn.tool_result is not None:
        ref = CallRef.parse(turn.tool_result.call_id)
        if ref is None or ref.session_id != session_id:
            raise invalid(
                turn.tool_result.param,
                f"{turn.tool_result.call_id!r} is not a tool call this session's last reply asked for",
            )
        result = turns_pb2.ClientToolResult(content=turn.tool_result.content)
        answer = gateway_pb2.AnswerInterruptRequest(
            session_id=session_id, interrupt_id=ref.interrupt_id, tool_result=result
        )
        return await gateway.open("AnswerInterrupt", answer)
    send = gateway_pb2.SendMessageRequest(
        session_id=session_id, content=turn.content, client_tools=turn.client_tools, cancel_on_disconnect=True
    )
    try:
        return await gateway.open("SendMessage", send)
    except Refused as refused:
        interrupt_id = is_paused_refusal(refused.status)
        if not interrupt_id:
            raise
        return await answer_pause(gateway, session_id, interrupt_id, turn.content)


async def answer_pause(gateway: Gateway, session_id: str, interrupt_id: str, text: str) -> TurnStream:
    """The user's message answers the paused turn: "approve" / "reject[: reason]" an approval, any text a question.

    Which one the turn waits for is the gateway's to say: an answer of the wrong kind is refused
    (INVALID_ARGUMENT naming the answer's field) before anything is recorded, so the other is tried.
    """
    approval = approval_answer(text)
    kinds = ["approval", "user_input"] if approval is not None else ["user_input"]
    for kind in kinds:
        if kind == "approval":
            assert approval is not None
            request = gateway_pb2.AnswerInterruptRequest(
                session_id=session_id, interrupt_id=interrupt_id, approval=approval
            )
        else:
            request = gateway_pb2.AnswerInterruptRequest(
                session_id=session_id, interrupt_id=interrupt_id, user_input=text
            )
        try:
            return await gateway.open("AnswerInterrupt", request)
        except Refused as refused:
            if not wrong_kind(refused.status, kind):
                raise
            waits_for = refused.status.violations[0][1]
    raise OpenAIError(
        409,
        f"session {session_id!r} has a paused turn that a user message cannot answer ({waits_for}): "
        'answer an approval with "approve", "reject: <reason>" or "edit: <JSON>", and a client tool call with a '
        'role "tool" message (Responses API: a function_call_output item) carrying its tool_call_id',
        code="session_paused",
        headers={"x-should-retry": "false"},
    )


def wrong_kind(status: GatewayStatus, given: str) -> bool:
    return status.code == grpc.StatusCode.INVALID_ARGUMENT and any(f == given for f, _ in status.violations)


def approval_answer(text: str) -> turns_pb2.ApprovalAnswer | None:
    """ "approve", "reject[: reason]" or "edit: {arguments as JSON}" as an approval decision; else None."""
    if _APPROVE.fullmatch(text):
        return turns_pb2.ApprovalAnswer(decision=events_pb2.APPROVAL_DECISION_APPROVE)
    rejected = _REJECT.fullmatch(text)
    if rejected:
        reason = rejected.group("reason") or "rejected by the user"
        return turns_pb2.ApprovalAnswer(decision=events_pb2.APPROVAL_DECISION_REJECT, reason=reason)
    edited = _EDIT.fullmatch(text)
    if edited:
        try:
            arguments = json.loads(edited.group("arguments"))
        except ValueError:
            return None  # not JSON after all: the text answers a question, or is refused as an approval
        answer = turns_pb2.ApprovalAnswer(decision=events_pb2.APPROVAL_DECISION_EDIT)
        answer.edited_arguments.update(arguments)
        return answer
    return None


# --------------------------------------------------------------------------- events -> pieces


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class ClientCall:
    call_id: str
    name: str
    arguments: str  # JSON, as OpenAI's function calls carry them


@dataclass(frozen=True)
class Interrupt:
    """A question or an approval the turn waits on, as the `cogmesh.interrupt` object describes it."""

    details: dict[str, Any]


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class End:
    status: Literal["completed", "paused", "failed"]
    event: events_pb2.RuntimeEvent


Piece = Text | ClientCall | Interrupt | Usage | End


def _struct(value: struct_pb2.Struct) -> dict[str, Any]:
    return json_format.MessageToDict(value)


def approval_text(event: events_pb2.ApprovalRequired) -> str:
    arguments = json.dumps(_struct(event.arguments), ensure_ascii=False)
    why = f" ({event.description})" if event.description else ""
    asked = f"{event.prompt}\n" if event.prompt else ""  # the agent's approval prompt, for the reviewer
    return (
        f"{asked}Approval needed: the agent wants to run {event.action_name} with {arguments}{why}. "
        'Answer "approve", "reject" (or "reject: <reason>"), or "edit: <arguments as JSON>".'
    )


def interrupt_details(event: events_pb2.RuntimeEvent) -> dict[str, Any]:
    if event.HasField("approval_required"):
        approval = event.approval_required
        return {
            "type": "approval",
            "id": approval.interrupt_id,
            "tool": approval.action_name,
            "arguments": _struct(approval.arguments),
            "description": approval.description,
            "prompt": approval.prompt,
            "defaults": _struct(approval.defaults),
            "allowed_decisions": [_DECISIONS[d] for d in approval.allowed_decisions if d in _DECISIONS],
            "answer": 'the next user message in this session: "approve", "reject" / "reject: <reason>", '
            'or "edit: <arguments as JSON>"',
        }
    question = event.user_input_requested
    return {
        "type": "question",
        "id": question.interrupt_id,
        "prompt": question.prompt,
        "answer": "the next user message in this session",
    }


@dataclass
class TurnReader:
    """Reads a turn's events as pieces, and keeps what a whole response needs once they end."""

    ref: ResponseRef
    events: list[events_pb2.RuntimeEvent] = field(default_factory=list)
    streamed: list[tuple[int, str]] = field(default_factory=list)  # (seq, text) of each text piece, in order
    call: ClientCall | None = None
    interrupt: Interrupt | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    end: End | None = None

    async def pieces(self, stream: TurnStream) -> AsyncIterator[Piece]:
        async with contextlib.aclosing(stream.events()) as events:
            async for event in events:
                if event.turn_id != self.ref.turn_id:
                    continue
                self.events.append(event)
                for piece in self.translate(event):
                    self._keep(piece, event.seq)
                    yield piece
                if self.end is not None:
                    return

    def translate(self, event: events_pb2.RuntimeEvent) -> Iterator[Piece]:
        """The one mapping of cogmesh events (see the module's docstring)."""
        which = event.WhichOneof("payload")
        if which == "assistant_delta" and not event.agent and event.assistant_delta.text:
            yield Text(event.assistant_delta.text)
        elif which == "client_tool_call":
            call = event.client_tool_call.call
            ref = CallRef(event.session_id, event.client_tool_call.interrupt_id)
            yield ClientCall(ref.call_id, call.name, json.dumps(_struct(call.arguments), ensure_ascii=False))
        elif which in ("approval_required", "user_input_requested"):
            asked = (
                approval_text(event.approval_required)
                if which == "approval_required"
                else event.user_input_requested.prompt
            )
            so_far = "".join(text for _, text in self.streamed)
            yield Text(f"\n\n{asked}" if so_far and not so_far[-1].isspace() else asked)
            yield Interrupt(interrupt_details(event))
        elif which == "usage":
            yield Usage(event.usage.input_tokens, event.usage.output_tokens)
        elif which == "final":
            yield End("completed", event)
        elif which == "error":
            yield End("failed", event)
        elif is_paused(event):
            yield End("paused", event)

    def _keep(self, piece: Piece, seq: int) -> None:
        if isinstance(piece, Text):
            self.streamed.append((seq, piece.text))
        elif isinstance(piece, ClientCall):
            self.call = piece
        elif isinstance(piece, Interrupt):
            self.interrupt = piece
        elif isinstance(piece, Usage):
            self.input_tokens += piece.input_tokens
            self.output_tokens += piece.output_tokens
        else:
            self.end = piece

    async def drain(self, stream: TurnStream) -> TurnReader:
        async for _ in self.pieces(stream):
            pass
        return self

    @property
    def text(self) -> str:
        """The whole reply: the final answer, else what was streamed (less any step a takeover voided)."""
        if self.end is not None and self.end.status == "completed":
            final = self.end.event.final
            if not final.text_omitted:
                return str(final.text)
        void = voided(self.events)
        return "".join(text for seq, text in self.streamed if seq not in void)

    @property
    def status(self) -> str:
        return self.end.status if self.end is not None else "in_progress"

    @property
    def error(self) -> events_pb2.TurnError | None:
        return self.end.event.error if self.end is not None and self.end.status == "failed" else None

    def cogmesh(self) -> dict[str, Any]:
        """The `cogmesh` extension object every reply carries: how to continue, and what a pause waits for."""
        return {
            "session_id": self.ref.session_id,
            "turn_id": self.ref.turn_id,
            "status": self.status,
            "interrupt": self.interrupt.details if self.interrupt is not None else None,
        }

    def created(self) -> int:
        return self.events[0].create_time.seconds if self.events else 0


def sse(data: Mapping[str, Any], event: str | None = None) -> bytes:
    """One server-sent event."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()
