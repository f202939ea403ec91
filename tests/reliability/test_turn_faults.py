"""Faults in the middle of a turn that must cost it nothing or end it at once, with the right cause.

A cluster of its own: the built-in model streams slowly (a turn that is still writing
events when Redis goes away) and the lease is short (a stopped turn is taken over within
seconds). Every wait is on a condition (an event seen, a log line, a lease freed),
bounded, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.sessions.v1 import sessions_pb2
from tests.reliability.cluster import Cluster
from tests.reliability.conftest import Suite, slow_agent_env
from tests.reliability.helpers import (
    TENANT,
    Event,
    Watcher,
    calc_request,
    finish,
    gateway,
    kind,
    last_seq,
    new_session,
    run_turn,
    sessions,
    slow_request,
)
from tests.support.redis_server import RedisServer

REPLY_TOKENS = 400  # a plain message streams this many deltas ...
DELAY_MS = 10  # ... this far apart: four seconds of streaming
OUTAGE_S = 10.0  # COGMESH_EVENT_LOG_OUTAGE_S of this cluster (the default) ...
BLIP_S = 1.0  # ... far longer than a blip, however slow Redis is to start again
LEASE_TTL_S = 3  # COGMESH_TURN_LEASE_TTL_S of this cluster
HOLDING = "event log unavailable; holding the turn's events"  # the runtime's log line
BOUND_S = 60.0  # every wait here: a generous upper bound for a loaded 2-core machine


class Streaming:
    """The cluster of this module and its private Redis."""

    def __init__(self, cluster: Cluster, redis: RedisServer):
        self.cluster, self.redis = cluster, redis

    def log_has(self, service: str, text: str) -> bool:
        return text in self.cluster.tail(service, 200)


@pytest.fixture(scope="module")
def streaming(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Streaming]:
    tmp = tmp_path_factory.mktemp("turn-faults")
    redis = RedisServer(directory=tmp, appendonly=True).start()
    env = slow_agent_env(
        tmp,
        redis,
        "cogmesh-turn-faults:",
        local_reply_tokens=str(REPLY_TOKENS),
        local_delay_ms=str(DELAY_MS),
        event_log_outage_s=str(OUTAGE_S),
        turn_lease_ttl_s=str(LEASE_TTL_S),
        turn_lease_renew_s="1",
        call_timeout_s="3",
    )
    cluster = Cluster(env, tmp)
    try:
        cluster.start_all()
        yield Streaming(cluster, redis)
    finally:
        cluster.stop()
        redis.close()


@pytest.fixture
def whole(streaming: Streaming) -> Iterator[Streaming]:
    yield streaming
    if streaming.redis.process is None or streaming.redis.process.poll() is not None:
        streaming.redis.start()
    streaming.cluster.ensure_all()


async def until(condition: Any, what: str, bound_s: float = BOUND_S) -> float:
    """Wait for `condition()` (sync or async) to hold; returns the seconds it took."""
    started = time.monotonic()
    while True:
        held = condition()
        if asyncio.iscoroutine(held):
            held = await held
        if held:
            return time.monotonic() - started
        assert time.monotonic() - started < bound_s, f"{what}: not within {bound_s:g}s"
        await asyncio.sleep(0.05)


async def read_until(call: Any, events: list[Event], predicate: Any) -> None:
    while not predicate(events):
        response = await asyncio.wait_for(call.read(), BOUND_S)
        assert response is not grpc.aio.EOF, f"stream ended early after {[kind(e) for e in events]}"
        events.extend(response.events)


def deltas(events: list[Event]) -> int:
    return sum(1 for e in events if kind(e) == "assistant_delta")


async def lease_holder(cluster: Cluster, session_id: str) -> str:
    async with sessions(cluster) as stub:
        reply = await stub.GetTurnLease(
            sessions_pb2.GetTurnLeaseRequest(tenant_id=TENANT, session_id=session_id), timeout=10
        )
    return str(reply.lease.turn_id)


@pytest.fixture
async def caller(whole: Streaming) -> AsyncIterator[Any]:
    async with gateway(whole.cluster) as stub:
        yield stub


# --------------------------------------------------------------------------- Redis away mid-stream


async def test_a_redis_restart_mid_stream_costs_the_turn_nothing(whole: Streaming, caller: Any) -> None:
    """Issue 14.2: a blip no longer discards the rest of the model's output (the old driver ended the turn
    at its first failed append, and a second of 10 ms tokens always has one)."""
    session_id = await new_session(whole.cluster)
    started = time.monotonic()
    call = caller.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content="talk"), timeout=BOUND_S)
    events: list[Event] = []
    await read_until(call, events, lambda got: deltas(got) >= 20)  # streaming, far from done
    whole.redis.kill()  # kill -9, away for a second (its AOF keeps every acknowledged write) ...
    await asyncio.sleep(BLIP_S)  # the fault's length, not a wait for something to happen
    await asyncio.to_thread(whole.redis.start)  # ... and back
    outcome = await finish(call, events, started)
    assert outcome.code is None, (outcome.code, outcome.details)
    assert outcome.end is not None and kind(outcome.end) == "final", [kind(e) for e in outcome.events[-3:]]
    assert deltas(outcome.events) == REPLY_TOKENS  # nothing discarded
    seqs = [e.seq for e in outcome.events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "gap or duplicate"
    logged = await last_seq(whole.cluster, session_id)
    assert logged == seqs[-1], "the log holds events the caller never got, or a batch twice"
    again = await run_turn(whole.cluster, calc_request(session_id))
    assert kind(again[-1]) == "final", again[-1]


async def test_a_long_redis_outage_stops_the_turns_writer_and_the_turn_is_taken_over_once_redis_is_back(
    whole: Streaming, caller: Any
) -> None:
    """Past COGMESH_EVENT_LOG_OUTAGE_S the runtime stops the turn (it cannot record a step), but the
    turn is journaled: once Redis is back and the lease lapses, a runtime takes it over from its last
    recorded step and the caller's stream goes on to the answer."""
    session_id = await new_session(whole.cluster)
    started = time.monotonic()
    call = caller.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content="talk"), timeout=BOUND_S)
    events: list[Event] = []
    await read_until(call, events, lambda got: deltas(got) >= 20)
    turn_id = events[0].turn_id
    whole.redis.kill()
    await until(lambda: whole.log_has("runtime", "stayed unavailable"), "the runtime stopped the turn")
    await asyncio.to_thread(whole.redis.start)
    outcome = await finish(call, events, started)
    assert outcome.code is None, (outcome.code, outcome.details)
    end = outcome.end
    assert end is not None and kind(end) == "final" and end.turn_id == turn_id, [kind(e) for e in events[-3:]]
    assert "taken over" in [e.status.text for e in outcome.events if kind(e) == "status"]
    seqs = [e.seq for e in outcome.events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "gap or duplicate"
    assert await last_seq(whole.cluster, session_id) == seqs[-1]
    assert await lease_holder(whole.cluster, session_id) == ""
    again = await run_turn(whole.cluster, calc_request(session_id))  # REJECT: refused if the lease were held
    assert kind(again[-1]) == "final", again[-1]


# --------------------------------------------------------------------------- a dead gateway's turn


async def test_a_dead_gateways_turn_goes_on_and_the_next_turn_starts_after_its_end(
    whole: Streaming, caller: Any
) -> None:
    """The turn runs on a runtime replica, not on the gateway that took it: the gateway's death breaks
    its caller's stream, not the turn. A client retrying at once is refused while it runs; its turn
    starts after the old one's end, which watchers see in order."""
    cluster = whole.cluster
    session_id = await new_session(cluster)
    cursor = await last_seq(cluster, session_id)
    call = caller.SendMessage(slow_request(session_id, 3), timeout=BOUND_S)
    events: list[Event] = []
    await read_until(call, events, lambda got: any(kind(e) == "tool_call_started" for e in got))
    old_turn = events[0].turn_id
    cluster.kill("gateway")
    await finish(call, events, time.monotonic())
    await asyncio.to_thread(cluster.start, "gateway")

    async def send_again() -> list[Event]:
        """What a client retrying every half second does: busy until the running turn ends."""
        while True:
            try:
                return await run_turn(cluster, calc_request(session_id), timeout_s=BOUND_S)
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAVAILABLE):
                    raise
            await asyncio.sleep(0.5)

    new = await asyncio.wait_for(send_again(), BOUND_S)
    assert kind(new[-1]) == "final", new[-1]
    watcher = Watcher(cluster, session_id, cursor)
    await watcher.follow(new[0].turn_id, BOUND_S)
    watcher.check_contiguous(cursor)
    ends = [(e.turn_id, kind(e)) for e in watcher.seen if kind(e) in ("final", "error")]
    assert ends == [(old_turn, "final"), (new[0].turn_id, "final")], ends
    old_end = next(e for e in watcher.seen if e.turn_id == old_turn and kind(e) == "final")
    assert old_end.seq < new[0].seq


# --------------------------------------------------------------------------- sessions away at the turn's end


async def test_events_that_meet_sessions_away_are_held_and_resent(healthy: Suite) -> None:
    """Sessions unreachable from the runtime during a tool call: the turn holds its events (its
    journal and the lease's release with them) and resends them when sessions is back, so the
    caller gets its answer and the session is free at once, not when its lease expires."""
    cluster = healthy.cluster
    link = healthy.proxy("runtime", "sessions")
    session_id = await new_session(cluster)
    async with gateway(cluster) as stub:
        started = time.monotonic()
        call = stub.SendMessage(slow_request(session_id, 1.0), timeout=BOUND_S)
        events: list[Event] = []
        await read_until(call, events, lambda got: any(kind(e) == "tool_call_started" for e in got))
        held = cluster.tail("runtime", 10_000).count(HOLDING)
        link.refuse = True  # new connections from the runtime to sessions are closed at once ...
        healthy.host.cut(link)  # ... and the open ones reset: sessions looks down from the runtime
        await until(lambda: cluster.tail("runtime", 10_000).count(HOLDING) > held, "the runtime held the events")
        link.refuse = False
        outcome = await finish(call, events, started)
    assert outcome.end is not None and kind(outcome.end) == "final", (outcome.code, outcome.details)
    seqs = [e.seq for e in outcome.events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "gap or duplicate"
    assert await lease_holder(cluster, session_id) == "", "released with the turn's end"
    again = await run_turn(cluster, calc_request(session_id))
    assert kind(again[-1]) == "final", again[-1]
