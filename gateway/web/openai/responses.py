"""POST /v1/responses and GET /v1/responses/{id}: a cogmesh turn as a Response, whole or as its stream of events.

A response continues a session through `previous_response_id` (its id names the session, the
turn and where its events start in the session's log), through `conversation` (a session id), or
through the `X-Cogmesh-Session` header; otherwise it opens one. GET rebuilds a response from the
session's event log, so there is no response store and any edge replica answers it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from gateway.web.openai.chat import text_of, user_of
from gateway.web.openai.errors import GatewayStatus, OpenAIError, from_turn, invalid
from gateway.web.openai.turns import (
    SESSION_HEADER,
    CallRef,
    ClientCall,
    End,
    Gateway,
    Refused,
    ResponseRef,
    Text,
    ToolResult,
    TurnInput,
    TurnReader,
    TurnStream,
    check_agent,
    check_tool_choice,
    compose,
    function_tool,
    open_session,
    sse,
    start_turn,
)

MESSAGE_ROLES = ("user", "assistant", "system", "developer")


def not_found(response_id: str, param: str | None = None) -> OpenAIError:
    return OpenAIError(
        404,
        f"response {response_id!r} not found (not one of this edge's ids, or its session or events are gone)",
        param=param,
        code="response_not_found",
        headers={"x-should-retry": "false"},
    )


def response_ref(response_id: str, param: str | None = None) -> ResponseRef:
    ref = ResponseRef.parse(response_id.removeprefix("resp_")) if response_id.startswith("resp_") else None
    if ref is None:
        raise not_found(response_id, param)
    return ref


def conversation_id(value: Any) -> str:
    """`conversation`: a cogmesh session id, given as a string or as {"id": ...}."""
    if isinstance(value, dict):
        value = value.get("id")
    if not isinstance(value, str) or not value or len(value) > 256:
        raise invalid("conversation", "must be a cogmesh session id (a string, or an object with `id`)")
    return value


def input_items(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise invalid("input", "`input` must be a string or a non-empty array of input items")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise invalid(f"input[{i}]", "must be an object")
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") not in MESSAGE_ROLES:
            raise invalid(f"input[{i}].role", f"must be one of {', '.join(MESSAGE_ROLES)}, not {item.get('role')!r}")
        if kind not in ("message", "function_call", "function_call_output"):
            raise invalid(
                f"input[{i}].type",
                f"cogmesh turns take messages and function call outputs, not {kind!r} items",
                code="unsupported_value",
            )
    return value


def history_line(item: dict[str, Any], param: str) -> tuple[str, str]:
    kind = item.get("type", "message")
    if kind == "function_call":
        return "assistant", f"[called {item.get('name')}({item.get('arguments', '')})]"
    if kind == "function_call_output":
        return f"tool result ({item.get('call_id', '')})", text_of(
            item.get("output"), f"{param}.output", required=False
        )
    return str(item["role"]), text_of(item.get("content"), f"{param}.content", required=False).strip()


def function_tools(tools: Any) -> list[Any]:
    """Responses-shaped function tools ({"type": "function", "name", ...}) as the turn's client tools."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise invalid("tools", "must be an array of function tools")
    flat = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise invalid(
                f"tools[{i}]",
                f"only function tools become the turn's client tools, not {kind!r}",
                code="unsupported_value",
            )
        flat.append(function_tool(tool.get("name"), tool.get("description"), tool.get("parameters"), f"tools[{i}]"))
    return flat


def responses_turn(body: dict[str, Any], session_header: str) -> TurnInput:
    previous, conversation = body.get("previous_response_id"), body.get("conversation")
    if previous is not None and conversation is not None:
        raise invalid("conversation", "give `previous_response_id` or `conversation`, not both")
    session_id = session_header
    if previous is not None:
        if not isinstance(previous, str):
            raise invalid("previous_response_id", "must be a response id")
        session_id = response_ref(previous, "previous_response_id").session_id
    elif conversation is not None:
        session_id = conversation_id(conversation)
    if body.get("background"):
        raise invalid("background", "background responses are not supported: stream instead", code="unsupported_value")
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if isinstance(fmt, dict) and fmt.get("type", "text") != "text":
        raise invalid(
            "text.format",
            'only {"type": "text"}: an agent\'s structured output is set in its definition',
            code="unsupported_value",
        )
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("instructions", "must be a string")
    items = input_items(body.get("input"))
    agent = check_agent(body.get("model"), required=not session_id)
    turn = TurnInput(agent=agent, session_id=session_id, user_id=user_of(body.get("user")))
    if check_tool_choice(body.get("tool_choice")):
        turn.client_tools = function_tools(body.get("tools"))

    last = len(items) - 1
    item = items[last]
    if item.get("type") == "function_call_output":
        if last > 0 and items[last - 1].get("type") == "function_call_output":
            raise invalid(
                f"input[{last - 1}]",
                "cogmesh asks for one client tool call at a time: answer it with one function_call_output",
            )
        call_id = item.get("call_id")
        ref = CallRef.parse(call_id) if isinstance(call_id, str) else None
        if ref is None:
            raise invalid(f"input[{last}].call_id", f"{call_id!r} is not a function call cogmesh asked for")
        if turn.session_id and turn.session_id != ref.session_id:
            raise invalid(f"input[{last}].call_id", f"{call_id!r} was asked for in another session")
        turn.session_id = ref.session_id
        output = text_of(item.get("output"), f"input[{last}].output", required=False)
        turn.tool_result = ToolResult(call_id, output, f"input[{last}].call_id")  # type: ignore[arg-type]
        return turn
    if item.get("type", "message") != "message" or item.get("role") != "user":
        raise invalid(
            f"input[{last}]",
            "the last input item must be a user message, or a function_call_output answering the last response's call",
        )
    content = text_of(item.get("content"), f"input[{last}].content")
    if turn.session_id:
        turn.content = content  # the session has the conversation (and the agent its instructions)
    else:
        history = [("instructions", instructions)] if instructions else []
        history += [history_line(earlier, f"input[{i}]") for i, earlier in enumerate(items[:last])]
        turn.content = compose(history, content)
    return turn


# --------------------------------------------------------------------------- the Response object


def message_item(reader: TurnReader, text: str, status: str = "completed") -> dict[str, Any]:
    content = (
        [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}] if status != "in_progress" else []
    )
    return {
        "id": f"msg_{reader.ref.token}",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def call_item(call: ClientCall, status: str = "completed") -> dict[str, Any]:
    return {
        "id": f"fc_{call.call_id.removeprefix('call_')}",
        "type": "function_call",
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments if status == "completed" else "",
        "status": status,
    }


def output_of(reader: TurnReader, text: str) -> list[dict[str, Any]]:
    output = [message_item(reader, text)] if text else []
    if reader.call is not None:
        output.append(call_item(reader.call))
    return output


def response_object(
    reader: TurnReader, agent: str, body: dict[str, Any], *, output: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    status = {"completed": "completed", "paused": "completed", "failed": "failed"}.get(reader.status, "in_progress")
    error = reader.error
    failure = None
    if error is not None:
        failed = from_turn(error, reader.ref.session_id, reader.ref.turn_id)
        failure = {"code": failed.code, "message": failed.message}
    done = status != "in_progress"
    tokens_in, tokens_out = reader.input_tokens, reader.output_tokens
    return {
        "id": f"resp_{reader.ref.token}",
        "object": "response",
        "created_at": reader.created(),
        "status": status,
        "completed_at": reader.events[-1].create_time.seconds if status == "completed" else None,
        "model": agent,
        "output": output if output is not None else (output_of(reader, reader.text) if done else []),
        "error": failure,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "metadata": body.get("metadata") or {},
        "parallel_tool_calls": False,
        "temperature": None,
        "top_p": None,
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [],
        "text": {"format": {"type": "text"}},
        "previous_response_id": body.get("previous_response_id"),
        "conversation": {"id": reader.ref.session_id},
        "store": True,
        "usage": {
            "input_tokens": tokens_in,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": tokens_out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens_in + tokens_out,
        }
        if done
        else None,
        "cogmesh": reader.cogmesh(),
    }


# --------------------------------------------------------------------------- endpoints


async def create(request: Request, gateway: Gateway, body: dict[str, Any]) -> Response:
    header = request.headers.get(SESSION_HEADER, "").strip()
    if len(header) > 256:
        raise invalid(None, f"the {SESSION_HEADER} header must be a session id (at most 256 characters)")
    turn = responses_turn(body, header)
    session = await open_session(gateway, turn)
    headers = {SESSION_HEADER: session.session_id}
    try:
        opened = await start_turn(gateway, session.session_id, turn)
    except (OpenAIError, Refused) as refused:
        error = refused.openai() if isinstance(refused, Refused) else refused
        return error.response(headers)
    reader = TurnReader(opened.ref)
    if body.get("stream"):
        events = response_events(reader, opened, session.agent, body)
        return StreamingResponse(
            events, media_type="text/event-stream", headers={**headers, "cache-control": "no-cache"}
        )
    try:
        await reader.drain(opened)
    except Refused as refused:
        return refused.openai().response(headers)
    if reader.error is not None:
        return from_turn(reader.error, reader.ref.session_id, reader.ref.turn_id).response(headers)
    if reader.end is None:
        return OpenAIError(502, "the turn's stream ended before the turn did", "server_error").response(headers)
    return JSONResponse(response_object(reader, session.agent, body), headers=headers)


async def response_events(
    reader: TurnReader, opened: TurnStream, agent: str, body: dict[str, Any]
) -> AsyncIterator[bytes]:
    """The Responses streaming events: created, in_progress, the output items as they grow, completed or failed."""
    seq = 0

    def event(kind: str, **fields: Any) -> bytes:
        nonlocal seq
        seq += 1
        return sse({"type": kind, "sequence_number": seq - 1, **fields}, kind)

    text: list[str] = []
    output: list[dict[str, Any]] = []
    message_index: int | None = None  # output_index of the message item while it is open
    started = False

    def close_message() -> list[bytes]:
        nonlocal message_index
        if message_index is None:
            return []
        item_id, whole = f"msg_{reader.ref.token}", "".join(text)
        part = {"type": "output_text", "text": whole, "annotations": [], "logprobs": []}
        item = message_item(reader, whole)
        output.append(item)
        at = {"item_id": item_id, "output_index": message_index}
        closing = [
            event("response.output_text.done", **at, content_index=0, text=whole, logprobs=[]),
            event("response.content_part.done", **at, content_index=0, part=part),
            event("response.output_item.done", output_index=message_index, item=item),
        ]
        message_index = None
        return closing

    try:
        async for piece in reader.pieces(opened):
            if not started:
                started = True
                yield event("response.created", response=response_object(reader, agent, body, output=[]))
                yield event("response.in_progress", response=response_object(reader, agent, body, output=[]))
            if isinstance(piece, Text):
                item_id = f"msg_{reader.ref.token}"
                if message_index is None:
                    message_index = len(output)
                    yield event(
                        "response.output_item.added",
                        output_index=message_index,
                        item=message_item(reader, "", "in_progress"),
                    )
                    yield event(
                        "response.content_part.added",
                        item_id=item_id,
                        output_index=message_index,
                        content_index=0,
                        part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                    )
                text.append(piece.text)
                yield event(
                    "response.output_text.delta",
                    item_id=item_id,
                    output_index=message_index,
                    content_index=0,
                    delta=piece.text,
                    logprobs=[],
                )
            elif isinstance(piece, ClientCall):
                for closing in close_message():
                    yield closing
                index, item = len(output), call_item(piece)
                at = {"item_id": item["id"], "output_index": index}
                yield event("response.output_item.added", output_index=index, item=call_item(piece, "in_progress"))
                yield event("response.function_call_arguments.delta", **at, delta=piece.arguments)
                yield event("response.function_call_arguments.done", **at, name=piece.name, arguments=piece.arguments)
                yield event("response.output_item.done", output_index=index, item=item)
                output.append(item)
            elif isinstance(piece, End):
                for closing in close_message():
                    yield closing
                kind = "response.failed" if piece.status == "failed" else "response.completed"
                yield event(kind, response=response_object(reader, agent, body, output=output))
                return
    except Refused as refused:
        error = refused.openai()
        yield event("error", code=error.code, message=error.message, param=error.param)
        return
    yield event("error", code="server_error", message="the turn's stream ended before the turn did", param=None)


async def retrieve(gateway: Gateway, response_id: str) -> Response:
    """A response rebuilt from the session's log; one still running is returned once it ends or pauses."""
    ref = response_ref(response_id)
    try:
        session = (await gateway.call("GetSession", gateway_pb2.GetSessionRequest(session_id=ref.session_id))).session
    except Refused as refused:
        if refused.status.code == grpc.StatusCode.NOT_FOUND:
            raise not_found(response_id) from None
        raise
    call = gateway.subscribe(ref.session_id, ref.start_seq)
    first: list[events_pb2.RuntimeEvent] = []
    try:
        async for reply in call:
            if reply.events:
                first = list(reply.events)
                break
    except grpc.aio.AioRpcError as exc:
        call.cancel()
        status = GatewayStatus.of(exc)
        if status.code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.NOT_FOUND):
            raise not_found(response_id) from None  # a cursor past the log's end, or events no longer retained
        raise Refused(status) from None
    if not first or first[0].seq != ref.start_seq + 1 or first[0].turn_id != ref.turn_id:
        call.cancel()
        raise not_found(response_id)
    reader = await TurnReader(ref).drain(TurnStream(call, first))
    return JSONResponse(response_object(reader, session.agent, {}), headers={SESSION_HEADER: ref.session_id})
