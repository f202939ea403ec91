"""The agent loop of one turn: a small driver over explicit steps (services/runtime/steps/).

    start -> [compact] -> think -> decide -> act -> think -> ... -> final | error | pause

Plain domain code: the outside world (models, policy, context, tools, the journal)
comes in through `Turn` (services/runtime/turn.py). It yields cogmesh.common.v1
RuntimeEvents, the suite's shared event vocabulary, so nothing downstream re-maps them.

Between two steps the loop's whole progress is its state (steps/state.py), and the
driver has the turn's journal record it before the next step starts: after the start,
after a compaction, after each model step, after the decisions on its tool calls,
after each call that finished, after the step's end, and when the turn pauses. A run
starts fresh, or goes on from a recorded state: after a pause with the answer it
waited for (`ResumePoint.decision`), or after its runtime stopped (`takeover`).

Cancellation and the wall-clock limit interrupt whatever the turn awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from cogmesh.common.v1 import events_pb2
from services.lib import journal_kinds
from services.runtime import genai_telemetry
from services.runtime.steps.act import act
from services.runtime.steps.compact import compact
from services.runtime.steps.decide import decide
from services.runtime.steps.finish import interrupted
from services.runtime.steps.start import start
from services.runtime.steps.state import WAITING_FOR, Run, event
from services.runtime.steps.think import loop_limit, think
from services.runtime.turn import Pause, Turn

_INTERRUPT_KINDS = ("approval_required", "user_input_requested", "client_tool_call")


def is_interrupt(event: events_pb2.RuntimeEvent) -> bool:
    return event.WhichOneof("payload") in _INTERRUPT_KINDS


async def run_turn(turn: Turn) -> AsyncIterator[events_pb2.RuntimeEvent]:
    """Run the loop; a cancel request or the wall-clock limit interrupts whatever it awaits."""
    if turn.cancel.is_set() and turn.depth == 0:  # cancelled before it started
        turn.ended = True
        yield interrupted(turn, turn.limits)
        return
    turn.task = asyncio.current_task()
    run = Run(turn)
    loop = asyncio.get_running_loop()
    timers = []
    budget_s = run.limits.max_wall_clock_s - run.elapsed_before_s
    if run.limits.max_wall_clock_s > 0:
        timers.append(loop.call_later(max(0.0, budget_s), turn._interrupt, "deadline"))
    if turn.deadline is not None:
        timers.append(loop.call_later(max(0.0, turn.deadline - time.time()), turn._interrupt, "expired"))
    try:
        # The run is one invoke_agent span (services/runtime/genai_telemetry.py), under the RPC that started it.
        async with contextlib.aclosing(genai_telemetry.invoke_agent(run, drive(run))) as steps:
            async for item in steps:
                if item.WhichOneof("payload") in ("final", "error"):
                    turn.task = None  # from here on the turn is over: nothing may interrupt its last steps
                yield item
        if run.paused is not None:
            turn.task = None
            assert run.snapshot is not None
            if turn.journal is not None:
                await turn.journal.record(journal_kinds.PAUSE, run.snapshot)
            interrupt_id = _interrupt_id(run.paused)
            turn.pause = Pause(run.snapshot, run.paused, interrupt_id)
            yield run.paused
            waiting = WAITING_FOR.get(run.snapshot.get("waiting", ""), "an answer")
            yield event(
                turn,
                status=events_pb2.StatusUpdate(
                    state=events_pb2.TURN_STATE_PAUSED, text=f"waiting for {waiting}", interrupt_id=interrupt_id
                ),
            )
    except asyncio.CancelledError:
        if not turn.cancel.is_set() or turn.task is None:
            raise  # the caller went away: propagate
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
        yield interrupted(turn, run.limits)
    finally:
        for timer in timers:
            timer.cancel()
        turn.task = None
        turn.ended = True


async def drive(run: Run) -> AsyncIterator[events_pb2.RuntimeEvent]:
    """The steps of one run, each recorded by the journal before the next starts."""
    point = run.turn.resume
    if point is None:
        async for out in start(run):
            yield out
        if run.done:
            return
        await run.record(journal_kinds.START, "think")
    elif not point.takeover:
        async for out in _resume(run):
            yield out
        if not run.done:
            await run.record(journal_kinds.STEP, "think")
    while not run.done:
        if run.phase == "think":
            if run.iteration >= run.limits.max_iterations:
                yield loop_limit(run)
                return
            run.compacted = False
            async for out in compact(run):
                yield out
            if run.compacted:
                await run.record(journal_kinds.COMPACTION, "think")
            run.iteration += 1
            async for out in think(run):
                yield out
            if not run.done:
                await run.record(journal_kinds.MODEL, run.phase)
            continue
        if run.phase == "decide":
            async for out in decide(run):
                yield out
            await run.record(journal_kinds.DECIDE, "act")
        async for out in act(run):
            yield out
        if not run.done:
            await run.record(journal_kinds.STEP, "think")


async def _resume(run: Run) -> AsyncIterator[events_pb2.RuntimeEvent]:
    """Go on from a pause with its answer (or give the turn up), at the paused step's calls."""
    turn = run.turn
    point = turn.resume
    assert point is not None
    if turn.depth == 0:
        text = "resuming" if not point.abandon else "giving up the paused turn"
        yield event(turn, status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_RUNNING, text=text))
    if point.abandon:
        for item in run.items:
            if item.state != "done":
                waiting = WAITING_FOR.get(item.state, "its turn to run")
                item.answer(f"error: the turn was cancelled while this call waited for {waiting}")
                item.state = "done"
                if not item.internal:
                    yield run.finished(item)
        run.record_results()
        yield run.end_error(events_pb2.ERROR_KIND_CANCELLED, "the paused turn was cancelled", False, run.step_text)
        return
    run.decision = (str(point.snapshot["paused_call"]), point.decision)
    async for out in act(run):
        yield out


def _interrupt_id(paused: events_pb2.RuntimeEvent) -> str:
    payload = paused.WhichOneof("payload")
    return str(getattr(paused, payload or "").interrupt_id) if payload in _INTERRUPT_KINDS else ""
