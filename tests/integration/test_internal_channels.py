"""Internal channels (services/kit/clients.py) across a peer's restart and while a peer is down.

A restarted peer is SERVING again before the channels of its callers have noticed: they
are still backing off from the failed reconnects (up to the kit's 1 s max backoff), and
a call made then used to fail at once with UNAVAILABLE ("connections to all backends
failing"). Internal calls now wait for the channel to be ready, for a bounded part of
their deadline; a peer that stays down is still reported as UNAVAILABLE naming it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from cogmesh.models.v1 import models_pb2, models_pb2_grpc
from services.kit.clients import Clients, call, ready_budget_s
from services.kit.config import Settings
from services.kit.errors import Unavailable
from tests.support.redis_server import free_port

CALL_TIMEOUT_S = 4.0
RESTART_CALL_TIMEOUT_S = 8.0  # a ready-wait of 4 s: room for the ~1 s backoff on a loaded machine
BACKOFF_ATTEMPTS = 6  # reconnects 0.1, 0.16, 0.26, 0.41, 0.66 s apart: the next one is ~1 s away


class FakeModels(models_pb2_grpc.ModelsServiceServicer):
    async def ListProviders(self, request: Any, context: Any) -> models_pb2.ListProvidersResponse:
        return models_pb2.ListProvidersResponse(providers=["local"])

    async def AddModel(self, request: Any, context: Any) -> models_pb2.AddModelResponse:  # a write: never retried
        return models_pb2.AddModelResponse()

    async def WatchCatalog(self, request: Any, context: Any) -> AsyncIterator[models_pb2.WatchCatalogResponse]:
        """A server stream of one message; asked for "deadline", it says the call's deadline as seen here."""
        left = context.time_remaining()
        version = str(left) if request.known_version == "deadline" else "v1"
        yield models_pb2.WatchCatalogResponse(snapshot=models_pb2.CatalogSnapshot(version=version))


async def serve(port: int) -> grpc.aio.Server:
    server = grpc.aio.server()
    models_pb2_grpc.add_ModelsServiceServicer_to_server(FakeModels(), server)  # type: ignore[no-untyped-call]
    assert server.add_insecure_port(f"127.0.0.1:{port}") == port
    await server.start()
    return server


async def refuse_until_backed_off(port: int, attempts: int = BACKOFF_ATTEMPTS) -> None:
    """Stand in for a peer that is restarting: take each reconnect on `port` and drop it at once.

    Returns once the channel has failed `attempts` reconnects, i.e. while it waits out a long
    backoff before its next one (grpc grows it 1.6x per failure, up to the kit's 1 s).
    """
    seen = 0
    enough = asyncio.Event()

    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal seen
        seen += 1
        writer.transport.abort()
        if seen >= attempts:
            enough.set()

    listener = await asyncio.start_server(drop, "127.0.0.1", port)
    try:
        await asyncio.wait_for(enough.wait(), 30)
    finally:
        listener.close()
        await listener.wait_closed()


def clients_of(address: str, call_timeout_s: float = CALL_TIMEOUT_S) -> Clients:
    return Clients(Settings(models_addr=address, call_timeout_s=call_timeout_s))


async def first_calls(clients: Clients) -> list[Any]:
    """A read (retried by the channel), a write (never retried) and a server stream, at once."""

    async def stream() -> list[str]:
        watch = clients.models.WatchCatalog(models_pb2.WatchCatalogRequest())
        return [response.snapshot.version async for response in watch]

    return list(
        await asyncio.gather(
            clients.models.ListProviders(models_pb2.ListProvidersRequest()),
            clients.models.AddModel(models_pb2.AddModelRequest()),
            stream(),
        )
    )


async def test_the_first_calls_after_a_peer_restart_wait_for_the_reconnect() -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = await serve(port)
    clients = clients_of(address, RESTART_CALL_TIMEOUT_S)
    try:
        assert (await clients.models.ListProviders(models_pb2.ListProvidersRequest())).providers == ["local"]
        await server.stop(None)  # the peer goes away: its callers' channels start reconnecting
        await refuse_until_backed_off(port)
        server = await serve(port)  # back, SERVING, while the channel still backs off

        started = time.monotonic()
        providers, _, versions = await first_calls(clients)
        waited = time.monotonic() - started

        assert providers.providers == ["local"]
        assert versions == ["v1"]
        assert waited < ready_budget_s(RESTART_CALL_TIMEOUT_S, RESTART_CALL_TIMEOUT_S)  # the reconnect, not a give-up
    finally:
        await clients.close()
        await server.stop(None)


async def test_a_peer_that_stays_down_is_reported_unavailable_by_name_within_half_the_deadline() -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = await serve(port)
    clients = clients_of(address)
    budget_s = ready_budget_s(CALL_TIMEOUT_S, CALL_TIMEOUT_S)
    try:
        await clients.models.ListProviders(models_pb2.ListProvidersRequest())
        await server.stop(None)
        await refuse_until_backed_off(port, attempts=1)  # the channel has seen its peer go; nothing listens now

        started = time.monotonic()
        with pytest.raises(Unavailable) as caught:
            await call("models", clients.models.ListProviders, models_pb2.ListProvidersRequest())
        waited = time.monotonic() - started
        assert caught.value.metadata == {"dependency": "models", "retryable": "true"}
        assert caught.value.message.startswith("models service unavailable: ")
        assert "Deadline" not in caught.value.message  # the channel's own reason (refused), not a timeout
        assert budget_s * 0.9 <= waited < budget_s + 2.0

        # A server stream waits the same way, and a call that gave up leaves no mark on the channel...
        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await clients.models.WatchCatalog(models_pb2.WatchCatalogRequest()).read()
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        assert budget_s * 0.9 <= time.monotonic() - started < budget_s + 2.0

        # ...so a peer that is back a moment later (a light service restarts in 0.3 s) is waited for.
        server = await serve(port)
        reply = await clients.models.ListProviders(models_pb2.ListProvidersRequest())
        assert reply.providers == ["local"]
    finally:
        await clients.close()
        await server.stop(None)


async def test_ready_waits_for_a_restarted_peer_and_gives_up_on_a_down_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients.ready is the same wait, with the caller's bound."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = await serve(port)
    clients = clients_of(address)
    try:
        assert await clients.ready("models", 1.0)
        # Waits are counted where they happen, not timed: the channel's wait for READY.
        channel = clients._channels[address]
        waits = 0
        wait_for_ready = channel.channel_ready

        async def counted() -> None:
            nonlocal waits
            waits += 1
            await wait_for_ready()

        monkeypatch.setattr(channel, "channel_ready", counted)
        await server.stop(None)
        await refuse_until_backed_off(port)
        server = await serve(port)
        assert await clients.ready("models", CALL_TIMEOUT_S)
        assert waits == 1  # the restarted peer was waited for

        await server.stop(None)
        await refuse_until_backed_off(port, attempts=1)
        started = time.monotonic()
        assert not await clients.ready("models", 0.5)
        assert time.monotonic() - started >= 0.45  # it waited its whole bound before giving up
        assert waits == 2
        assert not await clients.ready("models", CALL_TIMEOUT_S)  # it just gave up: no second wait...
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await clients.models.WatchCatalog(models_pb2.WatchCatalogRequest()).read()  # ...nor a call's
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        assert waits == 2
    finally:
        await clients.close()
        await server.stop(None)


async def test_a_stream_without_a_timeout_gets_the_turn_deadline() -> None:
    """The kit's default deadline reaches server-streaming calls too (COGMESH_TURN_TIMEOUT_S)."""
    port = free_port()
    server = await serve(port)
    clients = Clients(Settings(models_addr=f"127.0.0.1:{port}", turn_timeout_s=77))
    try:
        watch = clients.models.WatchCatalog(models_pb2.WatchCatalogRequest(known_version="deadline"))
        (version,) = [response.snapshot.version async for response in watch]
        assert 70 < float(version) <= 77
    finally:
        await clients.close()
        await server.stop(None)
