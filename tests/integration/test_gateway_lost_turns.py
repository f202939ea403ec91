"""Turns that lose their driver or their session, through the gateway on a Redis event log.

- A gateway that died mid-turn leaves the turn's lease and its open mark in the log. A
  client that sends again gets the session once the lease lapses; before its turn starts,
  the log ends the dead one (the reaper may not have swept yet: here it never does).
- DeleteSession while a turn runs: the turn's next append finds the log dropped and stops
  instead of writing the session's log anew.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import redis

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway.event_log import OpenTurn
from gateway.redis_event_log import RedisEventLog
from services.kit.redis_keys import SessionKeys
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session, payload, running_suite, status_details

LONG = "w " * 12_000  # about 4,000 streamed deltas: a turn that runs for a while


def settings(redis_url: str, redis_prefix: str) -> Any:
    return SUITE_SETTINGS.model_copy(
        update={
            "redis_url": redis_url,
            "redis_key_prefix": redis_prefix,
            "reaper_interval_s": 3600.0,  # only the log itself can end the dead turn in time
            "turn_lease_ttl_s": 2,
            "turn_lease_renew_s": 0.5,
        }
    )


async def read_all(call: Any) -> list[events_pb2.RuntimeEvent]:
    events: list[events_pb2.RuntimeEvent] = []
    while (message := await asyncio.wait_for(call.read(), TIMEOUT_S)) is not grpc.aio.EOF:
        events.extend(message.events)
    return events


async def next_events(call: Any) -> list[events_pb2.RuntimeEvent]:
    """The events of a Subscribe stream's next message that has any (heartbeats skipped)."""
    while not (message := await asyncio.wait_for(call.read(), TIMEOUT_S)).events:
        pass
    return list(message.events)


def accepted(turn_id: str) -> events_pb2.RuntimeEvent:
    status = events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_QUEUED, text="accepted")
    return events_pb2.RuntimeEvent(turn_id=turn_id, status=status)


async def test_a_dead_gateways_turn_ends_before_the_sessions_next_turn_starts(
    redis_url: str, redis_prefix: str
) -> None:
    async with running_suite(settings(redis_url, redis_prefix)) as (suite, stubs):
        gateway, sessions = stubs["gateway"], stubs["sessions"]
        events: RedisEventLog = suite.servers["gateway"].app.mounts[0].servicer.events
        session_id = await new_session(gateway)
        tenant = SUITE_SETTINGS.tenant_id
        # What a gateway killed mid-turn leaves: its turn open in the log and the session's lease, neither renewed.
        dead = "dead0000000000000000000000000000"
        delta = events_pb2.RuntimeEvent(turn_id=dead, assistant_delta=events_pb2.AssistantDelta(text="half"))
        await events.append(session_id, [accepted(dead), delta], opened=OpenTurn(session_id, dead, tenant, ttl_s=1))
        await sessions.AcquireTurnLease(
            sessions_pb2.AcquireTurnLeaseRequest(tenant_id=tenant, session_id=session_id, turn_id=dead, ttl_seconds=2)
        )
        watcher = gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=2))

        # The client sends again, queued behind the lease: its turn starts the moment the lease lapses.
        retried = await read_all(
            gateway.SendMessage(
                gateway_pb2.SendMessageRequest(
                    session_id=session_id,
                    content="What is 6 * 7?",
                    multitask_strategy=sessions_pb2.MULTITASK_STRATEGY_ENQUEUE,
                ),
                timeout=TIMEOUT_S,
            )
        )
        assert payload(retried[-1]) == "final" and "42" in retried[-1].final.text

        end = (await next_events(watcher))[0]
        watcher.cancel()
        assert end.turn_id == dead and end.seq == 3, "the dead turn's watcher gets its end"
        assert end.error.kind == events_pb2.ERROR_KIND_UNAVAILABLE and end.error.retryable
        assert "gateway lost" in end.error.message
        assert retried[0].seq == 4, "the new turn starts after the dead one's end"
        whole = await read_all(
            gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, stop_when_idle=True))
        )
        ends = [(e.turn_id, payload(e)) for e in whole if payload(e) in ("final", "error")]
        assert ends == [(dead, "error"), (retried[0].turn_id, "final")]
        assert [t for t in await events.expired_turns() if t.session_id == session_id] == []


async def test_deleting_a_session_while_its_turn_runs_stops_the_turn_without_a_new_log(
    redis_url: str, redis_prefix: str
) -> None:
    async with running_suite(settings(redis_url, redis_prefix)) as (suite, stubs):
        gateway = stubs["gateway"]
        servicer = suite.servers["gateway"].app.mounts[0].servicer
        session_id = await new_session(gateway)
        call = gateway.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content=LONG))
        got: list[events_pb2.RuntimeEvent] = []
        while not any(payload(e) == "assistant_delta" for e in got):
            got += (await asyncio.wait_for(call.read(), TIMEOUT_S)).events
        _, turn = servicer.turns._running[session_id]
        assert (await gateway.DeleteSession(gateway_pb2.DeleteSessionRequest(session_id=session_id))).deleted

        # The caller's stream ends: DeleteSession cancels the turn and gives it a moment to log its
        # end (ERROR_KIND_CANCELLED, or final if it got there first) before the log goes; a turn
        # later than that meets the dropped log.
        try:
            rest = await read_all(call)
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND
            info, _ = status_details(exc)
            assert info is not None and info.reason == "SESSION_NOT_FOUND"
        else:
            end = rest[-1]
            assert payload(end) == "final" or end.error.kind == events_pb2.ERROR_KIND_CANCELLED, end

        await asyncio.wait_for(asyncio.gather(turn, return_exceptions=True), TIMEOUT_S)  # the turn stopped
        assert not servicer.turns.running_turn(session_id)
        keys = SessionKeys(redis_prefix, session_id)
        stream = keys.key("events")
        admin = redis.Redis.from_url(redis_url)
        try:
            assert admin.exists(keys.key("events:dropped")) == 1, "the session's log was dropped"
            assert admin.exists(keys.key("events:seq")) == 0, "the turn must not start the session's log anew"
            assert admin.xlen(stream) <= 1  # `drop`'s marker alone
            assert int(admin.ttl(stream)) <= 600
        finally:
            admin.close()
