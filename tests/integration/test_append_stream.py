"""A runtime replica's appends on one SessionsService.AppendEventsStream (services/runtime/append_channel.py).

Against a real sessions server: many sessions' appends share one stream and each keeps
its order and seq; a failed call fails as the unary AppendEvents would (code, message,
ErrorInfo, BadRequest) and ends only itself; a resend is a no-op; a draining replica
answers what it took and ends the stream, and the next append goes on a new one; a
restart of sessions costs no append; a sessions service without the stream gets unary
calls.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_asyncio

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import sessions_pb2 as S
from cogmesh.sessions.v1 import sessions_pb2_grpc
from services.kit.server import RunningServer
from services.runtime.append_channel import AppendChannel
from services.sessions.servicer import SessionsServicer
from services.sessions.store import MemorySessionStore, SessionStore
from tests.integration.conftest import status_details
from tests.support.sessions_server import leased as support_leased
from tests.support.sessions_server import serve

TENANT = "acme"
CALL_S = 10.0


@pytest_asyncio.fixture
async def server() -> AsyncIterator[tuple[SessionsServicer, RunningServer]]:
    servicer = SessionsServicer(MemorySessionStore())
    running = await serve(servicer)
    yield servicer, running
    await running.stop(0)


@pytest_asyncio.fixture
async def stub(server: tuple[SessionsServicer, RunningServer]) -> AsyncIterator[sessions_pb2_grpc.SessionsServiceStub]:
    async with grpc.aio.insecure_channel(server[1].address) as channel:
        yield sessions_pb2_grpc.SessionsServiceStub(channel)


async def leased(stub: sessions_pb2_grpc.SessionsServiceStub) -> tuple[str, int]:
    return await support_leased(stub, TENANT)


def append(sid: str, token: int, text: str, append_id: str = "") -> S.AppendEventsRequest:
    return S.AppendEventsRequest(
        tenant_id=TENANT,
        session_id=sid,
        turn_id="t1",
        lease_token=token,
        append_id=append_id or uuid.uuid4().hex,
        events=[events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text=text))],
    )


async def texts(stub: sessions_pb2_grpc.SessionsServiceStub, sid: str) -> list[tuple[int, str]]:
    request = S.ReadEventsRequest(tenant_id=TENANT, session_id=sid)
    return [(e.seq, e.assistant_delta.text) async for r in stub.ReadEvents(request) for e in r.events]


async def test_many_sessions_appends_share_one_stream_and_keep_their_order(
    stub: sessions_pb2_grpc.SessionsServiceStub,
) -> None:
    channel = AppendChannel(stub)
    sessions = [await leased(stub) for _ in range(20)]

    async def turn(sid: str, token: int) -> list[int]:
        return [(await channel.AppendEvents(append(sid, token, f"{sid}:{n}"), CALL_S)).last_seq for n in range(5)]

    seqs = await asyncio.gather(*(turn(sid, token) for sid, token in sessions))
    assert seqs == [[1, 2, 3, 4, 5]] * len(sessions)
    for sid, _ in sessions:
        assert await texts(stub, sid) == [(n + 1, f"{sid}:{n}") for n in range(5)]
    assert channel.streams_opened == 1 and not channel.unary
    await channel.close()


async def test_a_failed_call_fails_as_the_unary_call_does_and_ends_only_itself(
    stub: sessions_pb2_grpc.SessionsServiceStub,
) -> None:
    channel = AppendChannel(stub)
    sid, token = await leased(stub)
    failing = [
        append(sid, token + 1, "stale token"),  # fenced: FAILED_PRECONDITION, TURN_NOT_FOUND
        append("no such session", token, "unknown session"),
        S.AppendEventsRequest(tenant_id=TENANT, session_id=sid, turn_id="t" * 300, lease_token=token),  # too long
    ]
    for request in failing:
        with pytest.raises(grpc.aio.AioRpcError) as unary:
            await stub.AppendEvents(request)
        with pytest.raises(grpc.aio.AioRpcError) as streamed:
            await channel.AppendEvents(request, timeout=CALL_S)
        assert streamed.value.code() == unary.value.code() != grpc.StatusCode.OK
        assert streamed.value.details() == unary.value.details()
        assert status_details(streamed.value) == status_details(unary.value)
    assert (await channel.AppendEvents(append(sid, token, "still fine"), timeout=CALL_S)).last_seq == 1
    assert channel.streams_opened == 1
    await channel.close()


async def test_a_resent_append_is_stored_once(stub: sessions_pb2_grpc.SessionsServiceStub) -> None:
    channel = AppendChannel(stub)
    sid, token = await leased(stub)
    first = await channel.AppendEvents(append(sid, token, "once", append_id="a1"), timeout=CALL_S)
    again = await channel.AppendEvents(append(sid, token, "once", append_id="a1"), timeout=CALL_S)
    assert (first.last_seq, first.duplicate) == (1, False)
    assert (again.last_seq, again.duplicate) == (1, True)
    assert await texts(stub, sid) == [(1, "once")]
    await channel.close()


class HeldStore:
    """The memory store, with appends held at a gate: a call is in flight for as long as a test wants."""

    def __init__(self, store: SessionStore) -> None:
        self.store, self.gate, self.arrived = store, asyncio.Event(), asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    async def append_events(self, *args: Any) -> Any:
        self.arrived.set()
        await self.gate.wait()
        return await self.store.append_events(*args)


async def test_a_draining_replica_answers_what_it_took_then_ends_the_stream() -> None:
    held = HeldStore(MemorySessionStore())
    servicer = SessionsServicer(held)  # type: ignore[arg-type, unused-ignore]
    running = await serve(servicer)
    try:
        async with grpc.aio.insecure_channel(running.address) as grpc_channel:
            stub = sessions_pb2_grpc.SessionsServiceStub(grpc_channel)
            held.gate.set()
            sid, token = await leased(stub)
            held.gate.clear()
            channel = AppendChannel(stub)
            in_flight = asyncio.create_task(channel.AppendEvents(append(sid, token, "taken"), timeout=CALL_S))
            await held.arrived.wait()
            first = channel._stream
            await servicer.drain()
            held.gate.set()
            assert (await in_flight).last_seq == 1  # answered, not cut by the drain
            # The drained stream ends UNAVAILABLE; an append after it goes unary (here the same replica,
            # in a deployment any other), the next one on a new stream.
            assert (await channel.AppendEvents(append(sid, token, "after"), timeout=CALL_S)).last_seq == 2
            assert first is not None and first.broken is not None
            assert first.broken.code() == grpc.StatusCode.UNAVAILABLE
            assert "shutting down" in (first.broken.details() or "")
            servicer.draining.clear()  # as if the next append reached another replica
            assert (await channel.AppendEvents(append(sid, token, "elsewhere"), timeout=CALL_S)).last_seq == 3
            assert channel.streams_opened >= 2 and not channel.unary
            assert await texts(stub, sid) == [(1, "taken"), (2, "after"), (3, "elsewhere")]
            await channel.close()
    finally:
        await running.stop(0)


async def test_a_restart_of_sessions_costs_no_append() -> None:
    store = MemorySessionStore()  # both servers share it, as replicas share Redis
    first = await serve(SessionsServicer(store))
    address = first.address
    async with grpc.aio.insecure_channel(address) as grpc_channel:
        stub = sessions_pb2_grpc.SessionsServiceStub(grpc_channel)
        sid, token = await leased(stub)
        channel = AppendChannel(stub)
        assert (await channel.AppendEvents(append(sid, token, "before"), timeout=CALL_S)).last_seq == 1
        await first.stop(0)
        second = await serve(SessionsServicer(store), address)
        try:
            reply = await channel.AppendEvents(append(sid, token, "after"), timeout=CALL_S, wait_for_ready=True)
            assert reply.last_seq == 2
            reply = await channel.AppendEvents(append(sid, token, "again"), timeout=CALL_S)
            assert reply.last_seq == 3
            assert await texts(stub, sid) == [(1, "before"), (2, "after"), (3, "again")]
            assert channel.streams_opened == 2 and not channel.unary
            await channel.close()
        finally:
            await second.stop(0)


class WithoutStream(SessionsServicer):
    """A sessions service of the previous version: no AppendEventsStream."""

    async def AppendEventsStream(self, requests: Any, context: Any) -> AsyncIterator[Any]:
        raise NotImplementedError
        yield  # an async generator


async def test_appends_go_unary_to_a_sessions_service_without_the_stream() -> None:
    running = await serve(WithoutStream(MemorySessionStore()))
    try:
        async with grpc.aio.insecure_channel(running.address) as grpc_channel:
            stub = sessions_pb2_grpc.SessionsServiceStub(grpc_channel)
            sid, token = await leased(stub)
            channel = AppendChannel(stub)
            assert (await channel.AppendEvents(append(sid, token, "one"), timeout=CALL_S)).last_seq == 1
            assert channel.unary
            assert (await channel.AppendEvents(append(sid, token, "two"), timeout=CALL_S)).last_seq == 2
            assert channel.streams_opened == 1
            await channel.close()

            # Many turns at once: grpc may report the refused stream as INTERNAL while they write to it.
            sessions = [await leased(stub) for _ in range(20)]
            channel = AppendChannel(stub)
            replies = await asyncio.gather(
                *(channel.AppendEvents(append(sid, token, "x"), timeout=CALL_S) for sid, token in sessions)
            )
            assert [r.last_seq for r in replies] == [1] * 20 and channel.unary
            await channel.close()
    finally:
        await running.stop(0)
