"""A subagent's task: the `task` tool hands it to another agent, whose loop runs inside this turn.

Its events stream in this turn (marked with the subagent's name) and its final text
is the call's result. Each step it records is recorded as this turn's state with the
subagent's own state inside the call, so a pause inside the subagent pauses the whole
turn, and a takeover goes on inside the subagent where it was.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from cogmesh.common.v1 import events_pb2
from services.lib import journal_kinds
from services.runtime import genai_telemetry
from services.runtime.steps.answers import take_decision
from services.runtime.steps.call import idempotency_key
from services.runtime.steps.state import CallState, Run, event
from services.runtime.turn import ResumePoint


class _ChildJournal:
    """Records a subagent's steps as steps of the delegating turn."""

    def __init__(self, parent: Run, item: CallState) -> None:
        self.parent, self.item = parent, item

    async def record(self, kind: journal_kinds.Kind, state: dict[str, Any]) -> None:
        self.item.child = state
        await self.parent.record(journal_kinds.DELEGATION, "act")


async def delegate(run: Run, item: CallState) -> AsyncIterator[events_pb2.RuntimeEvent]:
    """Hand the task to a subagent; its events stream in this turn, its answer is the call's result."""
    from services.runtime import loop  # the subagent runs the same driver as this turn

    turn = run.turn
    agent = str(item.arguments.get("agent", ""))
    task = str(item.arguments.get("task", ""))
    resume: ResumePoint | None = None
    if item.child is not None:  # going on inside the subagent: after a pause, with its answer
        resume = ResumePoint(item.child, take_decision(run, item), takeover=not item.child.get("waiting"))
    else:
        yield event(
            turn,
            delegation=events_pb2.Delegation(
                from_agent=turn.agent, to_agent=agent, task=task, correlation_id=item.call.id
            ),
        )
    # Not current: this generator yields while the subagent runs.
    with genai_telemetry.execute_tool(run, item, current=False) as traced:
        if turn.delegate is None:
            item.answer("error: delegation is not available in this runtime")
        else:
            t0 = time.perf_counter()
            try:
                child_turn = await turn.delegate(agent, task, turn, resume)
            except Exception as exc:  # noqa: BLE001 - a subagent that cannot start is the model's problem
                item.answer(f"error: cannot delegate to {agent!r}: {exc}")
            else:
                child_turn.call_path = f"{idempotency_key(run, item)}/"
                if turn.journal is not None:
                    child_turn.journal = _ChildJournal(run, item)
                child = Run(child_turn)
                last: events_pb2.RuntimeEvent | None = None
                # The subagent's own invoke_agent span, inside this call's execute_tool span.
                async for out in genai_telemetry.invoke_agent(child, loop.drive(child), parent=traced.span):
                    if out.WhichOneof("payload") in ("final", "error"):
                        last = out
                        continue
                    if not out.agent:
                        out.agent = agent
                    yield out
                item.duration_ms = (time.perf_counter() - t0) * 1000
                if child.paused is not None:  # its work so far is in its state: counted once it ends
                    if not child.paused.agent:
                        child.paused.agent = agent
                    item.child = child.snapshot
                    run.snapshot = run.capture(str((child.snapshot or {}).get("waiting", "")), item.call.id)
                    run.paused = child.paused
                    run.done = True
                    return
                _merge_metrics(run, child.metrics)
                if last is not None and last.HasField("final"):
                    item.answer(last.final.text, ok=True)
                elif last is not None:
                    item.answer(f"error: subagent {agent} failed: {last.error.message}")
                else:
                    item.answer(f"error: subagent {agent} ended without an answer")
                item.child = None
    item.state = "done"
    yield run.finished(item)


def _merge_metrics(run: Run, child: events_pb2.TurnMetrics) -> None:
    metrics = run.metrics
    metrics.model_calls += child.model_calls
    metrics.tool_calls += child.tool_calls
    metrics.input_tokens += child.input_tokens
    metrics.output_tokens += child.output_tokens
    metrics.cost_usd += child.cost_usd
    metrics.failed_models.extend(child.failed_models)
