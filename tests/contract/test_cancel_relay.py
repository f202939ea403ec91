"""The cancel relay reaches the replica that drives a turn, on every form of Redis."""

from __future__ import annotations

import asyncio

from gateway.cancel_relay import CancelRelay
from tests.support.redis_topologies import RedisUnderTest


async def test_a_cancel_published_on_one_replica_reaches_the_others(any_redis: RedisUnderTest) -> None:
    heard: dict[str, asyncio.Queue[tuple[str, str]]] = {"a": asyncio.Queue(), "b": asyncio.Queue()}

    def listener(name: str):  # type: ignore[no-untyped-def]
        async def on_cancel(session_id: str, turn_id: str) -> None:
            await heard[name].put((session_id, turn_id))

        return on_cancel

    a = CancelRelay(any_redis.url, any_redis.prefix, listener("a"))
    b = CancelRelay(any_redis.url, any_redis.prefix, listener("b"))
    await a.start()
    await b.start()
    try:
        assert await a.publish("s1", "t1") == 2, "both replicas count as listeners, on a cluster too"
        for name in ("a", "b"):
            assert await asyncio.wait_for(heard[name].get(), 5) == ("s1", "t1")
    finally:
        await a.close()
        await b.close()
