from __future__ import annotations

import asyncio

import pytest

from cogmesh.common.v1 import events_pb2
from gateway.event_log import MemoryEventLog, OpenTurn
from services.kit.errors import InvalidArgument, NotFound, OutOfRange, ResourceExhausted


def delta(text: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id="t", assistant_delta=events_pb2.AssistantDelta(text=text))


def final() -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id="t", final=events_pb2.FinalResult(text="done"))


async def collect(log: MemoryEventLog, after: int, until_seq: int, heartbeat_s: float = 5) -> list[int]:
    seqs: list[int] = []
    async for batch in log.read("s", after, heartbeat_s):
        assert batch is not None
        seqs += [e.seq for e in batch]
        if seqs[-1] >= until_seq:
            return seqs
    return seqs


async def test_append_stamps_strictly_increasing_seq_session_and_time() -> None:
    log = MemoryEventLog()
    events = [delta("a"), delta("b")]
    await log.append("s", events)
    await log.append("s", [delta("c")])
    await log.append("other", [delta("x")])
    assert [e.seq for e in events] == [1, 2]
    assert await log.last_seq("s") == 3 and await log.last_seq("other") == 1
    assert all(e.session_id == "s" and e.create_time.seconds > 0 for e in events)


async def test_replay_after_cursor_then_live_tail_without_gap_or_duplicate() -> None:
    log = MemoryEventLog()
    await log.append("s", [delta(str(i)) for i in range(5)])
    reader = asyncio.create_task(collect(log, 2, 9))
    await asyncio.sleep(0)  # the reader is now waiting at the seam
    await log.append("s", [delta("5"), delta("6")])
    await log.append("s", [delta("7"), final()])
    assert await asyncio.wait_for(reader, 2) == [3, 4, 5, 6, 7, 8, 9]


async def test_many_subscribers_see_the_same_sequence() -> None:
    log = MemoryEventLog()
    readers = [asyncio.create_task(collect(log, 0, 50)) for _ in range(10)]
    for i in range(50):
        await log.append("s", [delta(str(i))])
        if i % 7 == 0:
            await asyncio.sleep(0)
    results = await asyncio.wait_for(asyncio.gather(*readers), 2)
    assert all(r == list(range(1, 51)) for r in results)


async def test_heartbeat_when_idle() -> None:
    log = MemoryEventLog()
    stream = log.read("s", 0, heartbeat_s=0.01)
    assert await asyncio.wait_for(anext(stream), 1) is None
    await stream.aclose()


async def test_batches_what_queued_up() -> None:
    log = MemoryEventLog(max_batch=4)
    await log.append("s", [delta(str(i)) for i in range(10)])
    stream = log.read("s", 0, 5)
    sizes = [len(await anext(stream) or []) for _ in range(3)]
    await stream.aclose()
    assert sizes == [4, 4, 2]


async def test_cursor_older_than_retention_is_out_of_range() -> None:
    log = MemoryEventLog(retention=8)
    for i in range(20):
        await log.append("s", [delta(str(i))])
    with pytest.raises(OutOfRange) as caught:
        await anext(log.read("s", 1, 5))
    assert caught.value.metadata["oldest_seq"] == str(await log.last_seq("s") - len(log._logs["s"].events) + 1)
    assert await collect(log, 19, 1) == [20]


async def test_cursor_ahead_of_the_log_is_invalid() -> None:
    log = MemoryEventLog()
    await log.append("s", [delta("a")])
    with pytest.raises(InvalidArgument) as caught:
        await anext(log.read("s", 5, 5))
    assert caught.value.violations[0][0] == "after_seq"


async def test_subscriber_too_far_behind_is_cut_off_and_can_resume() -> None:
    log = MemoryEventLog(max_lag=5, max_batch=2)
    await log.append("s", [delta("0"), delta("1")])
    stream = log.read("s", 0, 5)
    first = await anext(stream)
    assert first is not None and [e.seq for e in first] == [1, 2]
    live = asyncio.create_task(anext(stream))  # caught up: the reader now tails live
    await asyncio.sleep(0)
    await log.append("s", [delta("2")])
    assert [e.seq for e in (await live) or []] == [3]
    await log.append("s", [delta(str(i)) for i in range(10)])  # the reader stalls meanwhile
    with pytest.raises(ResourceExhausted) as caught:
        await anext(stream)
    assert caught.value.metadata["resume_after_seq"] == "3"
    assert await collect(log, 3, 13) == list(range(4, 14))  # resuming replays without a lag limit


async def test_dropping_a_session_ends_its_readers() -> None:
    log = MemoryEventLog()
    stream = log.read("s", 0, 5)
    waiting = asyncio.create_task(anext(stream))
    await asyncio.sleep(0)
    await log.drop("s")
    with pytest.raises(NotFound):
        await asyncio.wait_for(waiting, 1)


async def test_a_dropped_session_stays_dropped_and_the_memory_of_drops_is_bounded() -> None:
    log = MemoryEventLog(dropped_kept=3)
    for i in range(5):
        await log.append(f"s{i}", [delta("x")])
        await log.drop(f"s{i}")
    assert list(log._dropped) == ["s2", "s3", "s4"] and log._logs == {}
    with pytest.raises(NotFound):
        await log.append("s4", [delta("late")])
    assert log._logs == {}


async def test_asking_about_a_session_does_not_make_it_a_log() -> None:
    log = MemoryEventLog()
    assert await log.last_seq("unknown") == 0 and await log.ends_with_turn_end("unknown")
    await log.drop("gone")
    assert await log.last_seq("gone") == 0 and await log.ends_with_turn_end("gone")
    assert log._logs == {}


def test_a_turns_mark_lapses_a_little_before_its_lease() -> None:
    # The lease is renewed just before the mark: a dead driver's mark lapses first, so the
    # session's next turn, which waits for the lease, always finds it lapsed.
    assert OpenTurn("s", "t", "acme", ttl_s=30).mark_ttl_s == 29
    assert OpenTurn("s", "t", "acme", ttl_s=3).mark_ttl_s == pytest.approx(2.7)
    assert OpenTurn("s", "t", "acme", ttl_s=0).mark_ttl_s == 0
