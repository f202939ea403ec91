"""Redis under a burst: calls queue for a pooled connection instead of failing, watched
sessions share one blocking reader, and a hung Redis still fails every call in bounded time."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
import redis

from cogmesh.common.v1 import events_pb2
from services.kit.errors import Unavailable
from services.lib import redis_event_log
from services.lib.event_log import Batch
from services.lib.policy.ratelimit import RedisWindowStore, redis_client
from services.lib.redis_event_log import RedisEventLog
from services.sessions.model import StoreUnavailable
from services.sessions.redis_store import RedisSessionStore, connect
from tests.support.redis_server import RedisServer, admin_client, delete_prefix, unique_prefix
from tests.support.redis_topologies import RedisUnderTest
from tests.support.session_log import LogWriter

BURST = 300  # three times redis-py's default pool, which fails the calls past it at once


def delta(text: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id="t", assistant_delta=events_pb2.AssistantDelta(text=text))


async def first_batch(reader: AsyncIterator[Batch | None]) -> Batch:
    while (batch := await anext(reader)) is None:  # heartbeats
        pass
    return batch


async def close(reader: AsyncIterator[Batch | None]) -> None:
    await reader.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize("client", ["event log", "session store", "rate windows"])
async def test_a_burst_past_the_pool_queues_for_connections(client: str, any_redis: RedisUnderTest) -> None:
    redis_url, redis_prefix = any_redis.url, any_redis.prefix
    if client == "event log":
        log = RedisEventLog(redis_url, prefix=redis_prefix)
        try:
            assert await asyncio.gather(*(log.last_seq(uuid.uuid4().hex) for _ in range(BURST))) == [0] * BURST
        finally:
            await log.close()
    elif client == "session store":  # its own client: the store's auto-pipeline would fold the burst into one
        store = connect(redis_url, 2.0)
        try:
            keys = [f"{redis_prefix}k{i}" for i in range(BURST)]
            assert await asyncio.gather(*(store.get(k) for k in keys)) == [None] * BURST
        finally:
            await store.aclose()
    else:
        windows = redis_client(redis_url, 2.0)
        try:
            store = RedisWindowStore(windows, redis_prefix)
            granted = await asyncio.gather(*(store.reserve(f"w{i}", 1, 60, 0) for i in range(BURST)))
            assert all(r.granted for r in granted)
        finally:
            await windows.aclose()


async def test_watched_sessions_share_one_blocking_read(private_redis: RedisServer) -> None:
    log, writer = RedisEventLog(private_redis.url, prefix="p:"), LogWriter(private_redis.url, "p:")
    admin = redis.Redis.from_url(private_redis.url)  # a Redis of its own: nobody else blocks on it
    sids = await asyncio.gather(*(writer.session() for _ in range(BURST)))
    readers = [log.read(sid, 0, 30) for sid in sids]
    waiting = [asyncio.create_task(first_batch(r)) for r in readers]
    try:
        for _ in range(200):  # until every reader is attached and the loop blocks in XREAD
            blocked = int(admin.info("clients")["blocked_clients"])
            if blocked and len(log._followers) == BURST:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        assert int(admin.info("clients")["blocked_clients"]) == 1
        await asyncio.gather(*(writer.append(sid, [delta(sid)]) for sid in sids))
        batches = await asyncio.wait_for(asyncio.gather(*waiting), 10)
        assert [[e.assistant_delta.text for e in b] for b in batches] == [[sid] for sid in sids]
    finally:
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        for reader in readers:
            await close(reader)
        await log.close()
        await writer.close()
        admin.close()


async def test_a_cluster_watch_holds_one_pubsub_connection_per_primary(redis_cluster_url: str) -> None:
    prefix = unique_prefix("one-read-per-shard")
    log, writer = RedisEventLog(redis_cluster_url, prefix=prefix), LogWriter(redis_cluster_url, prefix)
    admin = admin_client(redis_cluster_url)
    sids = await asyncio.gather(*(writer.session() for _ in range(BURST)))
    readers = [log.read(sid, 0, 30) for sid in sids]
    waiting = [asyncio.create_task(first_batch(r)) for r in readers]
    try:

        def shard_subscriptions() -> dict[str, list[int]]:
            """Per primary: the shard-channel count of each of its pub/sub connections."""
            found: dict[str, list[int]] = {}
            for node in admin.get_primaries():
                clients = admin.client_list(_type="pubsub", target_nodes=node)
                found[node.name] = [int(c["ssub"]) for c in clients if int(c.get("ssub", 0))]
            return found

        async with asyncio.timeout(30):  # until every session is subscribed on its primary
            while sum(sum(n) for n in shard_subscriptions().values()) < BURST:  # noqa: ASYNC110 - Redis state
                await asyncio.sleep(0.05)
        found = shard_subscriptions()
        assert all(len(counts) == 1 for counts in found.values()), f"pub/sub connections per primary: {found}"
        assert len(found) == 3
        await asyncio.gather(*(writer.append(sid, [delta(sid)]) for sid in sids))
        batches = await asyncio.wait_for(asyncio.gather(*waiting), 10)
        assert [[e.assistant_delta.text for e in b] for b in batches] == [[sid] for sid in sids]
    finally:
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
        for reader in readers:
            await close(reader)
        await log.close()
        await writer.close()
        admin.close()
        delete_prefix(redis_cluster_url, prefix)


async def test_a_session_watched_while_the_read_blocks_is_read_at_once(
    any_redis: RedisUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_event_log, "BLOCK_MS", 30_000)  # only the wake-up can end the blocking read in time
    log, writer = RedisEventLog(any_redis.url, prefix=any_redis.prefix), LogWriter(any_redis.url, any_redis.prefix)
    first, second = await writer.session(), await writer.session()
    quiet = log.read(first, 0, 60)
    blocked = asyncio.create_task(first_batch(quiet))
    late = log.read(second, 0, 60)
    try:
        await asyncio.sleep(0.3)  # the loop is now blocked on `first` alone
        arrived = asyncio.create_task(first_batch(late))
        await asyncio.sleep(0.1)
        await writer.append(second, [delta("b")])
        batch = await asyncio.wait_for(arrived, 5)
        assert [e.assistant_delta.text for e in batch] == ["b"]
    finally:
        blocked.cancel()
        await asyncio.gather(blocked, return_exceptions=True)
        await close(quiet)
        await close(late)
        await log.close()
        await writer.close()


async def test_a_hung_redis_fails_every_queued_call_in_bounded_time(private_redis: RedisServer) -> None:
    timeout_s = 0.3
    store = RedisSessionStore(connect(private_redis.url, timeout_s, pool_size=2))
    log = RedisEventLog(private_redis.url, prefix="p:", timeout_s=timeout_s, pool_size=4)

    async def store_call(i: int) -> None:
        await asyncio.sleep(i * 0.005)  # separate ticks: the store's auto-pipeline cannot fold them into one
        await store.list_goals("acme", f"s{i}")

    try:
        await store.ping()
        await log.last_seq("warm")
        private_redis.pause()
        started = time.monotonic()
        results = await asyncio.gather(
            *(store_call(i) for i in range(20)), *(log.last_seq(f"s{i}") for i in range(60)), return_exceptions=True
        )
        waited = time.monotonic() - started
        assert all(isinstance(r, StoreUnavailable) for r in results[:20]), results[:20]
        assert all(isinstance(r, Unavailable) for r in results[20:]), results[20:]
        # Queued calls are bounded too: the pool's wait (5 socket timeouts), then their own call.
        assert waited < 5 * timeout_s + 3 * timeout_s + 2.5
    finally:
        private_redis.resume()
        await store.close()
        await log.close()
