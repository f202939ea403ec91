"""A step with a todo-list update and a handoff, redone after a takeover, yields the same effects: the
same plan version and the same handoff (which the sessions store applies idempotently), and a call
whose `tool` record was stored is not made again. Every resume goes through the journal's JSON, with a
Turn built afresh from the recorded `meta`, as another replica builds it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from cogmesh.common.v1 import events_pb2
from services.lib import journal_kinds
from services.lib.agents import AgentDefinition
from services.runtime.loop import run_turn
from services.runtime.steps.state import decode_snapshot, encode_snapshot
from services.runtime.tools.handoff import BACK_TOOL, TRANSFER_TOOL, back_tool, transfer_tool
from services.runtime.tools.todo import TODO_TOOL, todo_tool
from services.runtime.turn import ModelInfo, ResumePoint, Turn, Verdict
from tests.fakes.models import ScriptedModel, calls

ITEMS = [
    {"id": "a", "content": "look it up", "status": "completed"},
    {"id": "b", "content": "hand over", "status": "in_progress"},
]


class Journal:
    def __init__(self) -> None:
        self.entries: list[tuple[int, dict[str, Any]]] = []

    async def record(self, kind: journal_kinds.Kind, state: dict[str, Any]) -> None:
        self.entries.append((kind, decode_snapshot(encode_snapshot(state))))


async def deny(name: str, arguments: Mapping[str, Any]) -> Verdict:
    return Verdict(False, "the policy is not asked about the runtime's own tools", arguments)


def make_turn(model: ScriptedModel, meta: dict[str, Any], resume: ResumePoint | None = None) -> Turn:
    tools = {TODO_TOOL: todo_tool(), TRANSFER_TOOL: transfer_tool([AgentDefinition(name="billing")])}
    if meta["session_agent"] != "triage":
        tools[BACK_TOOL] = back_tool(meta["session_agent"])
    return Turn(
        turn_id="t1",
        system_prompt="plan, then hand over",
        history=[],
        user_text="my invoice is wrong",
        model=model,
        model_info=ModelInfo("scripted", "test"),
        tools=tools,
        check_tool=deny,
        agent="triage",
        meta=meta,
        resume=resume,
        journal=Journal(),
    )


async def run(turn: Turn) -> list[events_pb2.RuntimeEvent]:
    async def collect() -> list[events_pb2.RuntimeEvent]:
        return [event async for event in run_turn(turn)]

    return await asyncio.wait_for(collect(), 10)


def effects(events: list[events_pb2.RuntimeEvent]) -> list[events_pb2.RuntimeEvent]:
    """The events that change the session, and the turn's end (its text: the metrics' duration varies)."""
    kept = [e for e in events if e.WhichOneof("payload") in ("plan", "step_complete", "handoff", "final")]
    for event in kept:
        if event.HasField("final"):
            event.final.ClearField("metrics")
    return kept


def taken_over(first: Turn, kind: int, nth: int = 0) -> Turn:
    """The turn as another replica goes on with it from the nth recorded state of `kind`."""
    assert isinstance(first.journal, Journal)
    state = [s for k, s in first.journal.entries if k == kind][nth]
    model = ScriptedModel([])  # the step's calls were recorded: no model call before they are answered
    return make_turn(model, dict(state["meta"]), ResumePoint(state, takeover=True))


async def test_a_redone_step_makes_the_same_plan_version_and_handoff() -> None:
    model = ScriptedModel(
        [
            calls(
                (TODO_TOOL, {"items": ITEMS}),
                (TRANSFER_TOOL, {"agent": "billing", "reason": "an invoice"}),
            )
        ]
    )
    first = make_turn(model, {"session_agent": "triage", "plan": {"version": 3, "items": []}})
    events = effects(await run(first))
    assert [e.WhichOneof("payload") for e in events] == ["plan", "step_complete", "handoff", "final"]
    assert events[0].plan.version == 4 and events[1].step_complete.description == "look it up"
    assert (events[2].handoff.to_agent, events[2].handoff.correlation_id) == ("billing", "c1")
    assert events[3].final.text == "I'm handing this conversation to billing: an invoice"
    assert len(model.calls) == 1  # the handoff ends the turn after its step
    assert first.meta["plan"]["version"] == 4 and first.meta["handed_to"] == "billing"

    # Taken over before either call was recorded: both are redone, with the same effects.
    again = taken_over(first, journal_kinds.DECIDE)
    assert effects(await run(again)) == events
    assert again.new_messages == first.new_messages

    # Taken over once the todo call's record was stored: only the handoff is left to make.
    rest = taken_over(first, journal_kinds.TOOL)
    assert [e.WhichOneof("payload") for e in effects(await run(rest))] == ["handoff", "final"]


async def test_a_turn_hands_over_once_and_not_to_the_agent_answering() -> None:
    model = ScriptedModel(
        [
            calls(
                (TRANSFER_TOOL, {"agent": "billing", "reason": "one"}),
                (TRANSFER_TOOL, {"agent": "billing", "reason": "two"}),
            )
        ]
    )
    turn = make_turn(model, {"session_agent": "triage"})
    events = await run(turn)
    assert [e.handoff.reason for e in events if e.HasField("handoff")] == ["one"]
    finished = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    assert [f.ok for f in finished] == [True, False]
    assert "already handed the conversation to billing" in finished[1].result_summary
