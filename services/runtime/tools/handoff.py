"""Handing the session to another agent: `transfer_to_agent` and `transfer_back`.

`transfer_to_agent(agent, reason)` is offered to an agent whose definition lists `handoffs`
(its `agent` argument is an enum of their names, each described for the model);
`transfer_back(reason)` to an agent that answers a session by a handoff, giving it back to
the session's own agent. The runtime answers a call itself (steps/session.py): it emits a
`handoff` event, which is what changes the session's active agent (the sessions service
applies a logged `handoff` in the same write), and the turn ends after the step with a
short final answer saying who takes over. The session's next messages run as the new
agent: its model, prompt, tools, policy and budgets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cogmesh.common.v1 import events_pb2
from services.lib.agents import AgentDefinition
from services.lib.llm import ToolSchema
from services.runtime.tools.base import Tool, answered_outside

TRANSFER_TOOL = "transfer_to_agent"
BACK_TOOL = "transfer_back"
_REASON = {"type": "string", "minLength": 1, "maxLength": 1000, "description": "Why, in a sentence for the user."}


def transfer_schema(targets: Sequence[AgentDefinition]) -> ToolSchema:
    described = "; ".join(f"{a.name}: {a.description or 'no description'}" for a in targets)
    return ToolSchema(
        name=TRANSFER_TOOL,
        description=(
            "Hand this conversation to another agent better suited to it. Your turn ends; the agent you "
            f"choose answers the user's next messages. Agents: {described}."
        ),
        parameters={
            "type": "object",
            "properties": {
                "agent": {"type": "string", "enum": [a.name for a in targets], "description": "The agent."},
                "reason": _REASON,
            },
            "required": ["agent", "reason"],
            "additionalProperties": False,
        },
    )


def back_schema(owner: str) -> ToolSchema:
    return ToolSchema(
        name=BACK_TOOL,
        description=(
            f"Hand this conversation back to {owner}, the agent that owns it, once your part is done or "
            "the user needs something outside it. Your turn ends; that agent answers the next messages."
        ),
        parameters={
            "type": "object",
            "properties": {"reason": _REASON},
            "required": ["reason"],
            "additionalProperties": False,
        },
    )


def handoff_event(from_agent: str, to_agent: str, reason: str, correlation_id: str = "") -> events_pb2.RuntimeEvent:
    """The event that moves the session to `to_agent` (its own agent for a hand-back or a reset)."""
    handoff = events_pb2.Handoff(from_agent=from_agent, to_agent=to_agent, reason=reason, correlation_id=correlation_id)
    return events_pb2.RuntimeEvent(handoff=handoff)


def target_of(name: str, arguments: Mapping[str, Any], owner: str) -> str:
    """The agent a transfer call hands to: the one named, or the session's own for transfer_back."""
    return owner if name == BACK_TOOL else str(arguments.get("agent", ""))


def final_text(to_agent: str, reason: str) -> str:
    """The handing agent's last words of the turn."""
    return f"I'm handing this conversation to {to_agent}: {reason}"


def transfer_tool(targets: Sequence[AgentDefinition]) -> Tool:
    return answered_outside(transfer_schema(targets), "session", "internal", policy_checked=False)


def back_tool(owner: str) -> Tool:
    return answered_outside(back_schema(owner), "session", "internal", policy_checked=False)
