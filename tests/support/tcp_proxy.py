"""A small asyncio TCP proxy for fault tests: put it between two services and add
latency, blackhole the traffic, refuse new connections or cut the open ones.

    proxy = await TcpProxy("127.0.0.1:50055").start()   # listens on proxy.address
    proxy.latency_s = 0.5      # each chunk reaches the other side half a second later
    proxy.blackhole = True     # connections stay open, nothing gets through (a hung peer)
    proxy.refuse = True        # new connections are closed at once (a peer that is down)
    proxy.drop_replies = True  # requests reach the peer, its answers are lost
    proxy.cut()                # reset every open connection (a dropped link)
    await proxy.close()

Latency delays every chunk by the same amount without serializing them, so a stream
keeps its throughput; order is kept per direction. The proxy also counts
connections and bytes so a test can see that traffic really went through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

CHUNK = 64 * 1024
T = TypeVar("T")


@dataclass(eq=False)  # hashed by identity: links live in a set
class _Link:
    """One proxied connection: the client side, the upstream side and their pumps."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()  # RST, not FIN: the peer sees a broken connection
        for task in self.tasks:
            task.cancel()


class TcpProxy:
    def __init__(self, upstream: str, host: str = "127.0.0.1", port: int = 0):
        upstream_host, _, upstream_port = upstream.rpartition(":")
        self.upstream = (upstream_host or "127.0.0.1", int(upstream_port))
        self.host, self.port = host, port
        self.latency_s = 0.0
        self.blackhole = False
        self.refuse = False
        self.drop_replies = False  # requests get through, answers do not: the peer acts, the caller never hears
        self.connections = 0  # accepted since start
        self.bytes_up = 0  # client -> upstream, forwarded
        self.bytes_down = 0  # upstream -> client, forwarded
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def open_connections(self) -> int:
        return len(self._links)

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def cut(self) -> int:
        """Reset every open connection; returns how many were cut. New ones are accepted as usual."""
        links = list(self._links)
        for link in links:
            link.abort()
        self._links.clear()
        return len(links)

    def heal(self) -> None:
        """Back to a plain pass-through proxy (open connections stay as they are)."""
        self.latency_s, self.blackhole, self.refuse, self.drop_replies = 0.0, False, False, False

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    async def __aenter__(self) -> TcpProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.refuse:
            writer.transport.abort()
            return
        link = _Link(writer)
        self._links.add(link)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            self._links.discard(link)
            writer.transport.abort()  # upstream down: the client sees its connection fail
            return
        link.upstream = up_writer
        link.tasks = [
            asyncio.create_task(self._pump(reader, up_writer, link, up=True)),
            asyncio.create_task(self._pump(up_reader, writer, link, up=False)),
        ]
        await asyncio.gather(*link.tasks, return_exceptions=True)
        link.abort()
        self._links.discard(link)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link, up: bool) -> None:
        # Chunks wait in a queue until due, so latency delays each chunk without serializing them.
        due: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.create_task(self._send(due, writer, link, up))
        try:
            while data := await reader.read(CHUNK):
                due.put_nowait((time.monotonic() + self.latency_s, data))
            due.put_nowait((0.0, b""))  # EOF: half-close the other side once everything before it went out
            await sender
        except (ConnectionError, OSError):
            link.abort()  # one side broke: the other side sees its connection break too
        finally:
            sender.cancel()

    async def _send(
        self, due: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter, link: _Link, up: bool
    ) -> None:
        try:
            await self._send_due(due, writer, up)
        except (ConnectionError, OSError):
            link.abort()

    async def _send_due(self, due: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter, up: bool) -> None:
        while True:
            at, data = await due.get()
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            delay = at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if self.blackhole or (self.drop_replies and not up):
                continue  # dropped, whenever it was switched on
            writer.write(data)
            await writer.drain()
            if up:
                self.bytes_up += len(data)
            else:
                self.bytes_down += len(data)


class ProxyHost:
    """Proxies served by an event loop in a thread of their own.

    For fixtures that outlive one test's event loop (a cluster of processes shared by a
    module): the proxies keep forwarding between tests. Setting `latency_s`,
    `blackhole` or `refuse` from another thread is safe; `cut` goes through here.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="tcp-proxies", daemon=True)
        self._thread.start()
        self.proxies: list[TcpProxy] = []

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def add(self, upstream: str) -> TcpProxy:
        proxy = self._run(TcpProxy(upstream).start())
        self.proxies.append(proxy)
        return proxy

    def cut(self, proxy: TcpProxy) -> int:
        async def cut() -> int:
            return proxy.cut()

        return self._run(cut())

    def heal_all(self) -> None:
        for proxy in self.proxies:
            proxy.heal()

    def close(self) -> None:
        for proxy in self.proxies:
            self._run(proxy.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
