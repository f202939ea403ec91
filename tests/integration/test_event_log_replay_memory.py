"""Many readers replaying a long session from Redis at once share one copy of its history.

A gateway's RSS grew from 79 to 274 MiB over 400 concurrent full replays of a 9,000-event
log and stayed there: each replay decoded its own batches from Redis, 400 copies at the
peak, and the allocator kept the peak. Memory is measured with tracemalloc (allocated
bytes, not RSS, and no timing), so the bound holds on a loaded machine too.
"""

from __future__ import annotations

import asyncio
import contextlib
import tracemalloc
from collections.abc import Awaitable

from cogmesh.common.v1 import events_pb2
from services.lib.redis_event_log import RedisEventLog
from tests.support.session_log import LogWriter

EVENTS = 3_000
READERS = 100


def delta(i: int) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id="t", assistant_delta=events_pb2.AssistantDelta(text=f"token {i} " * 3))


async def replay(log: RedisEventLog, sid: str) -> int:
    count = 0
    async with contextlib.aclosing(log.read(sid, 0, 30)) as reader:
        async for batch in reader:
            count += len(batch or [])
            if count >= EVENTS:
                break
    return count


async def peak_bytes(work: Awaitable[object]) -> int:
    """The most memory allocated at once while `work` ran, above what was allocated before it."""
    before, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    await work
    return tracemalloc.get_traced_memory()[1] - before


async def test_concurrent_replays_share_one_copy_of_the_history(redis_url: str, redis_prefix: str) -> None:
    log, writer = RedisEventLog(redis_url, prefix=redis_prefix), LogWriter(redis_url, redis_prefix)
    sid = await writer.session()
    for start in range(0, EVENTS, 500):
        await writer.append(sid, [delta(i) for i in range(start, start + 500)])
    await writer.close()
    tracemalloc.start()
    try:
        await replay(log, sid)  # warm up: connections, scripts, caches
        one = await peak_bytes(replay(log, sid))
        many = await peak_bytes(asyncio.gather(*(replay(log, sid) for _ in range(READERS))))
    finally:
        tracemalloc.stop()
        await log.close()
    print(f"peak of one replay {one / 2**20:.2f} MiB, of {READERS} at once {many / 2**20:.2f} MiB")
    # Each replay holding its own decoded batches costs READERS times one (about 100x here).
    assert many < 4 * one, f"{READERS} replays at once peaked at {many / one:.1f} times one replay"


async def test_readers_spread_over_the_history_share_one_batch_per_cursor(redis_url: str, redis_prefix: str) -> None:
    """Readers at different points of one replay (a loaded machine spreads them) hold one batch per point.

    Each reader stops at its own batch and holds it, as a stream holds the message it writes;
    the order they come in makes the last batch read a different one almost every time.
    """
    log, writer = RedisEventLog(redis_url, prefix=redis_prefix), LogWriter(redis_url, redis_prefix)
    sid = await writer.session()
    for start in range(0, EVENTS, 500):
        await writer.append(sid, [delta(i) for i in range(start, start + 500)])
    await writer.close()
    batches_per_replay = -(-EVENTS // log.max_batch)
    held: list[object] = []
    all_holding = asyncio.Event()

    async def hold_batch(k: int) -> None:
        async with contextlib.aclosing(log.read(sid, 0, 30)) as reader:
            for _ in range(k % batches_per_replay + 1):
                batch = await anext(reader)
            held.append(batch)
            if len(held) == READERS:
                all_holding.set()
            await all_holding.wait()

    try:
        await asyncio.gather(*(hold_batch(k) for k in range(READERS)))
    finally:
        await log.close()
    distinct = len({id(batch) for batch in held})
    assert distinct == batches_per_replay, f"{READERS} readers held {distinct} batches"


async def test_the_shared_history_is_forgotten_once_no_reader_replays_it(redis_url: str, redis_prefix: str) -> None:
    log, writer = RedisEventLog(redis_url, prefix=redis_prefix, max_batch=64), LogWriter(redis_url, redis_prefix)
    sid = await writer.session()
    live = log.read(sid, 299, 30)  # a reader at the end, waiting for more
    waiting: asyncio.Task[object] | None = None
    try:
        await writer.append(sid, [delta(i) for i in range(300)])
        assert [e.seq for e in await anext(live) or []] == [300]
        waiting = asyncio.create_task(anext(live))
        mirror = log._followers[sid].mirror
        async with contextlib.aclosing(log.read(sid, 0, 30)) as old:
            first = await anext(old)
            assert first is not None and first[0].seq == 1
            assert mirror.first_seq == 1 and first.wire, "the replay reads the mirror, encoded once"
            seen = first[-1].seq
            while seen < 300:
                batch = await anext(old)
                seen = batch[-1].seq if batch else seen
            assert mirror.first_seq == 301 and not mirror.events, "kept while nobody replays it"
        await writer.append(sid, [delta(300)])
        assert [e.seq for e in await asyncio.wait_for(waiting, 5) or []] == [301]
    finally:
        if waiting is not None:
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
        await live.aclose()  # type: ignore[attr-defined]
        await log.close()
        await writer.close()
