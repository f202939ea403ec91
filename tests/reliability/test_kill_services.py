"""kill -9 each service (and Redis) in the middle of a streaming turn.

The turn is the `slow` agent's: its tool sleeps, so there is a middle to kill things
in. The victim is started again at once, as `cogmesh up` would. A caller streams the
turn with a deadline and a second client watches the session from a cursor,
reconnecting whenever it is cut off. What must hold, whoever died: the caller gets a
clear answer before its deadline; the watcher's seqs have no gap and no duplicate;
the messages stored before are still there (and the turn's own ones at most once);
once the victim is back, a new turn works.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway.turns import LEASE_TTL_S
from tests.reliability.conftest import FULL, Suite
from tests.reliability.helpers import (
    Outcome,
    Watcher,
    calc_request,
    finish,
    gateway,
    kind,
    last_seq,
    messages,
    new_session,
    retry_turn,
    run_turn,
    slow_request,
)

DEADLINE_S = 30.0  # the caller's deadline of the turn killed in the middle
TOOL_SLEEP_S = 4.0  # long enough for every service but the runtime to be back before the tool returns
OFF_PATH = ["models", "sessions", "context", "policy"]  # back before the turn needs them again


async def kill_mid_turn(
    suite: Suite, session_id: str, kill: Callable[[], None], restart: Callable[[], object]
) -> tuple[Outcome, Watcher, str]:
    """Stream a slow turn, kill during its tool call, restart; the caller's outcome and a watcher."""
    cursor = await last_seq(suite.cluster, session_id)
    async with gateway(suite.cluster) as stub:
        started = time.monotonic()
        call = stub.SendMessage(slow_request(session_id, TOOL_SLEEP_S), timeout=DEADLINE_S)
        events: list[events_pb2.RuntimeEvent] = []
        while not any(kind(e) == "tool_call_started" for e in events):
            events += (await asyncio.wait_for(call.read(), DEADLINE_S)).events
        turn_id = events[0].turn_id
        watcher = Watcher(suite.cluster, session_id, cursor)
        watching = asyncio.create_task(watcher.follow(turn_id, DEADLINE_S))
        await asyncio.sleep(0.3)  # the watcher has caught up and is tailing
        kill()
        restarting = asyncio.create_task(asyncio.to_thread(restart))
        outcome = await asyncio.wait_for(finish(call, events, started), DEADLINE_S + 5)
        await restarting
    await watching
    return outcome, watcher, turn_id


async def prepared(suite: Suite) -> tuple[str, list[bytes]]:
    """A session with one finished turn: its stored messages are what must not be lost."""
    session_id = await new_session(suite.cluster)
    first = await run_turn(suite.cluster, calc_request(session_id))
    assert kind(first[-1]) == "final", first[-1]
    return session_id, [m.SerializeToString() for m in await messages(suite.cluster, session_id)]


async def assert_messages_kept(suite: Suite, session_id: str, before: list[bytes], new: int) -> None:
    after = [m.SerializeToString() for m in await messages(suite.cluster, session_id)]
    assert after[: len(before)] == before, "messages stored before the kill changed"
    assert len(after) == len(before) + new, f"expected {new} new message(s), got {len(after) - len(before)}"


@pytest.mark.parametrize("victim", OFF_PATH)
async def test_a_service_restarted_mid_turn_costs_the_turn_nothing(healthy: Suite, victim: str) -> None:
    cluster = healthy.cluster
    session_id, before = await prepared(healthy)
    outcome, watcher, turn_id = await kill_mid_turn(
        healthy, session_id, lambda: cluster.kill(victim), lambda: cluster.start(victim)
    )
    assert outcome.code is None and outcome.end is not None, (outcome.code, outcome.details)
    assert kind(outcome.end) == "final", outcome.end
    assert outcome.seconds < DEADLINE_S
    watcher.check_contiguous(before_cursor := watcher.seen[0].seq - 1)
    assert [e.seq for e in watcher.seen if e.turn_id == turn_id] == [e.seq for e in outcome.events]
    assert before_cursor >= 1
    await assert_messages_kept(healthy, session_id, before, new=4)
    again = await retry_turn(cluster, calc_request(session_id))
    assert kind(again[-1]) == "final", again[-1]


async def test_runtime_killed_mid_turn_ends_it_with_a_retryable_error(healthy: Suite) -> None:
    cluster = healthy.cluster
    session_id, before = await prepared(healthy)
    outcome, watcher, _ = await kill_mid_turn(
        healthy, session_id, lambda: cluster.kill("runtime"), lambda: cluster.start("runtime")
    )
    assert outcome.code is None and outcome.end is not None, (outcome.code, outcome.details)
    error = outcome.end.error
    assert kind(outcome.end) == "error" and error.kind == events_pb2.ERROR_KIND_UNAVAILABLE, outcome.end
    assert error.retryable and "runtime" in error.message, error
    assert outcome.seconds < DEADLINE_S
    watcher.check_contiguous(watcher.seen[0].seq - 1)
    assert watcher.seen[-1] == outcome.end
    await assert_messages_kept(healthy, session_id, before, new=0)  # nothing half-stored
    retried = await run_turn(cluster, slow_request(session_id, 0.01), timeout_s=60)  # the same message again
    assert kind(retried[-1]) == "final", retried[-1]
    await assert_messages_kept(healthy, session_id, before, new=4)


async def test_gateway_killed_mid_turn_the_watcher_resumes_from_its_cursor(healthy: Suite) -> None:
    cluster = healthy.cluster
    session_id, before = await prepared(healthy)
    watch_s = 10.0 if not FULL else LEASE_TTL_S + 30.0

    async def follow_for(watcher: Watcher, turn_id: str) -> None:
        await watcher.follow(turn_id, watch_s)

    cursor = await last_seq(cluster, session_id)
    async with gateway(cluster) as stub:
        started = time.monotonic()
        call = stub.SendMessage(slow_request(session_id, TOOL_SLEEP_S), timeout=DEADLINE_S)
        events: list[events_pb2.RuntimeEvent] = []
        while not any(kind(e) == "tool_call_started" for e in events):
            events += (await asyncio.wait_for(call.read(), DEADLINE_S)).events
        watcher = Watcher(cluster, session_id, cursor)
        watching = asyncio.create_task(follow_for(watcher, events[0].turn_id))
        await asyncio.sleep(0.3)
        cluster.kill("gateway")
        outcome = await asyncio.wait_for(finish(call, events, started), DEADLINE_S + 5)
        restart_s = await asyncio.to_thread(cluster.start, "gateway")
    await watching

    assert outcome.code == grpc.StatusCode.UNAVAILABLE, (outcome.code, outcome.details)
    assert outcome.seconds < 10  # at once, not at the deadline
    assert watcher.reconnects >= 1 and grpc.StatusCode.UNAVAILABLE in watcher.errors
    watcher.check_contiguous(cursor)
    assert [e.seq for e in watcher.seen][: len(outcome.events)] == [e.seq for e in outcome.events]
    await assert_messages_kept(healthy, session_id, before, new=0)
    # A new session works at once on the restarted gateway.
    fresh = await new_session(cluster)
    assert kind((await run_turn(cluster, calc_request(fresh)))[-1]) == "final"
    assert restart_s < 60


@pytest.mark.skipif(not FULL, reason="waits for the dead gateway's turn lease to expire (COGMESH_RELIABILITY_FULL=1)")
async def test_gateway_killed_mid_turn_its_turn_ends_and_the_session_takes_a_new_one(healthy: Suite) -> None:
    cluster = healthy.cluster
    session_id, before = await prepared(healthy)
    cursor = await last_seq(cluster, session_id)
    async with gateway(cluster) as stub:
        call = stub.SendMessage(slow_request(session_id, TOOL_SLEEP_S), timeout=DEADLINE_S)
        events: list[events_pb2.RuntimeEvent] = []
        while not any(kind(e) == "tool_call_started" for e in events):
            events += (await asyncio.wait_for(call.read(), DEADLINE_S)).events
        cluster.kill("gateway")
        await finish(call, events, time.monotonic())
    cluster.start("gateway")
    killed_at = time.monotonic()
    watcher = Watcher(cluster, session_id, cursor)
    await watcher.follow(events[0].turn_id, LEASE_TTL_S + 30)
    ended = [e for e in watcher.seen if e.turn_id == events[0].turn_id and kind(e) in ("final", "error")]
    assert ended, f"the orphaned turn never ended in the log ({time.monotonic() - killed_at:.0f}s after the kill)"
    assert ended[0].error.retryable, ended[0]
    watcher.check_contiguous(cursor)
    request = slow_request(session_id, 0.01)
    retried = await run_turn(cluster, request, timeout_s=30)  # the lease is free now: no need to queue
    assert kind(retried[-1]) == "final", retried[-1]
    await assert_messages_kept(healthy, session_id, before, new=4)


async def test_redis_restarted_mid_turn_loses_nothing_acknowledged(healthy: Suite) -> None:
    """Whatever the turn in flight does, the data acknowledged before the crash survives it and the
    session takes new turns once Redis is back (AOF with fsync always, as RELIABILITY.md says)."""
    session_id, before = await prepared(healthy)
    cursor = await last_seq(healthy.cluster, session_id)
    redis = healthy.redis
    outcome, watcher, _ = await kill_mid_turn(healthy, session_id, redis.kill, redis.start)
    assert outcome.seconds <= DEADLINE_S + 5  # an answer by the deadline at the latest, never a hang
    after = [m.SerializeToString() for m in await messages(healthy.cluster, session_id)]
    assert after[: len(before)] == before
    watcher.check_contiguous(cursor)
    request = calc_request(session_id)
    request.multitask_strategy = (
        sessions_pb2.MULTITASK_STRATEGY_ENQUEUE
    )  # ENQUEUE: the aborted turn's lease may still be held for a while
    again = await run_turn(healthy.cluster, request, timeout_s=LEASE_TTL_S + 30)
    assert kind(again[-1]) == "final", again[-1]
    assert await last_seq(healthy.cluster, session_id) > cursor
