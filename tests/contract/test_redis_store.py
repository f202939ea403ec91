"""What only the Redis store has: auto-pipelining, script reloading, keys and expiry in Redis."""

from __future__ import annotations

import asyncio

import redis

from services.sessions.model import NewSession, SessionNotFound, Strategy
from services.sessions.redis_store import RedisSessionStore
from tests.support.redis_server import RedisServer


async def test_concurrent_calls_share_round_trips_and_keep_their_own_answers(private_redis: RedisServer) -> None:
    store = RedisSessionStore.from_url(private_redis.url, "p:", 0.0, 2.0)
    batches: list[int] = []
    send = store._pipeline._send

    async def counting_send(batch: list) -> None:  # type: ignore[type-arg]
        batches.append(len(batch))
        await send(batch)

    store._pipeline._send = counting_send  # type: ignore[method-assign]
    try:
        ids = [(await store.create("acme", NewSession("u", str(i), "default")))[0].session_id for i in range(30)]
        assert batches == [1] * 30, "a lone call goes at once, alone"
        batches.clear()
        results = await asyncio.gather(
            *(store.get("acme", sid) for sid in ids), store.get("acme", "missing"), return_exceptions=True
        )
        assert batches == [31], "calls made together travel together"
        assert [r.session_id for r in results[:-1]] == ids  # type: ignore[union-attr]
        assert isinstance(results[-1], SessionNotFound), "one caller's failure stays its own"
    finally:
        await store.close()


async def test_scripts_are_reloaded_when_redis_forgets_them(private_redis: RedisServer) -> None:
    store = RedisSessionStore.from_url(private_redis.url, "p:", 0.0, 2.0)
    try:
        sid = (await store.create("acme", NewSession("", "", "default")))[0].session_id
        redis.Redis.from_url(private_redis.url).script_flush()  # as after a Redis restart
        got = await asyncio.gather(*(store.get("acme", sid) for _ in range(10)))
        assert {g.session_id for g in got} == {sid}
        grant = await store.try_acquire("acme", sid, "t", 10, Strategy.REJECT)
        assert grant.token == 1  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_session_keys_carry_the_ttl_and_vanish_with_the_session(private_redis: RedisServer) -> None:
    store = RedisSessionStore.from_url(private_redis.url, "p:", 60.0, 2.0)
    direct = redis.Redis.from_url(private_redis.url)
    try:
        record, _ = await store.create("acme", NewSession("u", "t", "default"))
        grant = await store.try_acquire("acme", record.session_id, "t", 10, Strategy.REJECT)
        await store.append_messages("acme", record.session_id, [b"m"], grant.token, "r")  # type: ignore[union-attr]
        keys = {k.decode() for k in direct.keys("p:*")}
        session_keys = {k for k in keys if k.startswith(f"p:s:{{{record.session_id}}}")}
        assert {f"p:s:{{{record.session_id}}}", f"p:s:{{{record.session_id}}}:m"} <= session_keys
        for key in session_keys | {k for k in keys if k.startswith("p:k:")}:
            assert 0 < direct.pttl(key) <= 60_000, key
        assert await store.delete("acme", record.session_id)
        left = {k.decode() for k in direct.keys("p:*")}
        assert left <= {"p:seq"}, left
    finally:
        direct.close()
        await store.close()
