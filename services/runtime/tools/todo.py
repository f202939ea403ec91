"""`manage_todo_list`: the agent's versioned todo list, kept in the session (opt-in: `todo_list: true`).

A call replaces the whole list (items with id, content, status). The runtime answers it
itself (steps/session.py): the list and its version live in the turn's state (`meta["plan"]`,
journaled with every step, so a step redone after a takeover computes the same version), and
the `plan` event that carries the new list is what stores it with the session (the sessions
service applies a logged `plan` to the session in the same write). Each item that became
completed with the call also gets a `step_complete` event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cogmesh.common.v1 import events_pb2
from services.lib.llm import ToolSchema
from services.runtime.tools.base import Tool, answered_outside

TODO_TOOL = "manage_todo_list"
MAX_ITEMS = 50
MAX_CONTENT = 1000
STATUSES = {
    "pending": events_pb2.TODO_STATUS_PENDING,
    "in_progress": events_pb2.TODO_STATUS_IN_PROGRESS,
    "completed": events_pb2.TODO_STATUS_COMPLETED,
}
_NAMES = {value: name for name, value in STATUSES.items()}
_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}

TODO_SCHEMA = ToolSchema(
    name=TODO_TOOL,
    description=(
        "Keep your todo list for this conversation: send the WHOLE list every time (it replaces the "
        "previous one). Plan multi-step work with it, mark one item in_progress while you work on it, "
        "and mark each item completed as soon as it is done. Returns the list as stored."
    ),
    parameters={
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "maxItems": MAX_ITEMS,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "minLength": 1, "maxLength": 64, "description": "Stable id."},
                        "content": {"type": "string", "minLength": 1, "maxLength": MAX_CONTENT},
                        "status": {"type": "string", "enum": list(STATUSES)},
                    },
                    "required": ["id", "content", "status"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["items"],
        "additionalProperties": False,
    },
)

# The system prompt's block for agents with a todo list (assembly appends it, with the current list).
PLANNING_PROMPT = (
    "## Todo list\n"
    f"You have a todo list ({TODO_TOOL}). For any task of several steps, write the plan there first, "
    "keep exactly one item in_progress while you work, mark items completed as soon as they are done, "
    "and send the whole updated list each time. Keep it current; the user sees it live."
)


@dataclass(frozen=True)
class Plan:
    """A todo list and its version (0: the session has none yet)."""

    items: tuple[tuple[str, str, str], ...] = ()  # (id, content, status name)
    version: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "items": [list(item) for item in self.items]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Plan:
        if not data:
            return cls()
        return cls(tuple((str(i), str(c), str(s)) for i, c, s in data["items"]), int(data["version"]))

    @classmethod
    def from_proto(cls, plan: events_pb2.PlanUpdated) -> Plan:
        items = tuple((i.id, i.content, _NAMES.get(i.status, "pending")) for i in plan.items)
        return cls(items, plan.version)

    def to_proto(self) -> events_pb2.PlanUpdated:
        items = [events_pb2.TodoItem(id=i, content=c, status=STATUSES[s]) for i, c, s in self.items]
        return events_pb2.PlanUpdated(items=items, version=self.version)

    def render(self) -> str:
        if not self.items:
            return f"The todo list is empty (version {self.version})."
        lines = [f"Todo list (version {self.version}):"]
        lines += [f"{n}. {_MARKS[s]} {c} (id {i}, {s})" for n, (i, c, s) in enumerate(self.items, 1)]
        return "\n".join(lines)


def planning_prompt(plan: Plan) -> str:
    """The planning block of the system prompt, with the list the turn starts from."""
    current = plan.render() if plan.items else "The list is empty."
    return f"{PLANNING_PROMPT}\n{current}"


def replace_list(current: Plan, arguments: Mapping[str, Any]) -> tuple[Plan, list[events_pb2.RuntimeEvent]]:
    """The list a call sets (the next version) and its events: `plan`, then `step_complete` per item
    completed by this call. Raises ValueError for what the schema cannot say (duplicate ids)."""
    given: Sequence[Mapping[str, Any]] = arguments.get("items", ())
    ids = [str(item["id"]) for item in given]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"item ids must be unique; repeated: {', '.join(duplicates)}")
    items = tuple((str(item["id"]), str(item["content"]), str(item["status"])) for item in given)
    new = Plan(items, current.version + 1)
    done_before = {i for i, _, s in current.items if s == "completed"}
    events = [events_pb2.RuntimeEvent(plan=new.to_proto())]
    for number, (item_id, content, status) in enumerate(items, 1):
        if status == "completed" and item_id not in done_before:
            completed = events_pb2.StepCompleted(
                step_number=number, total_steps=len(items), description=content, version=new.version
            )
            events.append(events_pb2.RuntimeEvent(step_complete=completed))
    return new, events


def todo_tool() -> Tool:
    """The tool, for agents with `todo_list: true`; the loop answers it (handling "session"), no policy rule needed."""
    return answered_outside(TODO_SCHEMA, "session", "internal", policy_checked=False)
