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

from cogmesh.common.v1 import events_pb2, turns_pb2
from services.kit.config import Settings
from tests.reliability.conftest import Suite
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
LEASE_TTL_S = Settings().turn_lease_ttl_s  # this cluster's: a dead runtime's turn is taken over after it
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


async def test_runtime_killed_mid_turn_its_turn_is_taken_over_and_finishes(healthy: Suite) -> None:
    """kill -9 of the runtime in the middle of a tool call: once its lease lapses the restarted
    runtime takes the turn over from its last recorded step, on the caller's same stream."""
    cluster = healthy.cluster
    session_id, before = await prepared(healthy)
    outcome, watcher, turn_id = await kill_mid_turn(
        healthy, session_id, lambda: cluster.kill("runtime"), lambda: cluster.start("runtime")
    )
    assert outcome.code is None and outcome.end is not None, (outcome.code, outcome.details)
    assert kind(outcome.end) == "final", outcome.end
    assert "taken over" in [e.status.text for e in outcome.events if kind(e) == "status"]
    assert outcome.seconds < DEADLINE_S
    watcher.check_contiguous(watcher.seen[0].seq - 1)
    assert [e.seq for e in watcher.seen if e.turn_id == turn_id] == [e.seq for e in outcome.events]
    await assert_messages_kept(healthy, session_id, before, new=4)  # stored once, by the runtime that finished


async def test_gateway_killed_mid_turn_the_turn_goes_on_and_the_watcher_resumes_from_its_cursor(
    healthy: Suite,
) -> None:
    """The caller's stream breaks with its gateway, at once; the turn does not depend on it: a
    watcher reconnects to the restarted gateway, from its cursor, and sees the turn finish."""
    cluster = healthy.cluster
    session_id, before = await prepared(healthy)
    cursor = await last_seq(cluster, session_id)
    async with gateway(cluster) as stub:
        started = time.monotonic()
        call = stub.SendMessage(slow_request(session_id, TOOL_SLEEP_S), timeout=DEADLINE_S)
        events: list[events_pb2.RuntimeEvent] = []
        while not any(kind(e) == "tool_call_started" for e in events):
            events += (await asyncio.wait_for(call.read(), DEADLINE_S)).events
        turn_id = events[0].turn_id
        watcher = Watcher(cluster, session_id, cursor)
        watching = asyncio.create_task(watcher.follow(turn_id, DEADLINE_S))
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
    ended = [e for e in watcher.seen if e.turn_id == turn_id and kind(e) in ("final", "error")]
    assert [kind(e) for e in ended] == ["final"], ended
    await assert_messages_kept(healthy, session_id, before, new=4)
    again = await run_turn(cluster, calc_request(session_id))  # the lease went with the turn's end
    assert kind(again[-1]) == "final", again[-1]
    assert restart_s < 60


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
        turns_pb2.MULTITASK_STRATEGY_ENQUEUE
    )  # ENQUEUE: the aborted turn's lease may still be held for a while
    again = await run_turn(healthy.cluster, request, timeout_s=LEASE_TTL_S + 30)
    assert kind(again[-1]) == "final", again[-1]
    assert await last_seq(healthy.cluster, session_id) > cursor
