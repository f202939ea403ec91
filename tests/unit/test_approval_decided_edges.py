"""The issue-30 events at the edges: AG-UI (the approval interrupt carries the agent's prompt and defaults,
the todo list is shared state, a handoff changes the state's agent, a decision is a CUSTOM event) and the
OpenAI-compatible API's approval text and interrupt object."""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2

from cogmesh.common.v1 import events_pb2, resources_pb2
from gateway.web.agui import Translator
from gateway.web.openai.turns import approval_text, interrupt_details


def struct(**values: Any) -> struct_pb2.Struct:
    made = struct_pb2.Struct()
    made.update(values)
    return made


ASKED = events_pb2.RuntimeEvent(
    turn_id="t1",
    seq=5,
    approval_required=events_pb2.ApprovalRequired(
        action_name="refund",
        arguments=struct(amount=5),
        interrupt_id="int_1",
        description="refund needs a human",
        prompt="Refund 5 EUR?",
        defaults=struct(decision="approve"),
        allowed_decisions=[events_pb2.APPROVAL_DECISION_APPROVE],
    ),
)


def translated(*events: events_pb2.RuntimeEvent) -> tuple[Translator, list[dict[str, Any]]]:
    translator = Translator(resources_pb2.Session(session_id="s1", agent="triage"))
    out = [e.model_dump(by_alias=True, exclude_none=True) for event in events for e in translator.translate(event)]
    return translator, out


def test_agui_approval_interrupt_plan_handoff_and_decision() -> None:
    items = [events_pb2.TodoItem(id="1", content="look up", status=events_pb2.TODO_STATUS_IN_PROGRESS)]
    translator, out = translated(
        ASKED,
        events_pb2.RuntimeEvent(plan=events_pb2.PlanUpdated(items=items, version=3)),
        events_pb2.RuntimeEvent(handoff=events_pb2.Handoff(from_agent="triage", to_agent="billing", reason="money")),
        events_pb2.RuntimeEvent(
            approval_decided=events_pb2.ApprovalDecided(
                interrupt_id="int_1", decision=events_pb2.APPROVAL_DECISION_APPROVE, principal="alice"
            )
        ),
    )
    assert translator.interrupt is not None and translator.interrupt.message == "Refund 5 EUR?"
    metadata = translator.interrupt.metadata["cogmesh"]  # type: ignore[index]
    assert (metadata["defaults"], metadata["description"]) == ({"decision": "approve"}, "refund needs a human")
    assert out[0]["delta"] == [
        {
            "op": "add",
            "path": "/plan",
            "value": {"version": 3, "items": [{"id": "1", "content": "look up", "status": "in_progress"}]},
        }
    ]
    assert out[1]["delta"] == [{"op": "replace", "path": "/agent", "value": "billing"}]
    assert (out[2]["name"], out[2]["value"]["reason"]) == ("cogmesh.handoff", "money")
    assert (out[3]["name"], out[3]["value"]["principal"]) == ("cogmesh.approval_decided", "alice")


def test_openai_approval_text_and_interrupt_carry_the_prompt() -> None:
    assert approval_text(ASKED.approval_required).startswith("Refund 5 EUR?\nApproval needed: ")
    details = interrupt_details(ASKED)
    assert (details["prompt"], details["defaults"]) == ("Refund 5 EUR?", {"decision": "approve"})
