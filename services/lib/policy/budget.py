"""How many tool calls one turn may make, and the policy's check of it.

Two layers limit a turn's tool calls, with one set of defaults (below):
- the runtime enforces the turn's limits (the agent's `limits`, the request's TurnLimits;
  services/runtime/budget.py): it counts the calls, refuses those over the limit itself
  and then finalizes the turn or ends it (`on_tool_limit`);
- the policy (this ToolBudget, from policy.yaml's `budget`) is the operator's cap over
  every agent, checked at PRE_ACT against the counts the runtime reports: a call over it
  is denied (rule tool_budget). 0 means unlimited here.
With the defaults on both sides the runtime's limit is the one a turn reaches.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.lib.policy.tool_policy import MCP_PREFIX

# Per turn, unless the agent, the request or the policy sets other limits.
DEFAULT_MAX_TOOL_CALLS = 8
DEFAULT_MAX_MCP_CALLS = 6


def is_mcp(tool_name: str) -> bool:
    return tool_name.startswith(MCP_PREFIX)


@dataclass
class ToolBudget:
    """Counts one turn's calls; a limit of 0 means unlimited.

    The service is stateless between calls: the runtime reports the counts so far
    and `ToolBudget.at(...)` rebuilds the budget from them.
    """

    max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS
    max_mcp_calls: int = DEFAULT_MAX_MCP_CALLS
    timeout_per_call_ms: int = 30_000
    total_calls: int = 0
    mcp_calls: int = 0

    def at(self, total_calls: int, mcp_calls: int) -> ToolBudget:
        return ToolBudget(self.max_tool_calls, self.max_mcp_calls, self.timeout_per_call_ms, total_calls, mcp_calls)

    def can_call(self, is_mcp: bool = False) -> bool:
        if self.max_tool_calls and self.total_calls >= self.max_tool_calls:
            return False
        return not (is_mcp and self.max_mcp_calls and self.mcp_calls >= self.max_mcp_calls)

    def record_call(self, is_mcp: bool = False) -> None:
        self.total_calls += 1
        if is_mcp:
            self.mcp_calls += 1

    def is_exhausted(self) -> bool:
        return bool(self.max_tool_calls) and self.total_calls >= self.max_tool_calls

    def reset(self) -> None:
        self.total_calls = 0
        self.mcp_calls = 0

    def denial(self, tool_name: str) -> str:
        if self.is_exhausted():
            return f"tool {tool_name!r} is denied: the turn used its {self.max_tool_calls} tool calls (tool_budget)"
        return f"tool {tool_name!r} is denied: the turn used its {self.max_mcp_calls} MCP tool calls (tool_budget)"
