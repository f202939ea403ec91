"""COGMESH_REDIS_WAIT_REPLICAS: a write is acknowledged once that many replicas have it, on every form.

The standalone Redis has no replica, so a write there that asks for one fails as
unavailable (retryable) after the timeout, though the primary applied it; Sentinel's
primary and each cluster primary have one replica, so a write asking for one succeeds
and a write asking for two fails the same way.
"""

from __future__ import annotations

import pytest

from cogmesh.common.v1 import events_pb2
from services.kit.redis_pool import ReplicaWait
from services.sessions.model import NewEvents, NewSession, StoreUnavailable, Strategy
from services.sessions.redis_store import RedisSessionStore
from tests.support.redis_topologies import RedisUnderTest
from tests.support.session_log import LogWriter

REPLICAS = {"standalone": 0, "sentinel": 1, "cluster": 1}  # per primary, in tests/support


def delta(text: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id="t", assistant_delta=events_pb2.AssistantDelta(text=text))


async def test_session_writes_wait_for_replicas_and_say_so_when_too_few_confirm(any_redis: RedisUnderTest) -> None:
    have = REPLICAS[any_redis.topology]
    plain = RedisSessionStore.from_url(any_redis.url, any_redis.prefix, 0.0, 2.0)
    enough = RedisSessionStore.from_url(any_redis.url, any_redis.prefix, 0.0, 2.0, wait=ReplicaWait(max(have, 1), 200))
    too_many = RedisSessionStore.from_url(any_redis.url, any_redis.prefix, 0.0, 2.0, wait=ReplicaWait(have + 1, 100))
    try:
        sid = (await plain.create("acme", NewSession("", "", "default")))[0].session_id
        grant = await plain.try_acquire("acme", sid, "t", 30, Strategy.REJECT)
        token = grant.token  # type: ignore[union-attr]
        if have:
            assert (await enough.append_messages("acme", sid, [b"kept"], token, "r1")).message_count == 1
        with pytest.raises(StoreUnavailable, match=f"0 of {have + 1}|{have} of {have + 1}") as caught:
            await too_many.append_messages("acme", sid, [b"unconfirmed"], token, "r2")
        assert "COGMESH_REDIS_WAIT_REPLICAS" in str(caught.value)
        assert (await too_many.get("acme", sid)).session_id == sid, "reads never wait"
        # The primary has it: the retry, with its request id, is recognised instead of stored twice.
        retried = await plain.append_messages("acme", sid, [b"unconfirmed"], token, "r2")
        assert retried.deduplicated and retried.message_count == (2 if have else 1)
    finally:
        for store in (plain, enough, too_many):
            await store.close()


async def test_event_log_appends_wait_for_replicas(any_redis: RedisUnderTest) -> None:
    have = REPLICAS[any_redis.topology]
    plain = LogWriter(any_redis.url, any_redis.prefix)
    waiting = RedisSessionStore.from_url(any_redis.url, any_redis.prefix, 0.0, 2.0, wait=ReplicaWait(have + 1, 100))
    try:
        sid = await plain.session()
        token = plain._tokens[sid]
        end = NewEvents("t", token, [delta("a")], (), "1", release=True)  # the turn's last append
        with pytest.raises(StoreUnavailable, match="COGMESH_REDIS_WAIT_REPLICAS"):
            await waiting.append_events("acme", sid, end)
        # The primary has it: the retry, with its append id, is recognised instead of logged twice.
        retried = await plain.store.append_events("acme", sid, end)
        assert retried.duplicate and retried.last_seq == 1
    finally:
        await plain.close()
        await waiting.close()
