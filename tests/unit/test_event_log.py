"""A session's log in memory (SessionLog) and its readers (tail): what the memory store serves
ReadEvents from and what every gateway's mirror of a session is."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest

from cogmesh.common.v1 import events_pb2
from services.kit.errors import InvalidArgument, NotFound, OutOfRange, ResourceExhausted
from services.lib.event_log import Batch, SessionLog, check_cursor, tail


class Log:
    """One session's log with the stamping its writer (the sessions store) does."""

    def __init__(self, retention: int = 10_000, max_lag: int = 5_000, max_batch: int = 512):
        self.log, self.max_lag, self.max_batch = SessionLog(retention), max_lag, max_batch

    async def append(self, events: Sequence[events_pb2.RuntimeEvent]) -> None:
        for offset, event in enumerate(events, 1):
            event.seq = self.log.last_seq + offset
        self.log.add(events)

    def read(self, after: int, heartbeat_s: float) -> AsyncIterator[Batch | None]:
        check_cursor("s", after, self.log.first_seq, self.log.last_seq)
        return tail("s", self.log, after, heartbeat_s, self.max_lag, self.max_batch)


def delta(text: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id="t", assistant_delta=events_pb2.AssistantDelta(text=text))


def final() -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id="t", final=events_pb2.FinalResult(text="done"))


async def collect(log: Log, after: int, until_seq: int, heartbeat_s: float = 5) -> list[int]:
    seqs: list[int] = []
    async for batch in log.read(after, heartbeat_s):
        assert batch is not None
        seqs += [e.seq for e in batch]
        if seqs[-1] >= until_seq:
            return seqs
    return seqs


async def test_replay_after_cursor_then_live_tail_without_gap_or_duplicate() -> None:
    log = Log()
    await log.append([delta(str(i)) for i in range(5)])
    reader = asyncio.create_task(collect(log, 2, 9))
    await asyncio.sleep(0)  # the reader is now waiting at the seam
    await log.append([delta("5"), delta("6")])
    await log.append([delta("7"), final()])
    assert await asyncio.wait_for(reader, 2) == [3, 4, 5, 6, 7, 8, 9]


async def test_many_subscribers_see_the_same_sequence() -> None:
    log = Log()
    readers = [asyncio.create_task(collect(log, 0, 50)) for _ in range(10)]
    for i in range(50):
        await log.append([delta(str(i))])
        if i % 7 == 0:
            await asyncio.sleep(0)
    results = await asyncio.wait_for(asyncio.gather(*readers), 2)
    assert all(r == list(range(1, 51)) for r in results)


async def test_heartbeat_when_idle() -> None:
    log = Log()
    stream = log.read(0, heartbeat_s=0.01)
    assert await asyncio.wait_for(anext(stream), 1) is None
    await stream.aclose()


async def test_batches_what_queued_up() -> None:
    log = Log(max_batch=4)
    await log.append([delta(str(i)) for i in range(10)])
    stream = log.read(0, 5)
    sizes = [len(await anext(stream) or []) for _ in range(3)]
    await stream.aclose()
    assert sizes == [4, 4, 2]


async def test_cursor_older_than_retention_is_out_of_range() -> None:
    log = Log(retention=8)
    for i in range(20):
        await log.append([delta(str(i))])
    with pytest.raises(OutOfRange) as caught:
        await anext(log.read(1, 5))
    assert caught.value.metadata["oldest_seq"] == str(log.log.last_seq - len(log.log.events) + 1)
    assert await collect(log, 19, 1) == [20]


async def test_cursor_ahead_of_the_log_is_invalid() -> None:
    log = Log()
    await log.append([delta("a")])
    with pytest.raises(InvalidArgument) as caught:
        await anext(log.read(5, 5))
    assert caught.value.violations[0][0] == "after_seq"


async def test_subscriber_too_far_behind_is_cut_off_and_can_resume() -> None:
    log = Log(max_lag=5, max_batch=2)
    await log.append([delta("0"), delta("1")])
    stream = log.read(0, 5)
    first = await anext(stream)
    assert first is not None and [e.seq for e in first] == [1, 2]
    live = asyncio.create_task(anext(stream))  # caught up: the reader now tails live
    await asyncio.sleep(0)
    await log.append([delta("2")])
    assert [e.seq for e in (await live) or []] == [3]
    await log.append([delta(str(i)) for i in range(10)])  # the reader stalls meanwhile
    with pytest.raises(ResourceExhausted) as caught:
        await anext(stream)
    assert caught.value.metadata["resume_after_seq"] == "3"
    assert await collect(log, 3, 13) == list(range(4, 14))  # resuming replays without a lag limit


async def test_dropping_a_session_ends_its_readers() -> None:
    log = Log()
    stream = log.read(0, 5)
    waiting = asyncio.create_task(anext(stream))
    await asyncio.sleep(0)
    log.log.close()  # what deleting the session does to its log
    with pytest.raises(NotFound):
        await asyncio.wait_for(waiting, 1)
