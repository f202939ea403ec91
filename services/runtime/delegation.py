"""The `task` tool: how an agent hands a task to one of its subagents (seed 001's delegation).

The tool is offered to agents that list `subagents` in their definition; its
`agent` argument is an enum of their names, each described for the model. The
loop does not run it like other tools: it emits a delegation event, runs the
subagent's own loop within the same turn (its events stream with
RuntimeEvent.agent set) and gives the subagent's final answer back as the result.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.lib.agents import AgentDefinition
from services.lib.llm import ToolSchema
from services.runtime.tools.base import Tool, answered_outside

TASK_TOOL = "task"


def task_schema(subagents: Sequence[AgentDefinition]) -> ToolSchema:
    described = "; ".join(f"{a.name}: {a.description or 'no description'}" for a in subagents)
    return ToolSchema(
        name=TASK_TOOL,
        description=(f"Hand a self-contained task to a subagent and get its answer back. Subagents: {described}."),
        parameters={
            "type": "object",
            "properties": {
                "agent": {"type": "string", "enum": [a.name for a in subagents], "description": "The subagent."},
                "task": {"type": "string", "minLength": 1, "description": "What the subagent should do."},
            },
            "required": ["agent", "task"],
            "additionalProperties": False,
        },
    )


def task_tool(subagents: Sequence[AgentDefinition]) -> Tool:
    return answered_outside(task_schema(subagents), "delegate", "internal", policy_checked=False)
