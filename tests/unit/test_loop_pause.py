"""Pausing and resuming the loop: approvals, user input, client-side tools, delegation to subagents.

Every resume goes through the JSON bytes a checkpoint stores (encode, then decode), with
a Turn built afresh, as on another replica after a restart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from google.protobuf import json_format

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.lib.agents import AgentDefinition
from services.lib.llm import ChatMessage, ToolSchema
from services.runtime.budget import Limits
from services.runtime.calculator import CALCULATOR_SCHEMA, calculator_tool
from services.runtime.delegation import task_tool
from services.runtime.local_model import LocalModel
from services.runtime.loop import run_turn
from services.runtime.steps.state import decode_snapshot, encode_snapshot
from services.runtime.tools.base import answered_outside, builtin
from services.runtime.tools.builtin import builtin_tools
from services.runtime.turn import Decision, ModelInfo, ResumePoint, Turn, Verdict, interrupt_matcher
from services.runtime.turn_store import decision_from
from tests.fakes.models import ScriptedModel, calls, text

INFO = ModelInfo("cogmesh-local", "local", 1.0, 2.0)
PICK = ToolSchema(
    "pick_file",
    "Let the user pick a file in their editor.",
    {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]},
)


async def allow(name: str, arguments: Mapping[str, Any]) -> Verdict:
    return Verdict(True, "ok", arguments)


def make_turn(user_text: str, **overrides: Any) -> Turn:
    values: dict[str, Any] = {
        "turn_id": "t1",
        "system_prompt": "be brief",
        "history": [],
        "user_text": user_text,
        "model": LocalModel(),
        "model_info": INFO,
        "tools": builtin_tools(),
        "check_tool": allow,
        "agent": "main",
    }
    return Turn(**(values | overrides))


async def run(turn: Turn) -> list[events_pb2.RuntimeEvent]:
    async def collect() -> list[events_pb2.RuntimeEvent]:
        return [event async for event in run_turn(turn)]

    return await asyncio.wait_for(collect(), 10)


def kinds(events: list[events_pb2.RuntimeEvent]) -> list[str]:
    return [e.WhichOneof("payload") or "" for e in events]


def resumed(paused: Turn, decision: Decision | None, abandon: bool = False, **overrides: Any) -> Turn:
    """A fresh Turn continuing `paused` from its checkpoint bytes, as another replica would build it."""
    assert paused.pause is not None
    snapshot = decode_snapshot(encode_snapshot(paused.pause.snapshot))
    return make_turn(paused.user_text, resume=ResumePoint(snapshot, decision, abandon), **overrides)


async def test_an_approval_pauses_before_the_tool_and_resumes_after_a_restart() -> None:
    ran: list[Mapping[str, Any]] = []

    async def calculator(arguments: Mapping[str, Any]) -> str:
        ran.append(arguments)
        return await calculator_tool(arguments)

    tools = {"calculator": builtin(CALCULATOR_SCHEMA, calculator)}
    approve_calc = interrupt_matcher({"calculator": True})
    turn = make_turn("What is 17 * 23?", tools=tools, interrupt_on=approve_calc)
    events = await run(turn)

    assert kinds(events) == ["status", "usage", "tool_call_started", "approval_required", "status"]
    approval = events[3].approval_required
    assert approval.action_name == "calculator" and approval.interrupt_id.startswith("int_")
    assert json_format.MessageToDict(approval.arguments) == {"expression": "17 * 23"}
    assert list(approval.allowed_decisions) == [
        events_pb2.APPROVAL_DECISION_APPROVE,
        events_pb2.APPROVAL_DECISION_EDIT,
        events_pb2.APPROVAL_DECISION_REJECT,
    ]
    assert approval.correlation_id == events[2].tool_call_started.correlation_id
    paused = events[-1].status
    assert (paused.state, paused.interrupt_id) == (events_pb2.TURN_STATE_PAUSED, approval.interrupt_id)
    assert not ran, "nothing runs before the approval"
    assert turn.pause is not None and turn.pause.interrupt_id == approval.interrupt_id
    assert turn.request_cancel() is False  # a paused turn has nothing running

    again = resumed(turn, Decision("approve"), tools=tools, interrupt_on=approve_calc)
    events = await run(again)
    assert kinds(events) == ["status", "tool_call_finished", "assistant_delta", "assistant_delta", "usage", "final"]
    assert ran == [{"expression": "17 * 23"}]
    final = events[-1].final
    assert final.text == "17 * 23 = 391."
    assert (final.metrics.model_calls, final.metrics.tool_calls) == (2, 1)  # counted across the pause
    assert [m.role for m in again.new_messages] == ["user", "assistant", "tool", "assistant"]
    assert again.new_messages[0].content == "What is 17 * 23?"


async def test_edit_runs_the_edited_arguments_and_reject_tells_the_model_why() -> None:
    approve_calc = interrupt_matcher({"calc*": True})
    turn = make_turn("What is 2 + 2?", interrupt_on=approve_calc)
    await run(turn)
    events = await run(resumed(turn, Decision("edit", {"expression": "3 + 3"}), interrupt_on=approve_calc))
    finished = next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))
    assert finished.ok and finished.result_summary == "6"
    assert events[-1].final.text == "2 + 2 = 6."  # the local model quotes the call it made

    turn = make_turn("What is 2 + 2?", interrupt_on=approve_calc)
    await run(turn)
    events = await run(resumed(turn, Decision("edit", {"expr": 1}), interrupt_on=approve_calc))
    finished = next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))
    assert not finished.ok and "edited arguments are invalid" in finished.result_summary

    turn = make_turn("What is 2 + 2?", interrupt_on=approve_calc)
    await run(turn)
    again = resumed(turn, Decision("reject", text="not during the audit"), interrupt_on=approve_calc)
    events = await run(again)
    assert events[-1].final.text == (
        'The calculator tool failed: "a human reviewer rejected this call: not during the audit".'
    )
    assert again.new_messages[2].content == "error: a human reviewer rejected this call: not during the audit"


async def test_ask_user_pauses_for_the_answer() -> None:
    turn = make_turn("@ask_user Which city are you in?", tools={"ask_user": builtin_tools()["ask_user"]})
    events = await run(turn)
    asked = events[-2].user_input_requested
    assert asked.prompt == "Which city are you in?" and asked.interrupt_id == events[-1].status.interrupt_id
    assert events[-1].status.text == "waiting for user input"

    events = await run(resumed(turn, Decision("input", text="Lisbon"), tools=turn.tools))
    assert events[-1].final.text == "The ask_user tool returned: Lisbon"


async def test_client_tool_waits_for_the_callers_result_and_failures_reach_the_model() -> None:
    client = answered_outside(PICK, "client", "client", policy_checked=False)
    denied: list[str] = []

    async def deny_all(name: str, arguments: Mapping[str, Any]) -> Verdict:
        denied.append(name)
        return Verdict(False, "default deny", {})

    tools = {"pick_file": client}
    turn = make_turn('@pick_file {"pattern": "*.py"}', tools=tools, check_tool=deny_all)
    events = await run(turn)
    started = next(e.tool_call_started for e in events if e.HasField("tool_call_started"))
    assert started.source == "client"
    asked = events[-2].client_tool_call
    assert asked.call.name == "pick_file" and json_format.MessageToDict(asked.call.arguments) == {"pattern": "*.py"}
    assert not denied, "the caller's own tools are not the server policy's to decide"

    events = await run(resumed(turn, Decision("tool_result", text="src/app.py"), tools=tools))
    assert events[-1].final.text == "The pick_file tool returned: src/app.py"

    turn = make_turn('@pick_file {"pattern": "*.py"}', tools=tools)
    await run(turn)
    events = await run(resumed(turn, Decision("tool_result", text="error: no editor open", is_error=True), tools=tools))
    finished = next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))
    assert not finished.ok and events[-1].final.text == 'The pick_file tool failed: "no editor open".'


async def test_several_waiting_calls_of_one_step_pause_one_after_the_other() -> None:
    approve = interrupt_matcher({"calculator": True})
    model = ScriptedModel(
        [
            calls(
                ("calculator", {"expression": "1 + 1"}),
                ("current_time", {}),
                ("calculator", {"expression": "2 + 2"}),
            ),
            text("all done"),
        ]
    )
    turn = make_turn("go", model=model, interrupt_on=approve)
    events = await run(turn)
    # The ordinary call runs at once; the first approval is asked for.
    assert kinds(events)[-4:] == ["tool_call_started", "tool_call_finished", "approval_required", "status"]
    assert events[-2].approval_required.correlation_id == "c0"

    second = resumed(turn, Decision("approve"), model=model, interrupt_on=approve)
    events = await run(second)
    assert kinds(events) == ["status", "tool_call_finished", "approval_required", "status"]
    assert events[2].approval_required.correlation_id == "c2"

    third = resumed(second, Decision("reject", text="enough"), model=model, interrupt_on=approve)
    events = await run(third)
    assert events[-1].final.text == "all done"
    tool_messages = [m for m in third.new_messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["c0", "c1", "c2"]  # call order
    assert tool_messages[0].content == "2" and tool_messages[2].content.startswith("error: a human reviewer")
    conversation = model.calls[-1][0]
    assert [m.role for m in conversation] == ["system", "user", "assistant", "tool", "tool", "tool"]


async def test_abandoning_a_paused_turn_closes_its_calls_and_ends_cancelled() -> None:
    approve = interrupt_matcher({"calculator": True})
    turn = make_turn("What is 5 * 5?", interrupt_on=approve)
    await run(turn)
    gone = resumed(turn, None, abandon=True, interrupt_on=approve)
    events = await run(gone)
    assert kinds(events) == ["status", "tool_call_finished", "error"]
    assert events[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
    assert gone.new_messages[-1].content == "error: the turn was cancelled while this call waited for approval"


async def test_paused_time_does_not_count_against_the_wall_clock() -> None:
    approve = interrupt_matcher({"calculator": True})
    turn = make_turn("What is 1 + 2?", interrupt_on=approve, limits=Limits(max_wall_clock_s=0.5))
    await run(turn)
    await asyncio.sleep(0.6)  # longer than the whole turn may take, but the turn is paused
    events = await run(resumed(turn, Decision("approve"), interrupt_on=approve))
    assert events[-1].final.text == "1 + 2 = 3."
    assert events[-1].final.metrics.duration_ms < 500


def subagents() -> list[AgentDefinition]:
    return [AgentDefinition(name="helper", mode="subagent", description="does arithmetic")]


def delegator(approve_in_child: bool = False) -> Any:
    async def build(name: str, task: str, parent: Turn, resume: ResumePoint | None) -> Turn:
        assert name == "helper"
        return make_turn(
            task,
            agent=name,
            depth=parent.depth + 1,
            cost=parent.cost,
            session_cost=parent.session_cost,
            cancel=parent.cancel,
            interrupt_on=interrupt_matcher({"calculator": approve_in_child}),
            tools={"calculator": builtin(CALCULATOR_SCHEMA, calculator_tool)},
            resume=resume,
        )

    return build


async def test_delegation_streams_the_subagents_events_in_the_same_turn() -> None:
    tools = {"task": task_tool(subagents())}
    turn = make_turn('@task {"agent": "helper", "task": "What is 6 * 7?"}', tools=tools, delegate=delegator())
    events = await run(turn)
    delegation = next(e.delegation for e in events if e.HasField("delegation"))
    assert (delegation.from_agent, delegation.to_agent, delegation.task) == ("main", "helper", "What is 6 * 7?")
    child = [e for e in events if e.agent == "helper"]
    assert [e.WhichOneof("payload") for e in child][:3] == ["status", "usage", "tool_call_started"]
    assert all(e.turn_id == "t1" for e in events)
    assert "final" not in [e.WhichOneof("payload") for e in child], "the subagent's answer is the task's result"
    task_done = [e.tool_call_finished for e in events if e.HasField("tool_call_finished") and not e.agent]
    assert task_done[0].correlation_id == delegation.correlation_id and task_done[0].result_summary == "6 * 7 = 42."
    final = events[-1].final
    assert final.text == "The task tool returned: 6 * 7 = 42."
    assert final.metrics.model_calls == 4 and final.metrics.tool_calls == 2  # both agents' work


async def test_a_pause_inside_a_subagent_pauses_and_resumes_the_whole_turn() -> None:
    tools = {"task": task_tool(subagents())}
    build = delegator(approve_in_child=True)
    turn = make_turn('@task {"agent": "helper", "task": "What is 9 * 9?"}', tools=tools, delegate=build)
    events = await run(turn)
    assert events[-2].HasField("approval_required") and events[-2].agent == "helper"
    assert events[-1].status.state == events_pb2.TURN_STATE_PAUSED

    again = resumed(turn, Decision("approve"), tools=tools, delegate=build)
    events = await run(again)
    assert [e.agent for e in events if e.HasField("tool_call_finished")] == ["helper", ""]
    assert events[-1].final.text == "The task tool returned: 9 * 9 = 81."
    assert [m.role for m in again.new_messages] == ["user", "assistant", "tool", "assistant"]


async def test_cancel_before_the_first_step_ends_the_turn_at_once() -> None:
    turn = make_turn("hello")
    assert turn.request_cancel() is True
    events = await run(turn)
    assert events[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
    assert turn.request_cancel() is False  # harmless twice


async def test_snapshot_is_json_and_holds_no_callables() -> None:
    turn = make_turn("What is 3 + 3?", interrupt_on=interrupt_matcher({"calculator": True}))
    await run(turn)
    assert turn.pause is not None
    snapshot = decode_snapshot(encode_snapshot(turn.pause.snapshot))
    assert snapshot == turn.pause.snapshot
    assert snapshot["messages"][0] == {"role": "system", "content": "be brief"}
    assert snapshot["waiting"] == "approval" and snapshot["agent"] == "main"
    assert encode_snapshot(snapshot) == encode_snapshot(turn.pause.snapshot)  # deterministic: retried writes match
    assert ChatMessage("user", "What is 3 + 3?") in [
        ChatMessage(m["role"], m["content"]) for m in snapshot["new_messages"]
    ]


@pytest.mark.parametrize("value", [0, 4, 77, 99])
def test_a_recorded_approval_outside_the_known_values_is_a_rejection(value: int) -> None:
    """Fail closed: only an explicit APPROVE runs the call, whatever reached the checkpoint."""
    checkpoint = sessions_pb2.Checkpoint(
        approval=events_pb2.ApprovalRequired(action_name="calculator"),
        decision=sessions_pb2.CheckpointDecision(approval=value),  # type: ignore[arg-type]
    )
    decision = decision_from(checkpoint)
    assert decision is not None and decision.kind == "reject"
    assert f"unknown approval decision {value}" in decision.text
    approved = sessions_pb2.Checkpoint(
        approval=events_pb2.ApprovalRequired(action_name="calculator"),
        decision=sessions_pb2.CheckpointDecision(approval=events_pb2.APPROVAL_DECISION_APPROVE),
    )
    assert decision_from(approved).kind == "approve"  # type: ignore[union-attr]
