"""POST /v1/chat/completions: a cogmesh turn as a chat completion, whole or as `chat.completion.chunk`s.

The session holds the conversation, so a request continuing one (the `X-Cogmesh-Session` header,
or a role "tool" message answering a tool call we handed out) sends only its last message: a user
message starts the turn (or answers the question or approval the session waits on), a tool message
answers the paused client tool call. A request opening a new session sends its earlier messages
ahead of the last one as a transcript (turns.compose).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from gateway.web.openai.errors import OpenAIError, from_turn, invalid
from gateway.web.openai.turns import (
    SESSION_HEADER,
    CallRef,
    ClientCall,
    End,
    Gateway,
    Refused,
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

ROLES = ("system", "developer", "user", "assistant", "tool")


def text_of(content: Any, param: str, *, required: bool = True) -> str:
    """A message's content as text: a string, or text parts (cogmesh turns carry text only)."""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text", "output_text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise invalid(f"{param}[{i}]", f"cogmesh turns take text only: a {kind!r} part cannot be sent")
            if not isinstance(part.get("text"), str):
                raise invalid(f"{param}[{i}].text", "must be a string")
            texts.append(part["text"])
        text = "".join(texts)
    elif content is None and not required:
        text = ""
    else:
        raise invalid(param, "must be a string or an array of text parts")
    if required and not text.strip():
        raise invalid(param, "is empty: the turn needs text")
    return text


def history_line(message: dict[str, Any], param: str) -> tuple[str, str]:
    """An earlier message as a line of a new session's transcript."""
    role = message["role"]
    text = text_of(message.get("content"), f"{param}.content", required=False)
    calls = message.get("tool_calls") or []
    if role == "assistant" and isinstance(calls, list):
        for call in calls:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            if isinstance(function, dict):
                text += f" [called {function.get('name')}({function.get('arguments', '')})]"
    if role == "tool":
        role = f"tool result ({message.get('tool_call_id', '')})"
    return role, text.strip()


def chat_turn(body: dict[str, Any], session_header: str) -> TurnInput:
    """The request's turn: which session, what it sends, which client tools it offers."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "`messages` must be a non-empty array")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            role = message.get("role") if isinstance(message, dict) else None
            raise invalid(f"messages[{i}].role", f"must be one of {', '.join(ROLES)}, not {role!r}")
    if body.get("n") not in (None, 1):
        raise invalid("n", "a cogmesh turn has one answer: `n` must be 1", code="unsupported_value")
    response_format = body.get("response_format")
    if response_format is not None and (not isinstance(response_format, dict) or response_format.get("type") != "text"):
        raise invalid(
            "response_format",
            'only {"type": "text"}: an agent\'s structured output is set in its definition',
            code="unsupported_value",
        )
    agent = check_agent(body.get("model"), required=not session_header)
    turn = TurnInput(agent=agent, session_id=session_header, user_id=user_of(body.get("user")))
    if check_tool_choice(body.get("tool_choice")):
        turn.client_tools = client_tools(body.get("tools"))

    last = len(messages) - 1
    if messages[last]["role"] == "tool":
        first = last
        while first > 0 and messages[first - 1]["role"] == "tool":
            first -= 1
        if first != last:
            raise invalid(
                f"messages[{first}]",
                "cogmesh asks for one client tool call at a time: answer it with one role tool message",
            )
        message = messages[last]
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise invalid(f"messages[{last}].tool_call_id", "is required: the id of the tool call this answers")
        ref = CallRef.parse(call_id)
        if ref is None:
            raise invalid(f"messages[{last}].tool_call_id", f"{call_id!r} is not a tool call cogmesh asked for")
        if turn.session_id and turn.session_id != ref.session_id:
            raise invalid(
                f"messages[{last}].tool_call_id",
                f"{call_id!r} was asked for in another session than {SESSION_HEADER} names",
            )
        turn.session_id = ref.session_id
        content = text_of(message.get("content"), f"messages[{last}].content", required=False)
        turn.tool_result = ToolResult(call_id, content, f"messages[{last}].tool_call_id")
        return turn
    if messages[last]["role"] != "user":
        raise invalid(
            f"messages[{last}].role",
            "the last message must be a user message, or a tool message answering the tool call of the last reply",
        )
    content = text_of(messages[last].get("content"), f"messages[{last}].content")
    if turn.session_id:
        turn.content = content  # the session has the conversation: earlier messages are not sent again
    else:
        history = [history_line(m, f"messages[{i}]") for i, m in enumerate(messages[:last])]
        turn.content = compose(history, content)
    return turn


def user_of(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > 256:
        raise invalid("user", "must be a string of at most 256 characters")
    return value


def client_tools(tools: Any) -> list[Any]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise invalid("tools", "must be an array of function tools")
    specs = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise invalid(
                f"tools[{i}]",
                f"only function tools become the turn's client tools, not {kind!r}",
                code="unsupported_value",
            )
        function = tool["function"]
        specs.append(
            function_tool(
                function.get("name"), function.get("description"), function.get("parameters"), f"tools[{i}].function"
            )
        )
    return specs


def stream_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise invalid("stream_options", "must be an object")
    return bool(options.get("include_usage"))


def usage(reader: TurnReader) -> dict[str, int]:
    prompt, completion = reader.input_tokens, reader.output_tokens
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def tool_call(call: ClientCall, index: int | None = None) -> dict[str, Any]:
    shaped: dict[str, Any] = {"id": call.call_id, "type": "function"}
    shaped["function"] = {"name": call.name, "arguments": call.arguments}
    return shaped if index is None else {"index": index, **shaped}


def finish_reason(reader: TurnReader) -> str:
    return "tool_calls" if reader.call is not None else "stop"


async def create(request: Request, gateway: Gateway, body: dict[str, Any]) -> Response:
    header = request.headers.get(SESSION_HEADER, "").strip()
    if len(header) > 256:
        raise invalid(None, f"the {SESSION_HEADER} header must be a session id (at most 256 characters)")
    stream = bool(body.get("stream"))
    include_usage = stream_usage(body) if stream else False
    turn = chat_turn(body, header)
    session = await open_session(gateway, turn)
    headers = {SESSION_HEADER: session.session_id}
    try:
        opened = await start_turn(gateway, session.session_id, turn)
    except (OpenAIError, Refused) as refused:
        error = refused.openai() if isinstance(refused, Refused) else refused
        return error.response(headers)  # the session exists now: say which, so the caller can go on in it
    reader = TurnReader(opened.ref)
    if stream:
        chunks = completion_chunks(reader, opened, session.agent, include_usage)
        return StreamingResponse(
            chunks, media_type="text/event-stream", headers={**headers, "cache-control": "no-cache"}
        )
    try:
        await reader.drain(opened)
    except Refused as refused:
        return refused.openai().response(headers)
    failed = reader.error
    if failed is not None:
        return from_turn(failed, reader.ref.session_id, reader.ref.turn_id).response(headers)
    if reader.end is None:
        return OpenAIError(502, "the turn's stream ended before the turn did", "server_error").response(headers)
    message: dict[str, Any] = {"role": "assistant", "content": reader.text or None, "refusal": None}
    if reader.call is not None:
        message["tool_calls"] = [tool_call(reader.call)]
    completion = {
        "id": f"chatcmpl-{reader.ref.token}",
        "object": "chat.completion",
        "created": reader.created(),
        "model": session.agent,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(reader)}],
        "usage": usage(reader),
        "system_fingerprint": None,
        "cogmesh": reader.cogmesh(),
    }
    return JSONResponse(completion, headers=headers)


async def completion_chunks(
    reader: TurnReader, opened: TurnStream, agent: str, include_usage: bool
) -> AsyncIterator[bytes]:
    base: dict[str, Any] = {"id": f"chatcmpl-{reader.ref.token}", "object": "chat.completion.chunk", "model": agent}
    base["system_fingerprint"] = None
    created = 0  # the first event's time, once it is read

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        body = {**base, "created": created, "choices": [choice], **extra}
        if include_usage:
            body["usage"] = None
        return sse(body)

    try:
        async for piece in reader.pieces(opened):
            if not created:
                created = reader.created()
                yield chunk({"role": "assistant", "content": ""})
            if isinstance(piece, Text):
                yield chunk({"content": piece.text})
            elif isinstance(piece, ClientCall):
                yield chunk({"tool_calls": [tool_call(piece, 0)]})
            elif isinstance(piece, End) and piece.status == "failed":
                error = from_turn(piece.event.error, reader.ref.session_id, reader.ref.turn_id)
                yield sse(error.body())
                return
    except Refused as refused:
        yield sse(refused.openai().body())
        return
    if reader.end is None:
        yield sse(OpenAIError(502, "the turn's stream ended before the turn did", "server_error").body())
        return
    yield chunk({}, finish_reason(reader), cogmesh=reader.cogmesh())
    if include_usage:
        yield sse({**base, "created": created, "choices": [], "usage": usage(reader)})
    yield b"data: [DONE]\n\n"


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise invalid(None, f"the request body is not JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise invalid(None, "the request body must be a JSON object")
    return body
