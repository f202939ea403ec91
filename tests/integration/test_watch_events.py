"""SessionsService.WatchEvents (services/sessions/watch.py) and the gateway's reads over it
(gateway/remote_event_log.py), against a real sessions server.

The stream: many sessions' events on one stream, each session's contiguous in seq and in
order while appends interleave; a removed session sends nothing more and can be added
again at a cursor; a deleted session, an expired cursor or a bad add ends only that
session's watch; heartbeats when idle; a slow consumer misses nothing; a draining
replica ends the stream UNAVAILABLE. The gateway: every mirror on one stream; a sessions
restart (the stream drained and broken) costs no event and repeats none; a deleted
session fails its readers only; a sessions service without WatchEvents is read per
session with ReadEvents.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.rpc import error_details_pb2, status_pb2

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import sessions_pb2 as S
from cogmesh.sessions.v1 import sessions_pb2_grpc
from gateway.remote_event_log import RemoteEventLog
from services.kit.clients import Clients
from services.kit.config import Settings
from services.kit.errors import NotFound
from services.kit.server import RunningServer
from services.sessions.servicer import SessionsServicer
from services.sessions.store import MemorySessionStore
from tests.support.sessions_server import leased as support_leased
from tests.support.sessions_server import serve

TENANT = "acme"
WAIT_S = 10.0


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


async def append(stub: sessions_pb2_grpc.SessionsServiceStub, sid: str, token: int, *texts: str) -> int:
    request = S.AppendEventsRequest(
        tenant_id=TENANT,
        session_id=sid,
        turn_id="t1",
        lease_token=token,
        append_id=uuid.uuid4().hex,
        events=[events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text=t)) for t in texts],
    )
    return (await stub.AppendEvents(request, wait_for_ready=True)).last_seq  # type: ignore[no-any-return]


def status_of(response: S.WatchEventsResponse) -> tuple[grpc.StatusCode, str, list[str]]:
    """(code, ErrorInfo reason, BadRequest fields) of a session's watch status."""
    status = status_pb2.Status.FromString(response.error)
    code = next(c for c in grpc.StatusCode if c.value[0] == status.code)
    reason, fields = "", []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields += [v.field for v in bad.field_violations]
    return code, reason, fields


class Watch:
    """A WatchEvents stream as a gateway holds it: adds and removes go out as they are made."""

    def __init__(self, stub: sessions_pb2_grpc.SessionsServiceStub, heartbeat_ms: int = 0) -> None:
        self.requests: asyncio.Queue[S.WatchEventsRequest | None] = asyncio.Queue()
        self.requests.put_nowait(S.WatchEventsRequest(heartbeat_ms=heartbeat_ms))
        self.call = stub.WatchEvents(self._sent())
        self.opened = False

    async def _sent(self) -> AsyncIterator[S.WatchEventsRequest]:
        while (request := await self.requests.get()) is not None:
            yield request

    def add(self, sid: str, after_seq: int = 0, tenant: str = TENANT) -> None:
        session = S.WatchedSession(tenant_id=tenant, session_id=sid, after_seq=after_seq)
        self.requests.put_nowait(S.WatchEventsRequest(add=session))

    def remove(self, sid: str) -> None:
        self.requests.put_nowait(S.WatchEventsRequest(remove=S.WatchedSession(tenant_id=TENANT, session_id=sid)))

    async def next(self) -> S.WatchEventsResponse:
        """The next response after the stream's first (an empty one, sent at once)."""
        if not self.opened:
            self.opened = True
            assert await self.next() == S.WatchEventsResponse()
        response = await asyncio.wait_for(self.call.read(), WAIT_S)
        assert response is not grpc.aio.EOF, "the watch ended"
        return response  # type: ignore[no-any-return]

    async def next_of(self, sid: str) -> S.WatchEventsResponse:
        """The next response naming `sid` (heartbeats skipped)."""
        while (response := await self.next()).session_id != sid:
            assert not response.session_id, f"a response of {response.session_id} came before {sid}'s"
        return response

    async def seqs_until(self, last: dict[str, int]) -> dict[str, list[int]]:
        """Every session's seqs, in arrival order, until each reached its `last` seq."""
        found: dict[str, list[int]] = {sid: [] for sid in last}
        while any((seqs[-1] if seqs else 0) < last[sid] for sid, seqs in found.items()):
            response = await self.next()
            assert not response.error, status_of(response)
            if response.session_id:
                assert response.tenant_id == TENANT
                found[response.session_id] += [e.seq for e in response.events]
        return found

    def close(self) -> None:
        self.requests.put_nowait(None)
        self.call.cancel()


# --------------------------------------------------------------------------- the stream


async def test_many_sessions_share_one_stream_each_in_order_and_contiguous(
    stub: sessions_pb2_grpc.SessionsServiceStub,
) -> None:
    sessions = [await leased(stub) for _ in range(30)]
    # Some sessions have a history: those are added at a cursor inside it (replay, then tail).
    for sid, token in sessions[:10]:
        await append(stub, sid, token, "h1", "h2", "h3")
    watch = Watch(stub)
    for i, (sid, _) in enumerate(sessions):
        watch.add(sid, after_seq=1 if i < 10 else 0)

    async def turn(sid: str, token: int) -> int:
        last = 0
        for n in range(8):  # one to three events an append, every session's appends interleaved
            last = await append(stub, sid, token, *(f"{n}.{k}" for k in range(1 + n % 3)))
        return last

    lasts = await asyncio.gather(*(turn(sid, token) for sid, token in sessions))
    found = await watch.seqs_until({sid: last for (sid, _), last in zip(sessions, lasts, strict=True)})
    for i, (sid, _) in enumerate(sessions):
        first = 2 if i < 10 else 1
        assert found[sid] == list(range(first, lasts[i] + 1)), sid
    watch.close()


async def test_a_removed_session_sends_nothing_more_and_is_added_again_at_a_cursor(
    stub: sessions_pb2_grpc.SessionsServiceStub,
) -> None:
    (sid, token), (marker, marker_token) = await leased(stub), await leased(stub)
    watch = Watch(stub)
    watch.add(sid)
    await append(stub, sid, token, "1", "2", "3")
    assert await watch.seqs_until({sid: 3}) == {sid: [1, 2, 3]}
    watch.remove(sid)
    watch.add(marker)  # taken after the remove: once the marker's events come, the remove was applied
    await append(stub, marker, marker_token, "m1")
    assert [e.seq for e in (await watch.next_of(marker)).events] == [1]
    await append(stub, sid, token, "4", "5")
    await append(stub, marker, marker_token, "m2")
    assert [e.seq for e in (await watch.next_of(marker)).events] == [2]  # nothing of the removed session first
    watch.add(sid, after_seq=2)
    assert await watch.seqs_until({sid: 5}) == {sid: [3, 4, 5]}
    watch.add(sid, after_seq=0)  # already watched: moves nothing
    await append(stub, sid, token, "6")
    assert await watch.seqs_until({sid: 6}) == {sid: [6]}
    watch.close()


async def test_a_deleted_session_or_a_bad_add_ends_only_that_sessions_watch(
    stub: sessions_pb2_grpc.SessionsServiceStub,
) -> None:
    (doomed, _), (kept, token) = await leased(stub), await leased(stub)
    watch = Watch(stub)
    watch.add(doomed)
    watch.add(kept)
    await stub.DeleteSession(S.DeleteSessionRequest(tenant_id=TENANT, session_id=doomed))
    assert status_of(await watch.next_of(doomed)) == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND", [])
    watch.add("no-such-session")
    assert status_of(await watch.next_of("no-such-session"))[:2] == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
    watch.add(kept, tenant="another-tenant")  # another tenant's session is not there
    other = await watch.next_of(kept)
    assert other.tenant_id == "another-tenant" and status_of(other)[0] == grpc.StatusCode.NOT_FOUND
    watch.add("x" * 300, tenant="")
    assert status_of(await watch.next_of("x" * 300)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ARGUMENT",
        ["add.tenant_id", "add.session_id"],
    )
    await append(stub, kept, token, "still followed")
    assert await watch.seqs_until({kept: 1}) == {kept: [1]}
    watch.close()


async def test_an_expired_cursor_or_one_ahead_of_the_log_ends_that_sessions_watch() -> None:
    running = await serve(SessionsServicer(MemorySessionStore(event_retention=8)))
    try:
        async with grpc.aio.insecure_channel(running.address) as channel:
            stub = sessions_pb2_grpc.SessionsServiceStub(channel)
            sid, token = await leased(stub)
            for n in range(40):
                await append(stub, sid, token, str(n))
            watch = Watch(stub)
            watch.add(sid, after_seq=1)
            assert status_of(await watch.next_of(sid))[:2] == (grpc.StatusCode.OUT_OF_RANGE, "CURSOR_EXPIRED")
            watch.add(sid, after_seq=41)
            assert status_of(await watch.next_of(sid)) == (
                grpc.StatusCode.INVALID_ARGUMENT,
                "INVALID_ARGUMENT",
                ["after_seq"],
            )
            watch.add(sid, after_seq=38)  # it left the watch: this add follows it again
            assert await watch.seqs_until({sid: 40}) == {sid: [39, 40]}
            watch.close()
    finally:
        await running.stop(0)


async def test_heartbeats_when_the_whole_stream_is_idle(stub: sessions_pb2_grpc.SessionsServiceStub) -> None:
    sid, token = await leased(stub)
    watch = Watch(stub, heartbeat_ms=50)
    watch.add(sid)
    assert await watch.next() == S.WatchEventsResponse()
    await append(stub, sid, token, "1")
    assert await watch.seqs_until({sid: 1}) == {sid: [1]}
    assert await watch.next() == S.WatchEventsResponse()
    watch.close()

    bad = Watch(stub, heartbeat_ms=-1)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await bad.next()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "heartbeat_ms" in (caught.value.details() or "")
    bad.close()


class CountedReads(MemorySessionStore):
    """The memory store, counting the reads of session logs begun."""

    reads = 0

    def read_events(self, *args: Any) -> Any:
        self.reads += 1
        return super().read_events(*args)


async def test_a_slow_consumer_misses_nothing() -> None:
    # A live reader more than 5 events behind the log is cut off inside the watch and reads on from its cursor.
    store = CountedReads(subscriber_max_lag=5, max_batch=2)
    running = await serve(SessionsServicer(store))
    try:
        options = [("grpc.http2.bdp_probe", 0)]  # a small window: the server soon waits to write
        async with grpc.aio.insecure_channel(running.address, options=options) as channel:
            stub = sessions_pb2_grpc.SessionsServiceStub(channel)
            sessions = [await leased(stub) for _ in range(5)]
            watch = Watch(stub)
            for sid, _ in sessions:
                watch.add(sid)
            big = "x" * 20_000
            for n in range(40):  # nobody reads meanwhile
                for sid, token in sessions:
                    await append(stub, sid, token, f"{n}{big}")
            found = await watch.seqs_until({sid: 40 for sid, _ in sessions})
            assert found == {sid: list(range(1, 41)) for sid, _ in sessions}
            assert store.reads > len(sessions)  # some were cut off and read on
            watch.close()
    finally:
        await running.stop(0)


async def test_a_draining_replica_ends_the_stream_unavailable(
    server: tuple[SessionsServicer, RunningServer], stub: sessions_pb2_grpc.SessionsServiceStub
) -> None:
    servicer = server[0]
    sid, token = await leased(stub)
    watch = Watch(stub)
    watch.add(sid)
    await append(stub, sid, token, "1")
    assert await watch.seqs_until({sid: 1}) == {sid: [1]}
    await servicer.drain()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        while True:
            await watch.next()
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in (caught.value.details() or "")
    watch.close()
    refused = Watch(stub)  # the replica takes no new watch either
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await refused.next()
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    refused.close()


# --------------------------------------------------------------------------- the gateway's reads


def remote_log(address: str) -> tuple[RemoteEventLog, Clients]:
    clients = Clients(Settings(sessions_addr=address))
    events = RemoteEventLog(clients, lambda: TENANT, retention=1000, max_lag=5000, max_batch=512, fanout_rate=0.0)
    return events, clients


async def read_until(events: RemoteEventLog, sid: str, after_seq: int, last: int) -> list[int]:
    seqs: list[int] = []
    async with contextlib.aclosing(events.read(sid, after_seq, 5.0)) as reading:
        async for batch in reading:
            seqs += [e.seq for e in batch or []]
            if seqs and seqs[-1] >= last:
                break
    return seqs


async def mirrored(events: RemoteEventLog, sids: list[str], readers: int = 1) -> None:
    """Wait until each session's mirror has `readers` readers waiting at its end."""

    def waiting(sid: str) -> int:
        mirror = events._mirrors.get((TENANT, sid))
        return mirror.log.readers if mirror is not None else 0

    async with asyncio.timeout(WAIT_S):
        while any(waiting(sid) < readers for sid in sids):  # noqa: ASYNC110 - the readers' counts are plain ints
            await asyncio.sleep(0.005)


async def test_the_gateway_reads_every_session_over_one_stream(
    server: tuple[SessionsServicer, RunningServer], stub: sessions_pb2_grpc.SessionsServiceStub
) -> None:
    events, clients = remote_log(server[1].address)
    try:
        sessions = [await leased(stub) for _ in range(20)]
        for sid, token in sessions:
            await append(stub, sid, token, "before")
        # Two readers of each session share its mirror; one of them starts inside the history.
        readers = [asyncio.create_task(read_until(events, sid, 0, 6)) for sid, _ in sessions]
        readers += [asyncio.create_task(read_until(events, sid, 1, 6)) for sid, _ in sessions]
        await mirrored(events, [sid for sid, _ in sessions], readers=2)
        for n in range(5):
            await asyncio.gather(*(append(stub, sid, token, str(n)) for sid, token in sessions))
        results = await asyncio.wait_for(asyncio.gather(*readers), WAIT_S)
        assert results == [[1, 2, 3, 4, 5, 6]] * 20 + [[2, 3, 4, 5, 6]] * 20
        assert events.streams_opened == 1 and not events.per_session

        # The last reader gone, the session leaves the watch; a new reader at another cursor gets its own.
        sid, token = sessions[0]
        assert not events._mirrors
        await append(stub, sid, token, "7")
        assert await asyncio.wait_for(read_until(events, sid, 3, 7), WAIT_S) == [4, 5, 6, 7]
        assert events.streams_opened == 1
    finally:
        await events.close()
        await clients.close()


async def test_a_deleted_session_fails_its_readers_only(
    server: tuple[SessionsServicer, RunningServer], stub: sessions_pb2_grpc.SessionsServiceStub
) -> None:
    events, clients = remote_log(server[1].address)
    try:
        (doomed, _), (kept, token) = await leased(stub), await leased(stub)
        doomed_reader = asyncio.create_task(read_until(events, doomed, 0, 1))
        kept_reader = asyncio.create_task(read_until(events, kept, 0, 2))
        await mirrored(events, [doomed, kept])
        await stub.DeleteSession(S.DeleteSessionRequest(tenant_id=TENANT, session_id=doomed))
        with pytest.raises(NotFound):
            await asyncio.wait_for(doomed_reader, WAIT_S)
        await append(stub, kept, token, "1", "2")
        assert await asyncio.wait_for(kept_reader, WAIT_S) == [1, 2]
        assert events.streams_opened == 1
    finally:
        await events.close()
        await clients.close()


async def test_a_sessions_restart_costs_the_gateways_reads_nothing() -> None:
    store = MemorySessionStore()  # both servers share it, as replicas share Redis
    first = await serve(SessionsServicer(store))
    address = first.address
    events, clients = remote_log(address)
    second: RunningServer | None = None
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = sessions_pb2_grpc.SessionsServiceStub(channel)
            sessions = [await leased(stub) for _ in range(10)]
            readers = [asyncio.create_task(read_until(events, sid, 0, 9)) for sid, _ in sessions]
            await mirrored(events, [sid for sid, _ in sessions])
            for n in range(3):
                await asyncio.gather(*(append(stub, sid, token, f"a{n}") for sid, token in sessions))
            await first.stop(0)  # drains: the watch ends UNAVAILABLE, then the server is gone
            second = await serve(SessionsServicer(store), address)
            for n in range(6):  # appended while the gateway's watch is away or opening again
                await asyncio.gather(*(append(stub, sid, token, f"b{n}") for sid, token in sessions))
            results = await asyncio.wait_for(asyncio.gather(*readers), WAIT_S)
        assert results == [list(range(1, 10))] * len(sessions)
        assert events.streams_opened >= 2
    finally:
        await events.close()
        await clients.close()
        if second is not None:
            await second.stop(0)


class WithoutWatch(SessionsServicer):
    """A sessions service of the previous version: no WatchEvents."""

    async def WatchEvents(self, requests: Any, context: Any) -> AsyncIterator[Any]:
        raise NotImplementedError
        yield  # an async generator


async def test_the_gateway_reads_per_session_from_a_sessions_service_without_watch_events() -> None:
    running = await serve(WithoutWatch(MemorySessionStore()))
    events, clients = remote_log(running.address)
    try:
        async with grpc.aio.insecure_channel(running.address) as channel:
            stub = sessions_pb2_grpc.SessionsServiceStub(channel)
            (a, a_token), (b, b_token) = await leased(stub), await leased(stub)
            readers = [asyncio.create_task(read_until(events, sid, 0, 3)) for sid in (a, b)]
            await mirrored(events, [a, b])
            for n in range(3):
                await append(stub, a, a_token, str(n))
                await append(stub, b, b_token, str(n))
            assert await asyncio.wait_for(asyncio.gather(*readers), WAIT_S) == [[1, 2, 3], [1, 2, 3]]
            assert events.per_session and events.streams_opened == 1
            assert await asyncio.wait_for(read_until(events, a, 1, 3), WAIT_S) == [2, 3]  # later reads too
    finally:
        await events.close()
        await clients.close()
        await running.stop(0)
