"""One contract for both event logs: in-memory and Redis Streams (a real Redis)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from cogmesh.common.v1 import errors_pb2, events_pb2
from gateway import redis_event_log
from gateway.event_log import EventLog, MemoryEventLog, OpenTurn, lost_turn_event
from gateway.redis_event_log import RedisEventLog
from services.kit.errors import InvalidArgument, NotFound, OutOfRange, ResourceExhausted, Unavailable
from tests.support.redis_server import RedisServer, admin_client
from tests.support.redis_topologies import REDIS_TOPOLOGIES, RedisUnderTest, redis_for

Factory = Callable[..., EventLog]


def delta(text: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id="t", assistant_delta=events_pb2.AssistantDelta(text=text))


def final() -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id="t", final=events_pb2.FinalResult(text="done"))


@pytest_asyncio.fixture(params=["memory", *REDIS_TOPOLOGIES])
async def make_log(request: pytest.FixtureRequest) -> AsyncIterator[Factory]:
    made: list[EventLog] = []
    with contextlib.ExitStack() as stack:
        redis = None if request.param == "memory" else stack.enter_context(redis_for(request, request.param))

        def factory(**options: float) -> EventLog:
            log: EventLog
            if redis is None:
                # One memory log stands for "every replica" (they cannot share one).
                log = made[0] if made else MemoryEventLog(**options)
            else:
                log = RedisEventLog(redis.url, prefix=redis.prefix, **options)
            made.append(log)
            return log

        yield factory
        for log in {id(x): x for x in made}.values():
            await log.close()


async def tailing(log: EventLog, sid: str, readers: int = 1) -> None:
    """Wait until `readers` readers of the session wait for its next events (replays done, tails started)."""

    def waiting() -> int:
        if isinstance(log, MemoryEventLog):
            mirror = log._logs.get(sid)
        else:
            assert isinstance(log, RedisEventLog)
            follower = log._followers.get(sid)
            mirror = follower.mirror if follower else None
        return mirror.readers if mirror else 0

    async with asyncio.timeout(10):
        while waiting() < readers:  # noqa: ASYNC110 - nothing to wait on: the readers' counts are plain ints
            await asyncio.sleep(0.005)


async def collect(log: EventLog, sid: str, after: int, until_seq: int, heartbeat_s: float = 5) -> list[int]:
    seqs: list[int] = []
    async for batch in log.read(sid, after, heartbeat_s):
        if batch is None:
            continue
        seqs += [e.seq for e in batch]
        if seqs and seqs[-1] >= until_seq:
            return seqs
    return seqs


async def test_append_stamps_seq_and_replays_then_tails(make_log: Factory) -> None:
    log, sid = make_log(), uuid.uuid4().hex
    batch = [delta(str(i)) for i in range(5)]
    await log.append(sid, batch)
    assert [e.seq for e in batch] == [1, 2, 3, 4, 5] and await log.last_seq(sid) == 5
    assert all(e.session_id == sid and e.create_time.seconds > 0 for e in batch)
    assert not await log.ends_with_turn_end(sid)
    reader = asyncio.create_task(collect(log, sid, 2, 9))
    await tailing(log, sid)
    await log.append(sid, [delta("5"), delta("6")])
    await log.append(sid, [delta("7"), final()])
    assert await asyncio.wait_for(reader, 5) == [3, 4, 5, 6, 7, 8, 9]
    assert await log.ends_with_turn_end(sid)


async def test_replicas_share_one_order(make_log: Factory) -> None:
    a, b, sid = make_log(), make_log(), uuid.uuid4().hex
    watchers = [asyncio.create_task(collect(b, sid, 0, 60)) for _ in range(5)]
    await tailing(b, sid, readers=5)
    for i in range(30):  # both "replicas" append, interleaved
        await (a if i % 2 else b).append(sid, [delta(f"a{i}"), delta(f"b{i}")])
    results = await asyncio.wait_for(asyncio.gather(*watchers), 10)
    assert all(r == list(range(1, 61)) for r in results)
    assert await collect(a, sid, 55, 60) == [56, 57, 58, 59, 60]


async def test_heartbeat_when_idle(make_log: Factory) -> None:
    log, sid = make_log(), uuid.uuid4().hex
    stream = log.read(sid, 0, 0.05)
    assert await asyncio.wait_for(anext(stream), 2) is None
    await stream.aclose()


async def test_cursor_errors(make_log: Factory) -> None:
    log, sid = make_log(retention=8), uuid.uuid4().hex
    for i in range(40):
        await log.append(sid, [delta(str(i))])
    with pytest.raises(InvalidArgument):
        await anext(log.read(sid, 41, 5))
    with pytest.raises(OutOfRange) as caught:
        await anext(log.read(sid, 1, 5))
    assert int(caught.value.metadata["oldest_seq"]) > 2
    assert await collect(log, sid, 38, 40) == [39, 40]


async def test_live_reader_too_far_behind_is_cut_off_and_resumes(make_log: Factory) -> None:
    log, sid = make_log(max_lag=5, max_batch=2), uuid.uuid4().hex
    await log.append(sid, [delta("0")])
    stream = log.read(sid, 0, 5)
    assert [e.seq for e in (await anext(stream)) or []] == [1]
    live = asyncio.create_task(anext(stream))
    await asyncio.sleep(0.05)
    await log.append(sid, [delta("1")])
    assert [e.seq for e in (await asyncio.wait_for(live, 5)) or []] == [2]
    await log.append(sid, [delta(str(i)) for i in range(10)])  # the reader stalls meanwhile
    await asyncio.sleep(0.1)
    with pytest.raises(ResourceExhausted) as caught:
        await anext(stream)
    assert caught.value.metadata["resume_after_seq"] == "2"
    assert await collect(log, sid, 2, 12) == list(range(3, 13))


def seqs(batch: list[events_pb2.RuntimeEvent] | None) -> list[int]:
    return [e.seq for e in batch or []]


async def test_deltas_within_the_window_reach_readers_together(make_log: Factory) -> None:
    log, sid = make_log(fanout_rate=1 / 0.3), uuid.uuid4().hex  # one reader: a 0.3 s window
    stream = log.read(sid, 0, 30)
    waiting = asyncio.create_task(anext(stream))
    await tailing(log, sid)
    await log.append(sid, [delta("0")])  # after a quiet spell: at once
    assert seqs(await asyncio.wait_for(waiting, 2)) == [1]
    waiting = asyncio.create_task(anext(stream))
    for i in range(3):  # without the window the reader would wake for the first of these alone
        await log.append(sid, [delta(str(i))])
        await asyncio.sleep(0.03)
    assert seqs(await asyncio.wait_for(waiting, 3)) == [2, 3, 4]


async def test_an_event_that_is_not_a_delta_publishes_at_once_with_the_held_deltas(make_log: Factory) -> None:
    # A window (10 s) far longer than the wait tells "at once" from "at the window's end".
    log, sid = make_log(fanout_rate=0.1), uuid.uuid4().hex
    stream = log.read(sid, 0, 30)
    waiting = asyncio.create_task(anext(stream))
    await tailing(log, sid)
    await log.append(sid, [delta("0")])
    assert seqs(await asyncio.wait_for(waiting, 2)) == [1]
    waiting = asyncio.create_task(anext(stream))
    await log.append(sid, [delta("1")])
    await asyncio.sleep(0.1)
    assert not waiting.done()  # held for the window
    await log.append(sid, [final()])
    assert seqs(await asyncio.wait_for(waiting, 2)) == [2, 3]


async def test_drop_ends_readers(make_log: Factory) -> None:
    log, sid = make_log(), uuid.uuid4().hex
    await log.append(sid, [delta("x")])
    stream = log.read(sid, 1, 5)
    waiting = asyncio.create_task(anext(stream))
    await tailing(log, sid)
    await log.drop(sid)
    with pytest.raises(NotFound):
        await asyncio.wait_for(waiting, 5)
    assert await log.last_seq(sid) == 0


async def test_redis_down_is_unavailable_and_followers_recover() -> None:
    with RedisServer(appendonly=True) as server:  # the log must survive the restart
        log = RedisEventLog(server.url, prefix=f"t{uuid.uuid4().hex[:6]}:", timeout_s=0.5)
        sid = uuid.uuid4().hex
        await log.append(sid, [delta("a")])
        reader = log.read(sid, 1, 5)
        waiting = asyncio.create_task(anext(reader))
        await tailing(log, sid)
        server.stop()
        with pytest.raises(Unavailable) as caught:
            await log.append(sid, [delta("lost?")])
        assert caught.value.metadata["retryable"] == "true"
        server.start()
        await log.append(sid, [delta("b")])
        assert [e.assistant_delta.text for e in (await asyncio.wait_for(waiting, 10)) or []] == ["b"]
        await reader.aclose()
        await log.close()


async def test_an_append_right_after_a_redis_restart_succeeds_once() -> None:
    with RedisServer(appendonly=True) as server:
        log = RedisEventLog(server.url, prefix=f"t{uuid.uuid4().hex[:6]}:", timeout_s=2.0)
        sid = uuid.uuid4().hex
        await log.append(sid, [delta("a")])  # leaves a pooled connection that the restart closes
        server.restart()
        await log.append(sid, [delta("b")])  # the first command meets the stale connection
        events = await asyncio.wait_for(anext(log.read(sid, 0, 5)), 5) or []
        assert [(e.seq, e.assistant_delta.text) for e in events] == [(1, "a"), (2, "b")]
        await log.close()


# --------------------------------------------------------------------------- turns that lost their driver


def accepted(turn_id: str) -> events_pb2.RuntimeEvent:
    status = events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_QUEUED, text="accepted")
    return events_pb2.RuntimeEvent(turn_id=turn_id, status=status)


def ended(turn_id: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id=turn_id, final=events_pb2.FinalResult(text="done"))


async def whole_log(log: EventLog, sid: str) -> list[tuple[int, str, str]]:
    """(seq, turn, payload) of every event the session's log holds."""
    last = await log.last_seq(sid)
    found: list[tuple[int, str, str]] = []
    if last:
        async for batch in log.read(sid, 0, 5):
            found += [(e.seq, e.turn_id, e.WhichOneof("payload") or "") for e in batch or []]
            if found and found[-1][0] >= last:
                break
    return found


async def expired(log: EventLog, sid: str) -> list[tuple[str, str]]:
    return [(t.turn_id, t.tenant_id) for t in await log.expired_turns() if t.session_id == sid]


async def test_a_turn_whose_mark_lapsed_is_ended_before_the_next_turn_starts(make_log: Factory) -> None:
    log, sid = make_log(), uuid.uuid4().hex
    lost = OpenTurn(sid, "a", "acme", ttl_s=0)  # its gateway died at once: the mark has lapsed
    await log.append(sid, [accepted("a"), delta("a1")], opened=lost)
    new = [accepted("b")]
    await log.append(sid, new, opened=OpenTurn(sid, "b", "acme"))
    assert await whole_log(log, sid) == [
        (1, "a", "status"),
        (2, "t", "assistant_delta"),
        (3, "a", "error"),
        (4, "b", "status"),
    ]
    assert new[0].seq == 4
    end = (await anext(log.read(sid, 2, 5)) or [])[0]
    assert end.error == lost_turn_event(lost).error and end.session_id == sid and end.create_time.seconds > 0
    assert end.error.retryable and end.error.kind == events_pb2.ERROR_KIND_UNAVAILABLE
    # Ended once: no replica's reaper finds it any more.
    assert await expired(log, sid) == []
    assert not await log.reap(lost, lost_turn_event(lost))
    assert await log.last_seq(sid) == 4


async def test_a_turn_already_reaped_is_not_ended_twice(make_log: Factory) -> None:
    log, sid = make_log(), uuid.uuid4().hex
    lost = OpenTurn(sid, "a", "acme", ttl_s=0)
    await log.append(sid, [accepted("a")], opened=lost)
    assert await expired(log, sid) == [("a", "acme")]
    assert await log.reap(lost, lost_turn_event(lost))
    await log.append(sid, [accepted("b")], opened=OpenTurn(sid, "b", "acme"))
    assert await whole_log(log, sid) == [(1, "a", "status"), (2, "a", "error"), (3, "b", "status")]


async def test_a_mark_that_has_not_lapsed_is_kept_aside_until_its_turn_logs_its_end(make_log: Factory) -> None:
    # A live driver frees the lease just before it logs its end: the next turn may open in between.
    log, sid = make_log(), uuid.uuid4().hex
    await log.append(sid, [accepted("a")], opened=OpenTurn(sid, "a", "acme"))
    await log.append(sid, [accepted("b")], opened=OpenTurn(sid, "b", "acme"))
    await log.append(sid, [ended("a")])
    assert await whole_log(log, sid) == [(1, "a", "status"), (2, "b", "status"), (3, "a", "final")]
    await log.keep_turn(OpenTurn(sid, "a", "acme", ttl_s=0))  # would make its mark lapse, were it still there
    await log.keep_turn(OpenTurn(sid, "b", "acme", ttl_s=0))
    assert await expired(log, sid) == [("b", "acme")]


async def test_a_mark_kept_aside_whose_turn_never_ends_is_reaped(make_log: Factory) -> None:
    log, sid = make_log(), uuid.uuid4().hex
    gone = OpenTurn(sid, "a", "acme")
    await log.append(sid, [accepted("a")], opened=gone)
    await log.append(sid, [accepted("b")], opened=OpenTurn(sid, "b", "acme"))
    await log.keep_turn(OpenTurn(sid, "a", "acme", ttl_s=0))  # its driver stops renewing: the mark lapses
    assert await expired(log, sid) == [("a", "acme")]
    assert await log.reap(gone, lost_turn_event(gone))
    assert not await log.reap(gone, lost_turn_event(gone))
    assert await whole_log(log, sid) == [(1, "a", "status"), (2, "b", "status"), (3, "a", "error")]
    assert await expired(log, sid) == []
    await log.append(sid, [ended("b")])
    await log.keep_turn(OpenTurn(sid, "b", "acme", ttl_s=0))
    assert await expired(log, sid) == []


# --------------------------------------------------------------------------- dropped sessions


async def test_a_dropped_session_takes_no_more_events(make_log: Factory) -> None:
    log, sid = make_log(), uuid.uuid4().hex
    running = OpenTurn(sid, "a", "acme", ttl_s=0)
    await log.append(sid, [accepted("a")], opened=running)
    await log.drop(sid)
    with pytest.raises(NotFound) as caught:
        await log.append(sid, [delta("late")])  # the turn still runs: it must stop, not start the log anew
    assert caught.value.reason == errors_pb2.ERROR_REASON_SESSION_NOT_FOUND
    assert caught.value.metadata["session_id"] == sid
    with pytest.raises(NotFound):
        await log.append(sid, [accepted("b")], opened=OpenTurn(sid, "b", "acme"))
    assert not await log.reap(running, lost_turn_event(running))
    assert await expired(log, sid) == []
    assert await log.last_seq(sid) == 0
    assert await log.ends_with_turn_end(sid)
    with pytest.raises(NotFound):
        await anext(log.read(sid, 0, 5))


async def test_dropping_a_session_ends_its_readers_on_every_replica(make_log: Factory) -> None:
    a, b, sid = make_log(), make_log(), uuid.uuid4().hex
    await a.append(sid, [delta("x")])
    reader = b.read(sid, 0, 30)
    assert seqs(await asyncio.wait_for(anext(reader), 5)) == [1]  # attached and tailing
    waiting = asyncio.create_task(anext(reader))
    await a.drop(sid)
    with pytest.raises(NotFound) as caught:
        await asyncio.wait_for(waiting, 10)
    assert caught.value.reason == errors_pb2.ERROR_REASON_SESSION_NOT_FOUND


async def test_a_dropped_session_leaves_only_a_tombstone_and_a_short_lived_marker(any_redis: RedisUnderTest) -> None:
    log, sid = RedisEventLog(any_redis.url, prefix=any_redis.prefix), uuid.uuid4().hex
    admin = admin_client(any_redis.url)
    try:
        await log.append(sid, [delta("x")], batch_id="1")
        keys = log._keys(sid)
        await log.drop(sid)
        with pytest.raises(NotFound):
            await log.append(sid, [delta("late")])
        assert admin.exists(keys.seq) + admin.exists(keys.batches) == 0
        assert 0 < int(admin.ttl(keys.dropped)) <= redis_event_log.DROPPED_TTL_S
        assert 0 < int(admin.ttl(keys.stream)) <= redis_event_log.DROP_WAKE_S
        assert admin.xlen(keys.stream) == 1  # the marker alone
    finally:
        admin.close()
        await log.close()


async def test_readers_end_even_when_their_replica_missed_the_drop_marker(
    any_redis: RedisUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_event_log, "DROP_WAKE_S", 0)  # the marker is gone at once
    monkeypatch.setattr(redis_event_log, "DROP_RECHECK_S", 0.1)
    a, b = RedisEventLog(any_redis.url, prefix=any_redis.prefix), RedisEventLog(any_redis.url, prefix=any_redis.prefix)
    sid = uuid.uuid4().hex
    try:
        await a.append(sid, [delta("x")])
        reader = b.read(sid, 0, 30)
        assert seqs(await asyncio.wait_for(anext(reader), 5)) == [1]
        waiting = asyncio.create_task(anext(reader))
        await a.drop(sid)
        with pytest.raises(NotFound):
            await asyncio.wait_for(waiting, 10)
    finally:
        await a.close()
        await b.close()


# --------------------------------------------------------------------------- retried appends


async def test_an_append_retried_with_its_batch_id_is_logged_once(any_redis: RedisUnderTest) -> None:
    log, sid = RedisEventLog(any_redis.url, prefix=any_redis.prefix), uuid.uuid4().hex
    try:
        await log.append(sid, [delta("a"), delta("b")], batch_id="turn:1")
        retried = [delta("a"), delta("b")]
        await log.append(sid, retried, batch_id="turn:1")  # its reply was lost: the driver sends it again
        assert [e.seq for e in retried] == [1, 2] and await log.last_seq(sid) == 2
        await log.append(sid, [delta("c")], batch_id="turn:2")
        late = [delta("a"), delta("b")]
        await log.append(sid, late, batch_id="turn:1")  # an earlier batch is remembered too
        assert [e.seq for e in late] == [1, 2]
        await log.append(sid, [delta("d")])  # no id: always appended
        await log.append(sid, [delta("d")])
        assert await log.last_seq(sid) == 5
    finally:
        await log.close()


async def test_an_append_that_timed_out_but_ran_is_not_logged_twice_when_retried() -> None:
    with RedisServer() as server:
        log = RedisEventLog(server.url, prefix="p:", timeout_s=0.3)
        sid = uuid.uuid4().hex
        await log.append(sid, [delta("a")], batch_id="1")
        server.pause()  # Redis takes the script but answers only once it runs again
        with pytest.raises(Unavailable) as caught:
            await log.append(sid, [delta("b")], batch_id="2")
        assert caught.value.metadata["dependency"] == "redis"
        server.resume()
        retried = [delta("b")]
        await log.append(sid, retried, batch_id="2")
        events = await asyncio.wait_for(anext(log.read(sid, 0, 5)), 5) or []
        assert [(e.seq, e.assistant_delta.text) for e in events] == [(1, "a"), (2, "b")]
        assert retried[0].seq == 2
        await log.close()
