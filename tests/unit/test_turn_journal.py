"""The loop's journal: which steps a turn records, and a takeover from every recorded state.

A turn taken over from a recorded state must reach the same end as the turn that ran
through, and must never run again a tool call whose result was recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from cogmesh.common.v1 import events_pb2
from services.lib import journal_kinds
from services.runtime.calculator import calculator_tool
from services.runtime.local_model import CALCULATOR_SCHEMA
from services.runtime.loop import run_turn
from services.runtime.steps.state import decode_snapshot, encode_snapshot
from services.runtime.tools.base import ToolContext, builtin
from services.runtime.turn import ModelInfo, ResumePoint, Turn, Verdict
from tests.fakes.models import ScriptedModel, calls, text

INFO = ModelInfo("scripted-1", "acme")


class Recorder:
    """A journal that keeps what it is given, as bytes, the way a store would."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, bytes]] = []  # kinds by name, as the stores keep them

    async def record(self, kind: journal_kinds.Kind, state: dict[str, Any]) -> None:
        self.entries.append((journal_kinds.kind_name(kind), encode_snapshot(state)))


async def allow(name: str, arguments: Mapping[str, Any]) -> Verdict:
    return Verdict(True, "ok", arguments)


def counting_tools(ran: list[str]) -> dict[str, Any]:
    async def run(arguments: Mapping[str, Any], context: ToolContext) -> str:
        ran.append(context.idempotency_key)
        return await calculator_tool(arguments)

    tool = builtin(CALCULATOR_SCHEMA, calculator_tool)
    return {"calculator": type(tool)(tool.schema, run)}


def script() -> list[Any]:
    """Two parallel calculator calls, then a second step with one more, then the answer."""
    return [
        calls(("calculator", {"expression": "1 + 1"}), ("calculator", {"expression": "2 + 2"})),
        calls(("calculator", {"expression": "3 + 3"})),
        text("2, 4 and 6"),
    ]


def make_turn(ran: list[str], steps: list[Any], **overrides: Any) -> Turn:
    values: dict[str, Any] = {
        "turn_id": "t1",
        "system_prompt": "be brief",
        "history": [],
        "user_text": "add things",
        "model": ScriptedModel(steps),
        "model_info": INFO,
        "tools": counting_tools(ran),
        "check_tool": allow,
    }
    return Turn(**(values | overrides))


async def collect(turn: Turn) -> list[events_pb2.RuntimeEvent]:
    async def go() -> list[events_pb2.RuntimeEvent]:
        return [event async for event in run_turn(turn)]

    return await asyncio.wait_for(go(), 10)


async def test_every_step_is_recorded_before_the_next_starts() -> None:
    ran: list[str] = []
    journal = Recorder()
    events = await collect(make_turn(ran, script(), journal=journal))
    assert events[-1].final.text == "2, 4 and 6"
    kinds = [kind for kind, _ in journal.entries]
    assert kinds == ["start", "model", "decide", "tool", "tool", "step", "model", "decide", "tool", "step"]
    phases = [decode_snapshot(state)["phase"] for _, state in journal.entries]
    assert phases == ["think", "decide", "act", "act", "act", "think", "decide", "act", "act", "think"]
    # One key per call, the same whoever runs it: the turn, the model step and the model's call id.
    assert sorted(ran) == ["t1:1:c0", "t1:1:c1", "t1:2:c0"]


async def test_a_takeover_from_any_recorded_state_ends_alike_and_runs_no_recorded_call_again() -> None:
    ran: list[str] = []
    journal = Recorder()
    through = await collect(make_turn(ran, script(), journal=journal))
    for index, (kind, state) in enumerate(journal.entries):
        snapshot = decode_snapshot(state)
        # The model steps it finished are recorded: the model is asked only for the ones after them.
        remaining = script()[snapshot["iteration"] :]
        again: list[str] = []
        events = await collect(make_turn(again, remaining, resume=ResumePoint(snapshot, takeover=True)))
        final = events[-1]
        assert final.HasField("final"), (index, kind, final)
        assert final.final.text == through[-1].final.text
        assert final.final.metrics.model_calls == 3 and final.final.metrics.tool_calls == 3
        recorded = {i["call"]["id"] for i in snapshot["items"] if i["state"] == "done"}
        keys_done = {f"t1:{snapshot['iteration']}:{call_id}" for call_id in recorded}
        assert not keys_done & set(again), f"state {index} ({kind}) ran a recorded call again: {again}"
        # Every call runs exactly once across the two runs, by its key.
        ran_before = {key for key in ran if key_not_after(key, snapshot)}
        assert sorted(ran_before | set(again)) == sorted(ran), (index, kind, again)


def key_not_after(key: str, snapshot: Mapping[str, Any]) -> bool:
    """Whether the call with this key had finished (and been recorded) at `snapshot`."""
    _, step, call_id = key.split(":")
    if int(step) < snapshot["iteration"] or (snapshot["phase"] == "think" and int(step) == snapshot["iteration"]):
        return True  # its whole step was done
    return int(step) == snapshot["iteration"] and any(
        i["call"]["id"] == call_id and i["state"] == "done" for i in snapshot["items"]
    )
