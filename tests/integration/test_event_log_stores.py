"""A session's event log end to end: written by the session store (AppendEvents, under the turn's
lease), read the way a gateway reads it. In memory the store serves its own readers (ReadEvents);
on Redis (standalone, Sentinel, cluster) every gateway replica follows the streams itself
(services/lib/redis_event_log.py), so "replicas" here are separate stores and readers on one Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest
import pytest_asyncio

from cogmesh.common.v1 import errors_pb2, events_pb2
from services.kit.errors import InvalidArgument, NotFound, OutOfRange, ResourceExhausted, Unavailable
from services.lib import redis_event_log
from services.lib.event_log import Batch, SessionLog
from services.lib.redis_event_log import RedisEventLog
from services.lib.redis_keys import SessionKeys
from services.sessions.model import Acquired, NewEvents, NewSession, SessionNotFound, StoreUnavailable, Strategy
from services.sessions.redis_store import RedisSessionStore
from services.sessions.store import MemorySessionStore, SessionStore
from tests.support.redis_server import RedisServer, admin_client
from tests.support.redis_topologies import REDIS_TOPOLOGIES, RedisUnderTest, redis_for

ACME = "acme"


def delta(text: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id="t", assistant_delta=events_pb2.AssistantDelta(text=text))


def final() -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id="t", final=events_pb2.FinalResult(text="done"))


def seqs(batch: list[events_pb2.RuntimeEvent] | None) -> list[int]:
    return [e.seq for e in batch or []]


@dataclass
class Replica:
    """One replica's view of the log: its session store writes, its reader follows."""

    store: SessionStore
    reader: RedisEventLog | None  # None: the memory store serves its readers itself

    def read(self, sid: str, after: int, heartbeat_s: float) -> AsyncIterator[Batch | None]:
        if self.reader is None:
            return self.store.read_events(ACME, sid, after, True, heartbeat_s)
        return self.reader.read(sid, after, heartbeat_s)

    def mirror(self, sid: str) -> SessionLog | None:
        if self.reader is None:
            assert isinstance(self.store, MemorySessionStore)
            entry = self.store._entries.get(sid)
            return entry.log if entry else None
        follower = self.reader._followers.get(sid)
        return follower.mirror if follower else None


@dataclass
class Turn:
    """A session with a turn holding its lease: appends go in under the turn's token."""

    sid: str
    token: int
    replicas: list[Replica]

    async def append(self, *events: events_pb2.RuntimeEvent, via: int = 0, append_id: str = "") -> list[int]:
        batch = list(events)
        await self.replicas[via].store.append_events(ACME, self.sid, NewEvents("t", self.token, batch, (), append_id))
        return seqs(batch)

    async def last_seq(self) -> int:
        return (await self.replicas[0].store.log_state(ACME, self.sid)).last_seq


MakeTurn = Callable[..., Awaitable[Turn]]


@pytest_asyncio.fixture(params=["memory", *REDIS_TOPOLOGIES])
async def make_turn(request: pytest.FixtureRequest) -> AsyncIterator[MakeTurn]:
    """make_turn(replicas=1, **reader options): a new session whose turn holds the lease."""
    made: list[Replica] = []
    with contextlib.ExitStack() as stack:
        redis = None if request.param == "memory" else stack.enter_context(redis_for(request, request.param))

        async def make(replicas: int = 1, **options: float) -> Turn:
            group: list[Replica] = []
            for _ in range(replicas):
                if redis is None:  # one memory store stands for every replica (they cannot share one)
                    store = (
                        group[0].store
                        if group
                        else MemorySessionStore(
                            event_retention=int(options.get("retention", 10_000)),
                            subscriber_max_lag=int(options.get("max_lag", 5_000)),
                            fanout_messages_per_s=options.get("fanout_rate", 0.0),
                            max_batch=int(options.get("max_batch", 512)),
                        )
                    )
                    group.append(Replica(store, None))
                    continue
                retention = int(options.get("retention", 10_000))
                redis_store = RedisSessionStore.from_url(redis.url, redis.prefix, 0.0, 2.0, event_retention=retention)
                group.append(Replica(redis_store, RedisEventLog(redis.url, prefix=redis.prefix, **options)))  # type: ignore[arg-type]
            made.extend(group)
            record, _ = await group[0].store.create(ACME, NewSession("", "", "default"))
            granted = await group[0].store.try_acquire(ACME, record.session_id, "t", 60.0, Strategy.REJECT)
            assert isinstance(granted, Acquired)
            return Turn(record.session_id, granted.token, group)

        yield make
        for replica in made:
            if replica.reader is not None:
                await replica.reader.close()
        for store in {id(r.store): r.store for r in made}.values():
            await store.close()


async def tailing(replica: Replica, sid: str, readers: int = 1) -> None:
    """Wait until `readers` readers of the session wait for its next events (replays done, tails started)."""

    def waiting() -> int:
        mirror = replica.mirror(sid)
        return mirror.readers if mirror else 0

    async with asyncio.timeout(10):
        while waiting() < readers:  # noqa: ASYNC110 - nothing to wait on: the readers' counts are plain ints
            await asyncio.sleep(0.005)


async def collect(replica: Replica, sid: str, after: int, until_seq: int, heartbeat_s: float = 5) -> list[int]:
    found: list[int] = []
    async for batch in replica.read(sid, after, heartbeat_s):
        found += seqs(batch)
        if found and found[-1] >= until_seq:
            return found
    return found


async def test_appends_get_seqs_and_readers_replay_then_tail(make_turn: MakeTurn) -> None:
    turn = await make_turn()
    replica, sid = turn.replicas[0], turn.sid
    assert await turn.append(*[delta(str(i)) for i in range(5)]) == [1, 2, 3, 4, 5]
    assert not (await replica.store.log_state(ACME, sid)).ends_with_turn_end
    reader = asyncio.create_task(collect(replica, sid, 2, 9))
    await tailing(replica, sid)
    await turn.append(delta("5"), delta("6"))
    await turn.append(delta("7"), final())
    assert await asyncio.wait_for(reader, 5) == [3, 4, 5, 6, 7, 8, 9]
    assert (await replica.store.log_state(ACME, sid)).ends_with_turn_end
    events = [e async for batch in replica.store.read_events(ACME, sid, 0, False, 5) for e in batch or []]
    assert seqs(events) == list(range(1, 10))
    assert all(e.session_id == sid and e.turn_id == "t" and e.create_time.seconds > 0 for e in events)


async def test_replicas_share_one_order(make_turn: MakeTurn) -> None:
    turn = await make_turn(replicas=2)
    a, b = turn.replicas
    watchers = [asyncio.create_task(collect(b, turn.sid, 0, 60)) for _ in range(5)]
    await tailing(b, turn.sid, readers=5)
    for i in range(30):  # both replicas append, interleaved
        await turn.append(delta(f"a{i}"), delta(f"b{i}"), via=i % 2)
    results = await asyncio.wait_for(asyncio.gather(*watchers), 10)
    assert all(r == list(range(1, 61)) for r in results)
    assert await collect(a, turn.sid, 55, 60) == [56, 57, 58, 59, 60]


async def test_heartbeat_when_idle(make_turn: MakeTurn) -> None:
    turn = await make_turn()
    stream = turn.replicas[0].read(turn.sid, 0, 0.05)
    assert await asyncio.wait_for(anext(stream), 2) is None
    await stream.aclose()


async def test_cursor_errors(make_turn: MakeTurn) -> None:
    turn = await make_turn(retention=8)
    replica = turn.replicas[0]
    for i in range(40):
        await turn.append(delta(str(i)))
    with pytest.raises(InvalidArgument):
        await anext(replica.read(turn.sid, 41, 5))
    with pytest.raises(OutOfRange) as caught:
        await anext(replica.read(turn.sid, 1, 5))
    assert int(caught.value.metadata["oldest_seq"]) > 2
    assert await collect(replica, turn.sid, 38, 40) == [39, 40]


async def test_live_reader_too_far_behind_is_cut_off_and_resumes(make_turn: MakeTurn) -> None:
    turn = await make_turn(max_lag=5, max_batch=2)
    replica = turn.replicas[0]
    await turn.append(delta("0"))
    stream = replica.read(turn.sid, 0, 5)
    assert seqs(await anext(stream)) == [1]
    live = asyncio.create_task(anext(stream))
    await tailing(replica, turn.sid)
    await turn.append(delta("1"))
    assert seqs(await asyncio.wait_for(live, 5)) == [2]
    await turn.append(*[delta(str(i)) for i in range(10)])  # the reader stalls meanwhile
    mirror = replica.mirror(turn.sid)
    async with asyncio.timeout(10):
        while mirror is not None and mirror.published_seq < 12:  # noqa: ASYNC110 - the mirror fills on its own
            await asyncio.sleep(0.005)
    with pytest.raises(ResourceExhausted) as caught:
        await anext(stream)
    assert caught.value.metadata["resume_after_seq"] == "2"
    assert await collect(replica, turn.sid, 2, 12) == list(range(3, 13))


async def test_deltas_within_the_window_reach_readers_together(make_turn: MakeTurn) -> None:
    turn = await make_turn(fanout_rate=1 / 0.3)  # one reader: a 0.3 s window
    replica = turn.replicas[0]
    stream = replica.read(turn.sid, 0, 30)
    waiting = asyncio.create_task(anext(stream))
    await tailing(replica, turn.sid)
    await turn.append(delta("0"))  # after a quiet spell: at once
    assert seqs(await asyncio.wait_for(waiting, 2)) == [1]
    waiting = asyncio.create_task(anext(stream))
    for i in range(3):  # without the window the reader would wake for the first of these alone
        await turn.append(delta(str(i)))
        await asyncio.sleep(0.03)
    assert seqs(await asyncio.wait_for(waiting, 3)) == [2, 3, 4]


async def test_an_event_that_is_not_a_delta_publishes_at_once_with_the_held_deltas(make_turn: MakeTurn) -> None:
    # A window (10 s) far longer than the wait tells "at once" from "at the window's end".
    turn = await make_turn(fanout_rate=0.1)
    replica = turn.replicas[0]
    stream = replica.read(turn.sid, 0, 30)
    waiting = asyncio.create_task(anext(stream))
    await tailing(replica, turn.sid)
    await turn.append(delta("0"))
    assert seqs(await asyncio.wait_for(waiting, 2)) == [1]
    waiting = asyncio.create_task(anext(stream))
    await turn.append(delta("1"))
    mirror = replica.mirror(turn.sid)
    async with asyncio.timeout(10):
        while mirror is not None and mirror.last_seq < 2:  # noqa: ASYNC110 - the mirror fills on its own
            await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)
    assert not waiting.done()  # held for the window
    await turn.append(final())
    assert seqs(await asyncio.wait_for(waiting, 2)) == [2, 3]


# --------------------------------------------------------------------------- deleted sessions


async def test_deleting_a_session_ends_its_readers_on_every_replica_and_takes_no_more_events(
    make_turn: MakeTurn,
) -> None:
    turn = await make_turn(replicas=2)
    a, b = turn.replicas
    await turn.append(delta("x"))
    reader = b.read(turn.sid, 0, 30)
    assert seqs(await asyncio.wait_for(anext(reader), 5)) == [1]  # attached and tailing
    waiting = asyncio.create_task(anext(reader))
    assert await a.store.delete(ACME, turn.sid)
    with pytest.raises(NotFound) as caught:
        await asyncio.wait_for(waiting, 10)
    assert caught.value.reason == errors_pb2.ERROR_REASON_SESSION_NOT_FOUND
    with pytest.raises(SessionNotFound):  # the turn still runs: it must stop, not start the log anew
        await turn.append(delta("late"))
    with pytest.raises((NotFound, SessionNotFound)):
        await anext(b.read(turn.sid, 0, 5))


async def test_a_deleted_session_leaves_only_a_tombstone_and_a_short_lived_marker(any_redis: RedisUnderTest) -> None:
    store = RedisSessionStore.from_url(any_redis.url, any_redis.prefix, 0.0, 2.0)
    admin = admin_client(any_redis.url)
    try:
        record, _ = await store.create(ACME, NewSession("", "", "default"))
        sid = record.session_id
        granted = await store.try_acquire(ACME, sid, "t", 60.0, Strategy.REJECT)
        assert isinstance(granted, Acquired)
        await store.append_events(ACME, sid, NewEvents("t", granted.token, [delta("x")], (("step", b"s", 1),), "1"))
        keys = SessionKeys(any_redis.prefix, sid)
        assert await store.delete(ACME, sid)
        left = [k for k in ("s", "events:batches", "j", "jt", "m") if admin.exists(keys.key(k))]
        assert left == []
        assert 0 < int(admin.ttl(keys.key("events:dropped"))) <= redis_event_log.DROPPED_TTL_S
        assert 0 < int(admin.ttl(keys.key("events"))) <= redis_event_log.DROP_WAKE_S
        assert admin.xlen(keys.key("events")) == 1  # the marker alone
    finally:
        admin.close()
        await store.close()


async def test_readers_end_even_when_their_replica_missed_the_drop_marker(
    any_redis: RedisUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_event_log, "DROP_RECHECK_S", 0.1)
    store = RedisSessionStore.from_url(any_redis.url, any_redis.prefix, 0.0, 2.0)
    store.drop_wake_s = 0  # the marker is gone at once: no watch loop can read it
    reader = RedisEventLog(any_redis.url, prefix=any_redis.prefix)
    try:
        record, _ = await store.create(ACME, NewSession("", "", "default"))
        sid = record.session_id
        granted = await store.try_acquire(ACME, sid, "t", 60.0, Strategy.REJECT)
        assert isinstance(granted, Acquired)
        await store.append_events(ACME, sid, NewEvents("t", granted.token, [delta("x")]))
        reading = reader.read(sid, 0, 30)
        assert seqs(await asyncio.wait_for(anext(reading), 5)) == [1]
        waiting = asyncio.create_task(anext(reading))
        assert await store.delete(ACME, sid)
        with pytest.raises(NotFound):
            await asyncio.wait_for(waiting, 10)
    finally:
        await reader.close()
        await store.close()


# --------------------------------------------------------------------------- Redis faults


async def redis_turn(server: RedisServer, timeout_s: float) -> tuple[RedisSessionStore, str, int]:
    store = RedisSessionStore.from_url(server.url, f"t{uuid.uuid4().hex[:6]}:", 0.0, timeout_s)
    record, _ = await store.create(ACME, NewSession("", "", "default"))
    granted = await store.try_acquire(ACME, record.session_id, "t", 600.0, Strategy.REJECT)
    assert isinstance(granted, Acquired)
    return store, record.session_id, granted.token


async def test_redis_down_is_unavailable_and_readers_recover() -> None:
    with RedisServer(appendonly=True) as server:  # the log must survive the restart
        store, sid, token = await redis_turn(server, 0.5)
        reader = RedisEventLog(server.url, prefix=store._prefix, timeout_s=0.5)
        await store.append_events(ACME, sid, NewEvents("t", token, [delta("a")]))
        reading = reader.read(sid, 1, 5)
        waiting = asyncio.create_task(anext(reading))
        async with asyncio.timeout(10):
            while sid not in reader._followers:  # noqa: ASYNC110 - attached by the read above
                await asyncio.sleep(0.005)
        server.stop()
        with pytest.raises(StoreUnavailable):
            await store.append_events(ACME, sid, NewEvents("t", token, [delta("lost?")]))
        server.start()
        await store.append_events(ACME, sid, NewEvents("t", token, [delta("b")]))
        assert [e.assistant_delta.text for e in (await asyncio.wait_for(waiting, 10)) or []] == ["b"]
        await reading.aclose()
        await reader.close()
        await store.close()


async def test_an_append_right_after_a_redis_restart_succeeds_once() -> None:
    with RedisServer(appendonly=True) as server:
        store, sid, token = await redis_turn(server, 2.0)
        await store.append_events(ACME, sid, NewEvents("t", token, [delta("a")]))  # a pooled connection to break
        server.restart()
        await store.append_events(ACME, sid, NewEvents("t", token, [delta("b")]))  # meets the stale connection
        events = [e async for batch in store.read_events(ACME, sid, 0, False, 5) for e in batch or []]
        assert [(e.seq, e.assistant_delta.text) for e in events] == [(1, "a"), (2, "b")]
        await store.close()


async def test_an_append_that_timed_out_but_ran_is_not_logged_twice_when_retried() -> None:
    with RedisServer() as server:
        store, sid, token = await redis_turn(server, 0.3)
        await store.append_events(ACME, sid, NewEvents("t", token, [delta("a")], (), "1"))
        server.pause()  # Redis takes the script but answers only once it runs again
        with pytest.raises(StoreUnavailable):
            await store.append_events(ACME, sid, NewEvents("t", token, [delta("b")], (), "2"))
        server.resume()
        retried = await store.append_events(ACME, sid, NewEvents("t", token, [delta("b")], (), "2"))
        assert retried.duplicate and retried.last_seq == 2
        events = [e async for batch in store.read_events(ACME, sid, 0, False, 5) for e in batch or []]
        assert [(e.seq, e.assistant_delta.text) for e in events] == [(1, "a"), (2, "b")]
        await store.close()


async def test_the_reader_reports_redis_down_as_unavailable() -> None:
    with RedisServer() as server:
        reader = RedisEventLog(server.url, prefix="p:", timeout_s=0.3)
        server.stop()
        with pytest.raises(Unavailable) as caught:
            await reader.last_seq("some-session")
        assert caught.value.metadata["retryable"] == "true"
        await reader.close()


async def test_the_wake_stream_of_a_watch_loop_always_expires() -> None:
    """A replica that dies leaves its wake stream (how adding a session ends the loop's XREAD) behind for
    WAKE_TTL_S at most. The expiry is set every third of that, not on every wake, and again after Redis
    was lost (a restart may have dropped it)."""
    with RedisServer(appendonly=True) as server:
        store = RedisSessionStore.from_url(server.url, f"t{uuid.uuid4().hex[:6]}:", 0.0, 0.5)
        reader = RedisEventLog(server.url, prefix=store._prefix, timeout_s=0.5)
        admin = admin_client(server.url)
        readings = []
        try:

            async def follow(wakes: int) -> None:
                """Follow a new session; its add is the loop's `wakes`th wake (the first add starts the loop)."""
                record, _ = await store.create(ACME, NewSession("", "", "default"))
                reading = reader.read(record.session_id, 0, 5)
                readings.append((reading, asyncio.create_task(anext(reading))))
                async with asyncio.timeout(10):
                    while len(readings) == 1 and reader._watch is None:  # noqa: ASYNC110 - started by the add
                        await asyncio.sleep(0.005)
                    while wakes and admin.xlen(reader._wake_key) < wakes:  # noqa: ASYNC110 - sent by the add
                        await asyncio.sleep(0.005)

            await follow(0)
            for wakes in (1, 2, 3):
                await follow(wakes)
                assert 0 < int(admin.ttl(reader._wake_key)) <= redis_event_log.WAKE_TTL_S
            admin.persist(reader._wake_key)  # as a Redis that came back without the expiry
            server.stop()
            async with asyncio.timeout(10):
                while reader._wake_ttl_due:  # noqa: ASYNC110 - the watch loop notices Redis is gone
                    await asyncio.sleep(0.005)
            server.start()
            await follow(4)
            assert 0 < int(admin.ttl(reader._wake_key)) <= redis_event_log.WAKE_TTL_S
        finally:
            for reading, waiting in readings:
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await waiting
                await reading.aclose()
            admin.close()
            await reader.close()
            await store.close()
