"""The fault-injection proxy itself, against a plain echo server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from tests.support.tcp_proxy import TcpProxy


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[TcpProxy]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with TcpProxy(f"127.0.0.1:{port}") as proxy:
        yield proxy
    server.close()


async def roundtrip(proxy: TcpProxy, payload: bytes = b"ping", timeout_s: float = 5) -> bytes:
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(payload)), timeout_s)
    finally:
        writer.close()


async def test_passes_traffic_through_and_counts_it(proxy: TcpProxy) -> None:
    assert await roundtrip(proxy) == b"ping"
    assert proxy.connections == 1 and proxy.bytes_up == 4 and proxy.bytes_down == 4


async def test_latency_delays_each_direction(proxy: TcpProxy) -> None:
    proxy.latency_s = 0.2
    started = time.monotonic()
    assert await roundtrip(proxy) == b"ping"
    assert time.monotonic() - started >= 0.4  # there and back


async def test_blackhole_keeps_the_connection_but_answers_nothing(proxy: TcpProxy) -> None:
    proxy.blackhole = True
    with pytest.raises(TimeoutError):
        await roundtrip(proxy, timeout_s=0.5)
    proxy.heal()
    assert await roundtrip(proxy) == b"ping"


async def test_drop_replies_lets_requests_through_only(proxy: TcpProxy) -> None:
    proxy.drop_replies = True
    with pytest.raises(TimeoutError):
        await roundtrip(proxy, timeout_s=0.5)
    assert proxy.bytes_up == 4 and proxy.bytes_down == 0


async def test_cut_resets_open_connections(proxy: TcpProxy) -> None:
    reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
    writer.write(b"x")
    assert await asyncio.wait_for(reader.readexactly(1), 5) == b"x"
    assert proxy.cut() == 1
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(reader.readexactly(1), 5)
    writer.close()
    assert await roundtrip(proxy) == b"ping"  # new connections still work


async def test_refuse_closes_new_connections(proxy: TcpProxy) -> None:
    proxy.refuse = True
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await roundtrip(proxy)
