"""One contract for both event logs: in-memory and Redis Streams (a real Redis)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio

from cogmesh.common.v1 import events_pb2
from gateway.event_log import EventLog, MemoryEventLog
from gateway.redis_event_log import RedisEventLog
from services.kit.errors import InvalidArgument, NotFound, OutOfRange, ResourceExhausted, Unavailable
from tests.support.redis_server import RedisServer

Factory = Callable[..., EventLog]


def delta(text: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id="t", assistant_delta=events_pb2.AssistantDelta(text=text))


def final() -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id="t", final=events_pb2.FinalResult(text="done"))


@pytest_asyncio.fixture(params=["memory", "redis"])
async def make_log(request: pytest.FixtureRequest, redis_url: str, redis_prefix: str) -> AsyncIterator[Factory]:
    made: list[EventLog] = []

    def factory(**options: float) -> EventLog:
        log: EventLog
        if request.param == "memory":
            # One memory log stands for "every replica" (they cannot share one).
            log = made[0] if made else MemoryEventLog(**options)
        else:
            log = RedisEventLog(redis_url, prefix=redis_prefix, **options)
        made.append(log)
        return log

    yield factory
    for log in {id(x): x for x in made}.values():
        await log.close()


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
    await asyncio.sleep(0.05)  # the reader is waiting at the seam
    await log.append(sid, [delta("5"), delta("6")])
    await log.append(sid, [delta("7"), final()])
    assert await asyncio.wait_for(reader, 5) == [3, 4, 5, 6, 7, 8, 9]
    assert await log.ends_with_turn_end(sid)


async def test_replicas_share_one_order(make_log: Factory) -> None:
    a, b, sid = make_log(), make_log(), uuid.uuid4().hex
    watchers = [asyncio.create_task(collect(b, sid, 0, 60)) for _ in range(5)]
    await asyncio.sleep(0.05)
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
    await asyncio.sleep(0.05)
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
    await asyncio.sleep(0.05)
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
    await asyncio.sleep(0.05)
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
        await asyncio.sleep(0.05)
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
