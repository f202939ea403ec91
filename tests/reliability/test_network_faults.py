"""Faults between services, injected with TCP proxies: hung links, dropped connections, lost replies."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from tests.reliability.conftest import CALL_TIMEOUT_S, Suite
from tests.reliability.helpers import (
    calc_request,
    finish,
    gateway,
    kind,
    messages,
    new_session,
    run_turn,
    slow_request,
)

MARGIN_S = 10.0  # a deadline "fires" within the configured one plus this (a noisy 2-core machine)
HOLDING = "event log unavailable; holding the turn's events"  # the runtime's log, on a failed append
STOPPED = "turn stopped: it cannot write to its event log"  # ... and once it gives the turn up


async def test_hung_sessions_link_fails_the_call_with_a_clear_status(healthy: Suite) -> None:
    session_id = await new_session(healthy.cluster)
    healthy.proxy("gateway", "sessions").blackhole = True  # sessions hangs, as seen from the gateway
    async with gateway(healthy.cluster) as stub:
        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetSession(gateway_pb2.GetSessionRequest(session_id=session_id), timeout=60)
        elapsed = time.monotonic() - started
    assert caught.value.code() in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)
    assert "sessions" in (caught.value.details() or ""), caught.value.details()
    assert CALL_TIMEOUT_S - 0.5 <= elapsed < CALL_TIMEOUT_S + MARGIN_S  # the internal deadline, not the caller's
    healthy.host.heal_all()
    healthy.host.cut(healthy.proxy("gateway", "sessions"))  # the hung connection is of no use any more
    async with gateway(healthy.cluster) as stub:
        reply = await stub.GetSession(gateway_pb2.GetSessionRequest(session_id=session_id), timeout=30)
    assert reply.session.session_id == session_id


async def test_hung_policy_does_not_touch_a_turn(healthy: Suite) -> None:
    """The runtime decides from the policy snapshot it holds (issue 32): a policy service that
    hangs, as seen from the runtime, neither slows nor fails a turn; its tool call is still decided."""
    session_id = await new_session(healthy.cluster)
    healthy.proxy("runtime", "policy").blackhole = True
    started = time.monotonic()
    events = await run_turn(healthy.cluster, calc_request(session_id), timeout_s=60)
    elapsed = time.monotonic() - started
    assert kind(events[-1]) == "final", events[-1]
    assert "tool_call_finished" in [kind(e) for e in events]
    assert elapsed < CALL_TIMEOUT_S + MARGIN_S
    assert [e.seq for e in events] == list(range(events[0].seq, events[0].seq + len(events)))
    healthy.host.heal_all()
    healthy.host.cut(healthy.proxy("runtime", "policy"))
    again = await run_turn(healthy.cluster, calc_request(session_id))
    assert kind(again[-1]) == "final", again[-1]


async def test_a_read_cut_in_flight_is_retried_by_the_channel(healthy: Suite) -> None:
    """GetSession is in the kit's retry policy: a dropped connection costs the caller nothing."""
    session_id = await new_session(healthy.cluster)
    proxy = healthy.proxy("gateway", "sessions")
    connections = proxy.connections
    proxy.blackhole = True  # the first attempt goes nowhere...
    async with gateway(healthy.cluster) as stub:
        call = stub.GetSession(gateway_pb2.GetSessionRequest(session_id=session_id), timeout=30)
        await asyncio.sleep(0.5)
        proxy.blackhole = False
        assert healthy.host.cut(proxy) >= 1  # ...and its connection drops: UNAVAILABLE, retried on a new one
        reply = await call
    assert reply.session.session_id == session_id
    assert proxy.connections > connections


async def test_a_write_cut_in_flight_is_not_retried(healthy: Suite) -> None:
    """CreateSession is not idempotent: the caller gets UNAVAILABLE naming sessions, and decides."""
    proxy = healthy.proxy("gateway", "sessions")
    proxy.blackhole = True
    async with gateway(healthy.cluster) as stub:
        call = stub.CreateSession(gateway_pb2.CreateSessionRequest(agent="slow"), timeout=30)
        await asyncio.sleep(0.5)
        proxy.blackhole = False
        assert healthy.host.cut(proxy) >= 1
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "sessions" in (caught.value.details() or ""), caught.value.details()


async def test_lost_append_replies_log_the_turn_once(healthy: Suite) -> None:
    """The runtime's appends reach sessions but their replies are lost: it resends each with the
    same id, which sessions answers as a duplicate once the link is back; every event and message
    is stored exactly once and the turn ends well."""
    cluster = healthy.cluster
    session_id = await new_session(cluster)
    proxy = healthy.proxy("runtime", "sessions")
    async with gateway(cluster) as stub:
        started = time.monotonic()
        call = stub.SendMessage(slow_request(session_id, 1.0), timeout=60)
        events: list[events_pb2.RuntimeEvent] = []
        while not any(kind(e) == "tool_call_started" for e in events):
            events += (await asyncio.wait_for(call.read(), 30)).events
        held = cluster.tail("runtime", 10_000).count(HOLDING)
        proxy.drop_replies = True  # from here on the runtime hears nothing back from sessions
        async with asyncio.timeout(30):  # an append's reply was lost: the runtime holds the turn's events
            while cluster.tail("runtime", 10_000).count(HOLDING) == held:  # noqa: ASYNC110 - a log line
                await asyncio.sleep(0.05)
        proxy.drop_replies = False
        healthy.host.cut(proxy)  # the connection of the unanswered append drops: it is sent again
        outcome = await asyncio.wait_for(finish(call, events, started), 60)
    assert outcome.code is None and outcome.end is not None
    assert kind(outcome.end) == "final", outcome.end
    seqs = [e.seq for e in outcome.events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "an event logged twice, or lost"
    stored = await messages(cluster, session_id)
    assert len(stored) == 4, [m.content for m in stored]  # user, tool call, tool result, answer: once


async def test_sessions_unreachable_longer_than_the_outage_bound_the_turn_is_taken_over(healthy: Suite) -> None:
    """With sessions unreachable from the runtime past COGMESH_EVENT_LOG_OUTAGE_S the runtime stops the
    turn (it cannot record a step); once the link is back and the lease lapses, the turn is taken over
    from its last recorded step and ends well, its messages stored once."""
    cluster = healthy.cluster
    session_id = await new_session(cluster)
    proxy = healthy.proxy("runtime", "sessions")
    async with gateway(cluster) as stub:
        started = time.monotonic()
        call = stub.SendMessage(slow_request(session_id, 1.0), timeout=90)
        events: list[events_pb2.RuntimeEvent] = []
        while not any(kind(e) == "tool_call_started" for e in events):
            events += (await asyncio.wait_for(call.read(), 30)).events
        stopped = cluster.tail("runtime", 10_000).count(STOPPED)
        proxy.refuse = True  # sessions is down as far as the runtime can tell...
        healthy.host.cut(proxy)
        async with asyncio.timeout(60):  # ... until the runtime gives the turn up
            while cluster.tail("runtime", 10_000).count(STOPPED) == stopped:  # noqa: ASYNC110 - a log line
                await asyncio.sleep(0.05)
        healthy.host.heal_all()
        outcome = await asyncio.wait_for(finish(call, events, started), 90)
    assert outcome.code is None and outcome.end is not None, (outcome.code, outcome.details)
    assert kind(outcome.end) == "final", outcome.end
    assert "taken over" in [e.status.text for e in outcome.events if kind(e) == "status"]
    assert len(await messages(cluster, session_id)) == 4


async def test_latency_between_services_slows_but_does_not_break_a_turn(healthy: Suite) -> None:
    session_id = await new_session(healthy.cluster)
    for proxy in healthy.proxies.values():
        proxy.latency_s = 0.05
    started = time.monotonic()
    events = await run_turn(healthy.cluster, calc_request(session_id), timeout_s=60)
    assert kind(events[-1]) == "final", events[-1]
    assert time.monotonic() - started >= 0.2  # several round trips, each delayed both ways
    assert len(await messages(healthy.cluster, session_id)) == 4
