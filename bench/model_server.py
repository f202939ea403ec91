"""A lean OpenAI chat-completions server for benchmarks: SSE, one token per chunk, at a set pace.

    python -m bench.model_server [--port 0]   # prints {"port": N} once listening; stops at stdin EOF

It runs in its own process, so its CPU is nobody's turn, and stays cheap at 1,000
concurrent streams: raw asyncio protocols, each response rendered once per script and
model, and one timer per millisecond for every stream due then (not one sleep per chunk).

`POST .../chat/completions` with `"stream": true` is answered the way OpenAI streams:
a role chunk, one chunk per token, a finish chunk, a usage chunk (when
`stream_options.include_usage`), `data: [DONE]`. What the model says and how fast comes
from the current script, which `POST /bench/script` replaces (JSON, every field optional):

- `ttft_ms`: from the request to the first token (the response headers go at once);
- `tokens`: the reply's length, tokens "tok0", " tok1", ... one chunk each;
- `gap_ms`: between two tokens;
- `tool`: when the request offers tools and its last message is the user's, call the
  first tool with `{"expression": <the arithmetic in the user's message>}` instead;
  after the tool's result, answer "<expression> = <result>." a word per chunk.

`GET /bench/stats`: requests and streams served, streams open now and at most, client
disconnects, and the last chat request's body (how a bench copies one system's request
into another's). Each chat request's arrival time (epoch ns) is kept too (the last 10,000).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import re
import resource
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

EXPRESSION = re.compile(r"\d[\d\s+\-*/().]*\d")
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
END_OF_BODY = b"0\r\n\r\n"
MAX_HEAD = 64 * 1024
TICK_S = 0.001  # streams due within the same millisecond share one timer


@dataclass(frozen=True)
class Script:
    ttft_ms: float = 0.0
    tokens: int = 100
    gap_ms: float = 0.0
    tool: bool = False


def chunked(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def sse(event: dict[str, Any] | str) -> bytes:
    data = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def render(model: str, script: Script, request: dict[str, Any]) -> list[bytes]:
    """The response body as beats: beat i goes out at ttft + i * gap (each already an HTTP chunk)."""
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000, "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse(base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    messages = request.get("messages") or [{}]
    last = messages[-1]
    tools = request.get("tools") or []
    finish = "stop"
    if script.tool and tools and last.get("role") == "user":
        found = EXPRESSION.search(str(last.get("content") or ""))
        arguments = json.dumps({"expression": found.group().strip() if found else "1 + 1"})
        name = tools[0]["function"]["name"]
        call = {"index": 0, "id": "call_bench", "type": "function", "function": {"name": name, "arguments": ""}}
        pieces = [arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]]
        beats = [chunk({"role": "assistant", "content": None, "tool_calls": [call]})]
        beats += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}) for piece in pieces]
        finish = "tool_calls"
    else:
        if last.get("role") == "tool":
            expression = next(
                (
                    json.loads(c["function"]["arguments"]).get("expression", "")
                    for m in messages
                    for c in m.get("tool_calls") or ()
                ),
                "",
            )
            words = f"{expression} = {last.get('content')}.".split(" ")
            tokens = [words[0], *(" " + word for word in words[1:])]
        else:
            tokens = [f"tok{i}" if i == 0 else f" tok{i}" for i in range(script.tokens)]
        beats = [chunk({"content": token}) for token in tokens] or [b""]
        beats[0] = chunk({"role": "assistant", "content": ""}) + beats[0]
    tail = chunk({}, finish)
    if (request.get("stream_options") or {}).get("include_usage"):
        prompt = sum(len(str(m.get("content") or "")) for m in messages) // 4 + 1
        usage = {"prompt_tokens": prompt, "completion_tokens": len(beats), "total_tokens": prompt + len(beats)}
        tail += sse(base | {"choices": [], "usage": usage})
    beats[-1] += tail + sse("[DONE]")
    return [chunked(beat) for beat in beats[:-1]] + [chunked(beats[-1]) + END_OF_BODY]


def reply(status: int, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
    head = f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
    return head.encode() + data


class Server:
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.script = Script()
        self.rendered: dict[str, list[bytes]] = {}  # plain replies by model and usage, for the current script
        self.stats = {"requests": 0, "streams": 0, "open": 0, "max_open": 0, "disconnects": 0}
        self.last_request: dict[str, Any] | None = None
        self.arrivals: collections.deque[int] = collections.deque(maxlen=10_000)
        self.due: dict[int, list[tuple[Connection, int]]] = {}

    def at(self, when: float, connection: Connection, beat: int) -> None:
        """Write `connection`'s beat at loop time `when`, rounded up to the next millisecond."""
        tick = math.ceil(when / TICK_S)
        bucket = self.due.get(tick)
        if bucket is None:
            bucket = self.due[tick] = []
            self.loop.call_at(tick * TICK_S, self._fire, tick)
        bucket.append((connection, beat))

    def _fire(self, tick: int) -> None:
        for connection, beat in self.due.pop(tick):
            connection.send(beat)

    def handle(self, connection: Connection, method: str, path: str, body: bytes) -> None:
        path = path.split("?", 1)[0]
        if method == "POST" and path.endswith("/chat/completions"):
            self.arrivals.append(time.time_ns())
            self.stats["requests"] += 1
            try:
                request = json.loads(body)
            except ValueError as exc:
                connection.respond(reply(400, {"error": {"message": f"body is not JSON: {exc}", "type": "bad"}}))
                return
            self.last_request = request
            if not request.get("stream"):
                connection.respond(reply(400, {"error": {"message": "only stream=true is served", "type": "bad"}}))
                return
            connection.stream(self.beats(request), self.script)
        elif method == "POST" and path == "/bench/script":
            try:
                self.script = Script(**json.loads(body or b"{}"))
            except (ValueError, TypeError) as exc:
                connection.respond(reply(400, {"error": {"message": f"bad script: {exc}"}}))
                return
            self.rendered.clear()
            connection.respond(reply(200, asdict(self.script)))
        elif method == "GET" and path == "/bench/stats":
            body_out = self.stats | {"script": asdict(self.script), "last_request": self.last_request}
            connection.respond(reply(200, body_out | {"arrivals_ns": list(self.arrivals)}))
        else:
            connection.respond(reply(404, {"error": {"message": f"no route {method} {path}"}}))

    def beats(self, request: dict[str, Any]) -> list[bytes]:
        messages = request.get("messages") or [{}]
        if (self.script.tool and request.get("tools")) or messages[-1].get("role") == "tool":
            return render(str(request.get("model", "")), self.script, request)  # depends on the conversation
        key = f"{request.get('model', '')}/{bool((request.get('stream_options') or {}).get('include_usage'))}"
        if key not in self.rendered:
            self.rendered[key] = render(str(request.get("model", "")), self.script, request)
        return self.rendered[key]


class Connection(asyncio.Protocol):
    """One client connection: HTTP/1.1 keep-alive, Content-Length bodies, one request at a time."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a response is streaming; later requests wait in the buffer
        self.beats: list[bytes] = []
        self.start = 0.0
        self.script = Script()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self.busy:
            self.server.stats["disconnects"] += 1
            self.server.stats["open"] -= 1
            self.busy = False
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.next_request()

    def next_request(self) -> None:
        while not self.busy and self.transport is not None:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD:
                    self.transport.close()
                return
            lines = self.buffer[:end].decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.server.handle(self, method, path, body)

    def respond(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def stream(self, beats: list[bytes], script: Script) -> None:
        assert self.transport is not None
        stats = self.server.stats
        stats["streams"] += 1
        stats["open"] += 1
        stats["max_open"] = max(stats["max_open"], stats["open"])
        self.busy, self.beats, self.script = True, beats, script
        self.start = self.server.loop.time()
        if script.ttft_ms == 0 and script.gap_ms == 0:  # a zero-latency model: the whole body at once
            self.transport.write(SSE_HEAD + b"".join(beats))
            self.done()
            return
        self.transport.write(SSE_HEAD)
        self.server.at(self.start + script.ttft_ms / 1000, self, 0)

    def send(self, beat: int) -> None:
        if self.transport is None:  # the client went away mid-stream
            return
        self.transport.write(self.beats[beat])
        if beat + 1 == len(self.beats):
            self.done()
        else:
            when = self.start + (self.script.ttft_ms + (beat + 1) * self.script.gap_ms) / 1000
            self.server.at(when, self, beat + 1)

    def done(self) -> None:
        self.busy = False
        self.server.stats["open"] -= 1
        self.next_request()


class _StdinWatch(asyncio.Protocol):
    def __init__(self, closed: asyncio.Event) -> None:
        self.closed = closed

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


async def serve(port: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a socket per concurrent stream
    server = Server()
    listener = await server.loop.create_server(lambda: Connection(server), "127.0.0.1", port, backlog=4096)
    print(json.dumps({"port": listener.sockets[0].getsockname()[1]}), flush=True)
    # The bench holds our stdin: when it ends (or dies), so do we. No timing involved.
    closed = asyncio.Event()
    await server.loop.connect_read_pipe(lambda: _StdinWatch(closed), sys.stdin)
    await closed.wait()
    listener.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port))


if __name__ == "__main__":
    main()
