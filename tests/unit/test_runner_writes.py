"""A turn's writes while its model streams faster than the event loop turns.

A model whose chunks are already buffered (a fast or local model) hands the runner its deltas without
the loop turning in between. The turn's appends need the loop too: the first delta must not wait for the
stream's end because the append before it (the turn's `running` status) still waits for its reply.
The sessions service is a fake in process whose replies take a few turns of the loop, as a real one's do;
nothing here waits on time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.runtime.context_link import SessionMemory
from services.runtime.engines import Capabilities, Engine
from services.runtime.runner import TurnRunner
from services.runtime.settings import RuntimeSettings
from tests.unit.test_loop import make_turn

DELTAS = 300
REPLY_TURNS = 3  # turns of the loop an append's reply takes


class SlowReplies:
    def __init__(self) -> None:
        self.streamed = 0  # deltas the engine has produced so far
        self.appends: list[tuple[list[str], int]] = []  # each append's event kinds, and `streamed` when sent

    async def AppendEvents(self, request: Any, timeout: float | None = None, wait_for_ready: bool = False) -> Any:  # noqa: ASYNC109
        self.appends.append(([e.WhichOneof("payload") or "" for e in request.events], self.streamed))
        for _ in range(REPLY_TURNS):
            await asyncio.sleep(0)
        return sessions_pb2.AppendEventsResponse(last_seq=len(self.appends))


class Clients:
    def __init__(self, sessions: SlowReplies) -> None:
        self.sessions = sessions


def burst(sessions: SlowReplies) -> Engine:
    """An engine whose model streams DELTAS deltas with no await in between, then answers."""

    async def run(turn: Any) -> AsyncIterator[events_pb2.RuntimeEvent]:
        running = events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_RUNNING)
        yield events_pb2.RuntimeEvent(turn_id=turn.turn_id, status=running)
        for i in range(DELTAS):
            sessions.streamed = i + 1
            yield events_pb2.RuntimeEvent(turn_id=turn.turn_id, assistant_delta=events_pb2.AssistantDelta(text="x"))
        yield events_pb2.RuntimeEvent(turn_id=turn.turn_id, final=events_pb2.FinalResult(text="x" * DELTAS))

    return Engine("burst", run, Capabilities())


async def run_engine(sessions: SlowReplies, engine: Engine) -> None:
    """Run `engine`'s turn through a replica's runner into its log, as a started turn runs."""
    replica = TurnRunner(Clients(sessions), RuntimeSettings(), None, None, SessionMemory())  # type: ignore[arg-type]
    running = replica._track("StartTurn", "t", "s1", "t1", 9)
    try:
        await replica._run_built(running, make_turn("hi"), engine)
    finally:
        await running.log.close()


async def test_a_first_delta_goes_out_while_a_buffered_model_stream_goes_on() -> None:
    sessions = SlowReplies()
    await run_engine(sessions, burst(sessions))
    first_delta = next(sent for kinds, sent in sessions.appends if "assistant_delta" in kinds)
    assert sessions.appends[0][0] == ["status"]
    assert first_delta < DELTAS // 10, f"the first delta went out after {first_delta} of {DELTAS} deltas"
    assert sessions.appends[-1][0][-1] == "final"


async def test_a_long_buffered_stream_lets_the_loop_turn_for_the_replicas_other_work() -> None:
    """Lease renewals and other turns share the loop: a burst of 5,000 deltas (tens of ms of work) must not
    keep them out until it ends."""
    sessions = SlowReplies()
    ticks = 0

    async def other_work() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    seen: list[int] = []

    async def run(turn: Any) -> AsyncIterator[events_pb2.RuntimeEvent]:
        yield events_pb2.RuntimeEvent(
            turn_id=turn.turn_id, status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_RUNNING)
        )
        for _ in range(10):  # the status's append and its reply are done before the burst
            await asyncio.sleep(0)
        seen.append(ticks)
        for _ in range(5000):
            yield events_pb2.RuntimeEvent(turn_id=turn.turn_id, assistant_delta=events_pb2.AssistantDelta(text="x"))
        seen.append(ticks)
        yield events_pb2.RuntimeEvent(turn_id=turn.turn_id, final=events_pb2.FinalResult(text="x"))

    side = asyncio.create_task(other_work())
    try:
        await run_engine(sessions, Engine("burst", run, Capabilities()))
    finally:
        side.cancel()
    assert seen[1] - seen[0] > 1, f"the loop turned {seen[1] - seen[0]} times in the burst"
