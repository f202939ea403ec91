"""A tiny HTTP/1.1 server on asyncio for provider fakes.

Real SDKs talk to it over a real socket, so it has to get the protocol details right
that the SDKs depend on: keep-alive, Content-Length request bodies, chunked responses.
Writing it on raw asyncio (instead of a web framework) lets a test do what a real
provider sometimes does and a framework would not: send a malformed chunk, stall, or
cut the connection in the middle of a stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Request:
    method: str
    path: str  # with the query string
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Response:
    """What the server sends back.

    `chunks` is sent with chunked transfer encoding, one HTTP chunk per item, waiting
    `delay_s` before each. `cut_after` closes the connection after that many chunks
    without the terminating zero-length chunk (a stream cut mid-way).
    """

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    chunks: list[bytes] | None = None
    delay_s: float = 0.0
    cut_after: int | None = None


Handler = Callable[[Request], Awaitable[Response]]

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests"}


class HttpServer:
    """Serves `handler` on 127.0.0.1:<free port>; records requests and disconnects."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self.disconnects = 0  # streams the client abandoned before they ended
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> HttpServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def __aenter__(self) -> HttpServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                self.requests.append(request)
                response = await self.handler(request)
                if not await self._write(writer, response):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _write(self, writer: asyncio.StreamWriter, response: Response) -> bool:
        """Send one response; False when the connection must be closed afterwards."""
        reason = _REASONS.get(response.status, "Status")
        head = [f"HTTP/1.1 {response.status} {reason}"]
        headers = {"content-type": "application/json"} | {k.lower(): v for k, v in response.headers.items()}
        if response.chunks is None:
            headers["content-length"] = str(len(response.body))
        else:
            headers["transfer-encoding"] = "chunked"
        head += [f"{name}: {value}" for name, value in headers.items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        if response.chunks is None:
            writer.write(response.body)
            await writer.drain()
            return True
        try:
            for index, chunk in enumerate(response.chunks):
                if response.cut_after is not None and index >= response.cut_after:
                    await writer.drain()
                    writer.transport.abort()  # no terminating chunk: the stream is cut
                    return False
                if response.delay_s:
                    await asyncio.sleep(response.delay_s)
                writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except ConnectionError:
            self.disconnects += 1
            return False
        return True


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int((await reader.readline()).strip(), 16)
            if size == 0:
                await reader.readline()
                break
            body += await reader.readexactly(size)
            await reader.readline()
    else:
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Request(method, path, headers, body)
