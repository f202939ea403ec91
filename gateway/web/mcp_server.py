"""cogmesh agents as MCP tools, over streamable HTTP at /mcp on the browser edge.

One tool per agent marked `mcp_exposed` that can own a session, as the gateway's ListAgents
lists them to the caller's key: the tool's name is the agent's (agent names already fit MCP's
tool-name rule), its description the agent's, its input `{message, session_id?}`, and its
output schema the agent's `output_schema` when that is a JSON object schema. A call is one
turn: CreateSession (or GetSession for a given `session_id`), then SendMessage; the turn's
final text becomes the result's text, its structured output `structuredContent`, and the
session id rides in the result's `_meta` so the caller can continue. With a progressToken,
the assistant deltas of the session's agent go out as progress notifications whose messages
are the deltas' text.

A turn that pauses (an approval, or a question through ask_user) ends the call with a
result that says what it waits for and how to answer: call the tool again with the same
`session_id` and the answer as `message` ("approve", "reject" or "reject: <reason>" for an
approval; the answer's text for a question). The answer resumes the turn and that call
returns its end. A paused result is not an error, except for a tool with an output schema,
whose successful results must carry the structured answer.

The edge decides nothing itself: every request first asks the gateway for the agents with the
caller's `Authorization` (and trace) headers, so a bad key is HTTP 401 before MCP starts, and
keys, tenancy, scopes, limits and errors are the gateway's. The MCP server is stateless (no
Mcp-Session-Id): any edge replica serves any request, and cogmesh's own session id carries
the conversation. Events map one way here, through the Python client's TurnResult (how a
turn's events are read); docs/mcp.md has the table.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import grpc
import mcp_types as types
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from cogmesh.client.results import TurnResult
from cogmesh.common.v1 import events_pb2, resources_pb2, turns_pb2
from cogmesh.gateway.v1 import gateway_pb2 as pb
from cogmesh.gateway.v1 import gateway_pb2_grpc
from gateway.web.forward import FORWARDED_HEADERS

MCP_PATH = "/mcp"
KEY_CHECK_TIMEOUT_S = 10.0
# Result _meta keys, in cogmesh's reverse-DNS prefix (the runtime's MCP client sends the same).
SESSION_META = "dev.cogmesh/session_id"
TURN_META = "dev.cogmesh/turn_id"
WAITING_META = "dev.cogmesh/waiting_for"
ERROR_META = "dev.cogmesh/error"

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "minLength": 1, "description": "The user message the agent answers."},
        "session_id": {
            "type": "string",
            "description": (
                "Continue this cogmesh session (a previous result's _meta 'dev.cogmesh/session_id'); "
                "omit to start a new one. To a paused session, message is the answer it waits for."
            ),
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}
INSTRUCTIONS = (
    "Each tool is a cogmesh agent: call it with a message and it answers. The result's _meta holds "
    f"'{SESSION_META}'; pass it back as session_id to continue the conversation or to answer a paused turn."
)
# HTTP status of a refused key check, by the gateway's status code (others: 502).
HTTP_STATUS = {
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}
# The scope entry holding the key check's ListAgents reply, read by the handler of the same request.
AGENTS_SCOPE_KEY = "cogmesh.mcp.agents"


def forwarded(headers: Headers) -> tuple[tuple[str, str], ...]:
    return tuple((name, headers[name]) for name in FORWARDED_HEADERS if name in headers)


def exposed(agents: Sequence[resources_pb2.Agent]) -> list[resources_pb2.Agent]:
    """Agents offered as tools: marked `mcp_exposed` and able to own a session."""
    owners = (resources_pb2.AGENT_MODE_PRIMARY, resources_pb2.AGENT_MODE_ALL)
    return [a for a in agents if a.mcp_exposed and a.mode in owners]


def output_schema(agent: resources_pb2.Agent) -> dict[str, Any] | None:
    """The agent's output schema if MCP can carry it: outputSchema must describe an object."""
    if not agent.HasField("output_schema"):
        return None
    schema = json_format.MessageToDict(agent.output_schema)
    return schema if schema.get("type") == "object" else None


def tool(agent: resources_pb2.Agent) -> types.Tool:
    return types.Tool(
        name=agent.name,
        description=agent.description or f"The cogmesh agent {agent.name!r}.",
        input_schema=INPUT_SCHEMA,
        output_schema=output_schema(agent),
    )


def approval_answer(message: str) -> turns_pb2.ApprovalAnswer | None:
    """'approve', 'reject' or 'reject: <reason>' (any case) as an approval; None for anything else."""
    word, _, reason = message.strip().partition(":")
    word = word.strip().lower()
    if word == "approve" and not reason.strip():
        return turns_pb2.ApprovalAnswer(decision=events_pb2.APPROVAL_DECISION_APPROVE)
    if word == "reject":
        return turns_pb2.ApprovalAnswer(decision=events_pb2.APPROVAL_DECISION_REJECT, reason=reason.strip())
    return None


def error_details(error: grpc.aio.AioRpcError) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """(ErrorInfo's reason and metadata, BadRequest's (field, description) violations) of a gateway error."""
    info: dict[str, str] = {}
    violations: list[tuple[str, str]] = []
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    except ValueError:
        status = None
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            unpacked = error_details_pb2.ErrorInfo()
            detail.Unpack(unpacked)
            info = {"reason": unpacked.reason, **unpacked.metadata}
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations += [(v.field, v.description) for v in bad.field_violations]
    return info, violations


def wrong_answer(error: grpc.aio.AioRpcError, given: str) -> bool:
    """Whether the gateway refused an answer of this kind because the interrupt waits for another kind."""
    return any(field == given and "waits for" in text for field, text in error_details(error)[1])


def text_result(text: str, meta: dict[str, Any], *, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error, meta=meta)


def refused(error: grpc.aio.AioRpcError, meta: dict[str, Any]) -> types.CallToolResult:
    """A gateway error as a tool error: its code and message, and its ErrorInfo in _meta."""
    info, _ = error_details(error)
    code = error.code().name
    return text_result(f"{code}: {error.details()}", {**meta, ERROR_META: {"code": code, **info}}, is_error=True)


def kind_name(kind: int) -> str:
    return events_pb2.ErrorKind.Name(kind).removeprefix("ERROR_KIND_").lower()


def outcome(agent: resources_pb2.Agent, session_id: str, turn: TurnResult) -> types.CallToolResult:
    """How the turn ended, as a tool result: its answer, its error, or what it waits for."""
    meta: dict[str, Any] = {SESSION_META: session_id, TURN_META: turn.turn_id}
    if turn.ok:
        structured = turn.structured_output if output_schema(agent) is not None else None
        return types.CallToolResult(
            content=[types.TextContent(text=turn.text)], structured_content=structured, meta=meta
        )
    if turn.error is not None:
        kind = kind_name(turn.error.kind)
        meta[ERROR_META] = {"kind": kind, "retryable": turn.error.retryable}
        return text_result(f"{kind}: {turn.error.message}", meta, is_error=True)
    pause = turn.pause
    if pause is None:
        return text_result("the turn's stream ended before the turn did", meta, is_error=True)
    again = f"call the tool {agent.name!r} again with session_id {session_id!r} and"
    if pause.kind == "approval":
        arguments = json.dumps(pause.arguments, sort_keys=True)
        text = (
            f"The turn waits for approval of the tool call {pause.tool_name} {arguments}"
            f"{f' ({pause.approval.description})' if pause.approval.description else ''}: "
            f"{again} message 'approve', 'reject' or 'reject: <reason>'."
        )
        waiting = {"kind": "approval", "tool": pause.tool_name, "arguments": pause.arguments}
    elif pause.kind == "user_input":
        text = f"The agent asks: {pause.prompt} To answer, {again} your answer as message."
        waiting = {"kind": "user_input", "prompt": pause.prompt}
    else:  # a client tool, declared by a caller of the gateway itself (MCP callers declare none)
        text = (
            f"The turn waits for the client tool {pause.tool_name}, which only the gateway's AnswerInterrupt answers."
        )
        waiting = {"kind": "client_tool", "tool": pause.tool_name}
    meta[WAITING_META] = {**waiting, "interrupt_id": pause.interrupt_id}
    # A tool with an output schema owes a successful result its structured answer, which a pause lacks.
    return text_result(text, meta, is_error=output_schema(agent) is not None)


def bad_arguments(arguments: dict[str, Any]) -> str | None:
    message, session_id = arguments.get("message"), arguments.get("session_id")
    if not isinstance(message, str) or not message.strip():
        return "arguments.message: a non-empty string is required"
    if session_id is not None and not isinstance(session_id, str):
        return "arguments.session_id: must be a string"
    if unknown := sorted(set(arguments) - {"message", "session_id"}):
        return f"arguments: unknown {', '.join(unknown)} (the tool takes message and session_id)"
    return None


class McpEdge:
    """The MCP server (the SDK's low-level Server, stateless streamable HTTP) and its key check, as an ASGI app."""

    def __init__(self) -> None:
        self._gateway: Any = None
        self.server: Server[Any] = Server(
            "cogmesh",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            get_tool_input_schema=lambda _name: INPUT_SCHEMA,  # every tool takes the same input
        )
        self.manager = StreamableHTTPSessionManager(self.server, stateless=True)

    @asynccontextmanager
    async def serving(self, channel: grpc.aio.Channel) -> AsyncIterator[None]:
        """Serve through this channel to the gateway, within the session manager's run() (the app's lifespan)."""
        self._gateway = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        try:
            async with self.manager.run():
                yield
        finally:
            self._gateway = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._gateway is None:
            await http_error(503, "the edge is not connected to the gateway (starting or stopping)")(
                scope, receive, send
            )
            return
        try:
            listed = await self._gateway.ListAgents(
                pb.ListAgentsRequest(), metadata=forwarded(Headers(scope=scope)), timeout=KEY_CHECK_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as exc:
            status = HTTP_STATUS.get(exc.code(), 502)
            await http_error(status, f"{exc.code().name}: {exc.details()}")(scope, receive, send)
            return
        scope[AGENTS_SCOPE_KEY] = listed.agents
        await self.manager.handle_request(scope, receive, send)

    def _agents(self, ctx: ServerRequestContext[Any, Any]) -> list[resources_pb2.Agent]:
        listed = ctx.request.scope.get(AGENTS_SCOPE_KEY) if ctx.request is not None else None
        if listed is None:
            raise MCPError(types.INTERNAL_ERROR, "the request reached MCP without the edge's key check")
        return exposed(listed)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool(a) for a in self._agents(ctx)])

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        agents = self._agents(ctx)
        agent = next((a for a in agents if a.name == params.name), None)
        if agent is None:
            names = ", ".join(a.name for a in agents) or "(none)"
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}; the tools are: {names}")
        arguments = params.arguments or {}
        if problem := bad_arguments(arguments):
            return text_result(problem, {}, is_error=True)
        metadata = forwarded(ctx.request.headers) if ctx.request is not None else ()
        session_id = arguments.get("session_id") or ""
        meta = {SESSION_META: session_id} if session_id else {}
        try:
            if session_id:
                session = (
                    await self._gateway.GetSession(pb.GetSessionRequest(session_id=session_id), metadata=metadata)
                ).session
                if session.agent != agent.name:
                    return text_result(
                        f"session {session_id!r} is a session of the agent {session.agent!r}, not of {agent.name!r}",
                        meta,
                        is_error=True,
                    )
            else:
                session = (
                    await self._gateway.CreateSession(pb.CreateSessionRequest(agent=agent.name), metadata=metadata)
                ).session
                meta = {SESSION_META: session.session_id}
            turn = await self._turn(ctx, session.session_id, arguments["message"], metadata)
        except grpc.aio.AioRpcError as exc:
            return refused(exc, meta)
        if isinstance(turn, str):
            return text_result(turn, meta, is_error=True)
        return outcome(agent, session.session_id, turn)

    async def _turn(
        self, ctx: ServerRequestContext[Any, Any], session_id: str, message: str, metadata: Any
    ) -> TurnResult | str:
        """The turn the message starts, or resumes when the session's turn is paused; a str: why it cannot."""
        # The caller closing the response (or cancelling the request) stops the turn: it is the tool call.
        send = pb.SendMessageRequest(session_id=session_id, content=message, cancel_on_disconnect=True)
        try:
            return await self._collect(ctx, self._gateway.SendMessage(send, metadata=metadata))
        except grpc.aio.AioRpcError as exc:
            interrupt_id = (
                error_details(exc)[0].get("interrupt_id") if exc.code() == grpc.StatusCode.FAILED_PRECONDITION else None
            )
            if not interrupt_id:
                raise
        # A paused turn: the message answers it. Which kind it waits for, the gateway says when asked wrongly.
        approval = approval_answer(message)
        for kind in ("approval", "user_input") if approval else ("user_input", "approval"):
            if kind == "approval" and approval is None:
                return (
                    f"session {session_id!r} waits for an approval (interrupt {interrupt_id!r}): "
                    "answer with message 'approve', 'reject' or 'reject: <reason>'"
                )
            answer = (
                pb.AnswerInterruptRequest(session_id=session_id, interrupt_id=interrupt_id, approval=approval)
                if kind == "approval"
                else pb.AnswerInterruptRequest(session_id=session_id, interrupt_id=interrupt_id, user_input=message)
            )
            try:
                return await self._collect(ctx, self._gateway.AnswerInterrupt(answer, metadata=metadata))
            except grpc.aio.AioRpcError as exc:
                if not (exc.code() == grpc.StatusCode.INVALID_ARGUMENT and wrong_answer(exc, kind)):
                    raise
        return (
            f"session {session_id!r} waits for a client tool's result (interrupt {interrupt_id!r}), "
            "which only the gateway's AnswerInterrupt gives"
        )

    async def _collect(self, ctx: ServerRequestContext[Any, Any], call: Any) -> TurnResult:
        """The turn's events until it ends or pauses; its agent's deltas go out as progress as they come.

        The deltas of one gateway message (events that queued up together) make one notification: each
        costs the SDK a millisecond or two, so a caller slower than the model gets fewer, longer ones.
        """
        turn = TurnResult()
        notified = 0
        try:
            async for reply in call:
                turn.events.extend(reply.events)
                text = "".join(
                    e.assistant_delta.text for e in reply.events if e.HasField("assistant_delta") and not e.agent
                )
                if text:
                    notified += 1
                    await ctx.session.report_progress(notified, message=text)
        finally:
            call.cancel()  # a no-op once the stream ended; else (the caller left) frees the gateway's stream
        return turn


def http_error(status: int, message: str) -> JSONResponse:
    """An HTTP refusal before MCP starts, with a JSON-RPC error body (no request id), as the MCP SDK answers."""
    code = types.INVALID_REQUEST if status < 500 else types.INTERNAL_ERROR
    headers = {"www-authenticate": 'Bearer realm="cogmesh"'} if status == 401 else None
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return JSONResponse(body, status, headers=headers)


def routes(edge: McpEdge) -> list[BaseRoute]:
    return [Route(MCP_PATH, edge)]
