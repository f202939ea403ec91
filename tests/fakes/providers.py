"""Fake model providers: scripted replies rendered in each provider's streaming wire format.

A test queues what the "model" says next (`Reply`: text deltas, tool calls whose JSON
arguments arrive in fragments, usage) or how it fails (`Fail`: an HTTP error status
with the provider's error body and headers such as retry-after), optionally with a
malformed chunk or a cut connection. The fake renders it exactly as the provider
would stream it (OpenAI chat-completions SSE, Anthropic Messages SSE, Gemini
streamGenerateContent SSE) and the official SDK under test parses it.

The HTTP is uvicorn's (keep-alive, chunked transfer for the event streams, HTTP/1.1 as a
production server speaks it); the fake is a plain ASGI app. It is not aiohttp's server
because google-genai sends its requests through aiohttp whenever aiohttp is installed,
and cogmesh runs it over httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import uvicorn

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Request:
    """A request as the fake received it."""

    method: str
    path: str  # with the query string
    headers: dict[str, str]  # lower-case names
    body: bytes
    client: tuple[str, int] = ("", 0)  # the connection it came on (address, port)

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Call:
    """A tool call; `fragments` are the JSON argument pieces as streamed (joined: the JSON)."""

    name: str
    fragments: list[str]
    id: str = ""


@dataclass
class Reply:
    text: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    usage: tuple[int, int] = (11, 7)
    delay_s: float = 0.0  # before each chunk
    cut_after: int | None = None  # close the connection after this many chunks
    malformed_at: int | None = None  # replace this chunk with invalid JSON


@dataclass
class Fail:
    status: int
    message: str = "failure"
    headers: dict[str, str] = field(default_factory=dict)
    error_type: str = ""


Step = Reply | Fail


class _Server(uvicorn.Server):
    """uvicorn in the test's event loop, leaving Ctrl-C to pytest (uvicorn would take the signal handlers)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class FakeProvider:
    """Base: pops the next scripted step per model request; the default step echoes.

    `model_requests` are the model requests received; `disconnects` counts the streams the
    client abandoned before they ended (await `wait_for_disconnects(n)` to see the n-th).
    """

    def __init__(self) -> None:
        self.script: list[Step] = []
        self.model_requests: list[Request] = []
        self.disconnects = 0
        self.url = ""
        self._disconnected = asyncio.Condition()
        self._streams: set[asyncio.Task[bool]] = set()
        self._server: _Server | None = None
        self._serving: asyncio.Task[None] | None = None

    async def __aenter__(self) -> FakeProvider:
        listener = socket.create_server(("127.0.0.1", 0))  # listening now: clients may connect at once
        self.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        config = uvicorn.Config(self._app, interface="asgi3", lifespan="off", log_config=None, access_log=False)
        self._server = _Server(config)
        self._serving = asyncio.create_task(self._server.serve(sockets=[listener]))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for stream in list(self._streams):
            stream.cancel()  # a stream still running ends as it would when the process goes away
        if self._server is not None and self._serving is not None:
            self._server.should_exit = True
            await self._serving

    def then(self, *steps: Step) -> FakeProvider:
        self.script.extend(steps)
        return self

    async def wait_for_disconnects(self, count: int) -> None:
        """Until `count` streams in all were abandoned by the client."""
        async with self._disconnected:
            await self._disconnected.wait_for(lambda: self.disconnects >= count)

    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI app: every request goes through here."""
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        path = scope["raw_path"].decode("latin-1")
        if scope["query_string"]:
            path += "?" + scope["query_string"].decode("latin-1")
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
        request = Request(scope["method"], path, headers, body, tuple(scope.get("client") or ("", 0)))  # type: ignore[arg-type]
        if (answer := self.answer(request)) is not None:  # a plain JSON endpoint of a subclass
            await _respond(send, answer[0], {}, json.dumps(answer[1]).encode())
            return
        if not self.is_model_request(request):
            await _respond(send, 404, {}, b'{"error": "not found"}')
            return
        self.model_requests.append(request)
        step = self.script.pop(0) if self.script else Reply(text=["ok"])
        if isinstance(step, Fail):
            await _respond(send, step.status, step.headers, json.dumps(self.error_body(step)).encode())
            return
        chunks = [self.sse(event) for event in self.render(step)]
        if step.malformed_at is not None:
            chunks[step.malformed_at] = self.malformed()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
            }
        )
        await self._stream(receive, send, chunks, step)

    async def _stream(self, receive: Receive, send: Send, chunks: list[bytes], reply: Reply) -> None:
        """Send the chunks, each one HTTP chunk, while watching for the client going away.

        A stream cut on purpose (or cancelled as the fake stops) returns unfinished, and
        uvicorn closes the connection without the terminating chunk (logging "ASGI callable
        returned without completing response", which is the point).
        """
        writing = asyncio.create_task(_write(send, chunks, reply.delay_s, reply.cut_after))
        self._streams.add(writing)
        gone = asyncio.create_task(_until_disconnect(receive))
        try:
            await asyncio.wait({writing, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._streams.discard(writing)
            gone.cancel()
            abandoned = not writing.done()
            writing.cancel()
        if abandoned:
            async with self._disconnected:
                self.disconnects += 1
                self._disconnected.notify_all()
        elif not writing.cancelled():
            writing.result()  # a failure of the fake itself surfaces here

    @staticmethod
    def sse(event: dict[str, Any] | str, name: str = "") -> bytes:
        data = event if isinstance(event, str) else json.dumps(event)
        prefix = f"event: {name}\n" if name else ""
        return f"{prefix}data: {data}\n\n".encode()

    def malformed(self) -> bytes:
        return b'data: {"this is": not json\n\n'

    def answer(self, request: Request) -> tuple[int, Any] | None:
        """(status, JSON body) for a request that is not a model stream; None: not such a request."""
        return None

    def is_model_request(self, request: Request) -> bool:
        raise NotImplementedError

    def render(self, reply: Reply) -> list[dict[str, Any] | str]:
        raise NotImplementedError

    def error_body(self, fail: Fail) -> dict[str, Any]:
        raise NotImplementedError


class FakeOpenAI(FakeProvider):
    """POST /v1/chat/completions with stream=true, as OpenAI, vLLM, Ollama and llama.cpp serve it."""

    def is_model_request(self, request: Request) -> bool:
        return request.method == "POST" and request.path.endswith("/chat/completions")

    def render(self, reply: Reply) -> list[dict[str, Any] | str]:
        base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000, "model": "fake"}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        events: list[dict[str, Any] | str] = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": text}) for text in reply.text]
        for index, call in enumerate(reply.calls):
            first = {"index": index, "id": call.id or f"call_{index}", "type": "function"}
            events.append(chunk({"tool_calls": [first | {"function": {"name": call.name, "arguments": ""}}]}))
            events += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
                for fragment in call.fragments
            ]
        events.append(chunk({}, "tool_calls" if reply.calls else "stop"))
        prompt, completion = reply.usage
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        events.append(base | {"choices": [], "usage": usage})
        events.append("[DONE]")
        return events

    def error_body(self, fail: Fail) -> dict[str, Any]:
        kind = fail.error_type or ("rate_limit_exceeded" if fail.status == 429 else "server_error")
        return {"error": {"message": fail.message, "type": kind, "param": None, "code": kind}}


class FakeAnthropic(FakeProvider):
    """POST /v1/messages with stream=true (Anthropic Messages API)."""

    def is_model_request(self, request: Request) -> bool:
        return request.method == "POST" and request.path.split("?")[0].endswith("/v1/messages")

    @staticmethod
    def sse(event: dict[str, Any] | str, name: str = "") -> bytes:
        assert isinstance(event, dict)
        return FakeProvider.sse(event, str(event["type"]))

    def malformed(self) -> bytes:
        return b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": {\n\n'

    def render(self, reply: Reply) -> list[dict[str, Any] | str]:
        prompt, completion = reply.usage
        message = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": "fake",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": 1},
        }
        events: list[dict[str, Any] | str] = [{"type": "message_start", "message": message}]
        index = 0
        if reply.text:
            events.append({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
            events += [
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
                for text in reply.text
            ]
            events.append({"type": "content_block_stop", "index": 0})
            index = 1
        for offset, call in enumerate(reply.calls):
            block = {"type": "tool_use", "id": call.id or f"toolu_{offset}", "name": call.name, "input": {}}
            events.append({"type": "content_block_start", "index": index, "content_block": block})
            events += [
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": f},
                }
                for f in call.fragments
            ]
            events.append({"type": "content_block_stop", "index": index})
            index += 1
        stop = "tool_use" if reply.calls else "end_turn"
        events.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": completion},
            }
        )
        events.append({"type": "message_stop"})
        return events

    def error_body(self, fail: Fail) -> dict[str, Any]:
        kind = fail.error_type or {429: "rate_limit_error", 529: "overloaded_error"}.get(fail.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": fail.message}}


class FakeGoogle(FakeProvider):
    """POST /v1beta/models/<model>:streamGenerateContent?alt=sse (Gemini API)."""

    def is_model_request(self, request: Request) -> bool:
        return request.method == "POST" and ":streamGenerateContent" in request.path

    def render(self, reply: Reply) -> list[dict[str, Any] | str]:
        prompt, completion = reply.usage
        events: list[dict[str, Any] | str] = []

        def chunk(parts: list[dict[str, Any]], done: bool, tokens: int) -> dict[str, Any]:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            if done:
                candidate["finishReason"] = "STOP"
            usage = {"promptTokenCount": prompt, "candidatesTokenCount": tokens, "totalTokenCount": prompt + tokens}
            return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "fake"}

        for n, text in enumerate(reply.text):
            events.append(chunk([{"text": text}], False, n + 1))
        # Gemini sends each function call whole, in one part (no argument fragments).
        parts = [
            {"functionCall": {"name": c.name, "args": json.loads("".join(c.fragments) or "{}")}} for c in reply.calls
        ]
        events.append(chunk(parts, True, completion))
        return events

    def error_body(self, fail: Fail) -> dict[str, Any]:
        status = fail.error_type or {429: "RESOURCE_EXHAUSTED", 400: "INVALID_ARGUMENT"}.get(fail.status, "INTERNAL")
        return {"error": {"code": fail.status, "message": fail.message, "status": status}}


async def _respond(send: Send, status: int, headers: dict[str, str], body: bytes) -> None:
    named = {"content-type": "application/json"} | {k.lower(): v for k, v in headers.items()}
    named["content-length"] = str(len(body))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in named.items()],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _write(send: Send, chunks: list[bytes], delay_s: float, cut_after: int | None) -> bool:
    """Stream the chunks (no content-length: chunked transfer); False when cut before the end."""
    for index, chunk in enumerate(chunks):
        if cut_after is not None and index >= cut_after:
            return False
        if delay_s:
            await asyncio.sleep(delay_s)
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
    return True


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
