"""The CLI's lines for the issue-30 events: an approval's prompt and defaults, the decision with who took it,
a handoff, the live todo list and a completed step; and the answer an empty line gives at `approve?>`."""

from __future__ import annotations

import io
from typing import Any

from google.protobuf import struct_pb2
from rich.console import Console

from cogmesh.common.v1 import events_pb2
from services.suite.chat import suggested_answer
from services.suite.render import EventPrinter


def shown(*events: events_pb2.RuntimeEvent) -> list[str]:
    out = io.StringIO()
    printer = EventPrinter(Console(file=out, width=200, color_system=None), as_json=False)
    for event in events:
        printer.show(event)
    return out.getvalue().splitlines()


def struct(**values: Any) -> struct_pb2.Struct:
    made = struct_pb2.Struct()
    made.update(values)
    return made


def asked(**defaults: object) -> events_pb2.ApprovalRequired:
    return events_pb2.ApprovalRequired(
        action_name="refund", arguments=struct(amount=5), prompt="Refund 5 EUR to ada?", defaults=struct(**defaults)
    )


def test_an_approval_shows_its_prompt_defaults_and_the_decision() -> None:
    lines = shown(
        events_pb2.RuntimeEvent(approval_required=asked(decision="approve")),
        events_pb2.RuntimeEvent(
            approval_decided=events_pb2.ApprovalDecided(
                action_name="refund",
                decision=events_pb2.APPROVAL_DECISION_REJECT,
                principal="alice",
                comment="too much",
            )
        ),
        events_pb2.RuntimeEvent(
            approval_decided=events_pb2.ApprovalDecided(
                action_name="refund", decision=events_pb2.APPROVAL_DECISION_EDIT, edited_arguments=struct(amount=2)
            )
        ),
    )
    assert lines[1:] == [
        "  Refund 5 EUR to ada?",
        '  suggested: {"decision": "approve"}',
        "✔ rejected refund by alice: too much",
        '✔ approved with edits refund with {"amount": 2.0}',
    ]


def test_a_handoff_the_plan_and_a_completed_step() -> None:
    items = [
        events_pb2.TodoItem(id="1", content="find the order", status=events_pb2.TODO_STATUS_COMPLETED),
        events_pb2.TodoItem(id="2", content="refund it", status=events_pb2.TODO_STATUS_IN_PROGRESS),
        events_pb2.TodoItem(id="3", content="tell the user", status=events_pb2.TODO_STATUS_PENDING),
    ]
    lines = shown(
        events_pb2.RuntimeEvent(handoff=events_pb2.Handoff(from_agent="triage", to_agent="billing", reason="refunds")),
        events_pb2.RuntimeEvent(plan=events_pb2.PlanUpdated(items=items, version=2)),
        events_pb2.RuntimeEvent(
            step_complete=events_pb2.StepCompleted(step_number=1, total_steps=3, description="find the order")
        ),
    )
    assert lines == [
        "⇄ handed over triage → billing: refunds",
        "plan v2",
        "  [x] find the order",
        "  [~] refund it",
        "  [ ] tell the user",
        "✓ step 1/3: find the order",
    ]


def test_an_empty_answer_takes_the_agents_defaults() -> None:
    assert suggested_answer(asked(decision="approve", comment="fine")) == "approve"
    assert suggested_answer(asked(decision="Reject", comment="over the limit")) == "reject over the limit"
    assert suggested_answer(asked(comment="no decision")) == ""
    assert suggested_answer(asked(decision="edit")) == ""
