"""COGMESH_REDIS_URL switches the suite to Redis: a turn's session state lands in Redis, and a
brand-new suite (every service restarted) on the same Redis carries the conversation on."""

from __future__ import annotations

import grpc
import pytest
import redis

from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.lib.redis_keys import SessionKeys
from tests.integration.conftest import (
    SUITE_SETTINGS,
    TIMEOUT_S,
    new_session,
    payload,
    running_suite,
    send,
    status_details,
)


async def test_a_suite_on_redis_keeps_sessions_across_a_full_restart(redis_url: str, redis_prefix: str) -> None:
    settings = SUITE_SETTINGS.model_copy(update={"redis_url": redis_url, "redis_key_prefix": redis_prefix})
    tenant = settings.tenant_id

    async with running_suite(settings) as (_, stubs):
        session_id = await new_session(stubs["gateway"], user_id="u1", topic_id="math")
        events = await send(stubs["gateway"], session_id, "What is 17 * 23?")
        assert payload(events[-1]) == "final" and "391" in events[-1].final.text
        stored = await stubs["sessions"].GetSession(
            sessions_pb2.GetSessionRequest(tenant_id=tenant, session_id=session_id), timeout=TIMEOUT_S
        )
        count = stored.session.message_count
        assert count >= 3  # user, assistant tool call, tool result, answer

    direct = redis.Redis.from_url(redis_url)
    keys = SessionKeys(redis_prefix, session_id)
    try:
        assert direct.llen(keys.key("m")) == count, "messages live in Redis"
        assert direct.hget(keys.key("s"), "tenant_id") == tenant.encode()
    finally:
        direct.close()

    async with running_suite(settings) as (_, stubs):  # every service is new; only Redis remembers
        got = await stubs["gateway"].GetSession(gateway_pb2.GetSessionRequest(session_id=session_id), timeout=TIMEOUT_S)
        assert got.session.message_count == count and got.session.active_turn_id == ""
        found = await stubs["sessions"].LookupSession(
            sessions_pb2.LookupSessionRequest(tenant_id=tenant, user_id="u1", topic_id="math"), timeout=TIMEOUT_S
        )
        assert found.session.session_id == session_id
        events = await send(stubs["gateway"], session_id, "hello again")
        assert payload(events[-1]) == "final"
        history = await stubs["sessions"].ListMessages(
            sessions_pb2.ListMessagesRequest(tenant_id=tenant, session_id=session_id), timeout=TIMEOUT_S
        )
        texts = [m.content for m in history.messages]
        assert texts[0] == "What is 17 * 23?" and "hello again" in texts
        assert len(texts) > count


async def test_the_gateway_takes_the_redis_lease(redis_url: str, redis_prefix: str) -> None:
    """A lease held in Redis makes SendMessage TURN_IN_PROGRESS naming the holder; released, the turn runs."""
    settings = SUITE_SETTINGS.model_copy(update={"redis_url": redis_url, "redis_key_prefix": redis_prefix})
    tenant = settings.tenant_id
    async with running_suite(settings) as (_, stubs):
        session_id = await new_session(stubs["gateway"])
        lease = await stubs["sessions"].AcquireTurnLease(
            sessions_pb2.AcquireTurnLeaseRequest(tenant_id=tenant, session_id=session_id, turn_id="other"),
            timeout=TIMEOUT_S,
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await send(stubs["gateway"], session_id, "hi")
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        info, _ = status_details(caught.value)
        assert info is not None and (info.reason, info.metadata["turn_id"]) == ("TURN_IN_PROGRESS", "other")
        await stubs["sessions"].ReleaseTurnLease(
            sessions_pb2.ReleaseTurnLeaseRequest(
                tenant_id=tenant, session_id=session_id, lease_token=lease.lease_token
            ),
            timeout=TIMEOUT_S,
        )
        events = await send(stubs["gateway"], session_id, "hi")
        assert payload(events[-1]) == "final"
