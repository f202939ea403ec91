"""Per-turn limits, the tool budget, and cost tracking against a cost budget (seeds 000, 003, 004)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from services.lib.policy.budget import DEFAULT_MAX_MCP_CALLS, DEFAULT_MAX_TOOL_CALLS

BudgetStatus = Literal["ok", "warning", "exceeded"]


@dataclass(frozen=True)
class Limits:
    """Bounds of one turn; reaching one ends the turn with a typed error or a finalize notice."""

    max_iterations: int = 8
    # The tool budget's defaults, the policy's too (services/lib/policy/budget.py says who enforces what).
    max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS
    max_mcp_calls: int = DEFAULT_MAX_MCP_CALLS
    tool_timeout_s: float = 30.0
    max_parallel_tools: int = 4
    max_wall_clock_s: float = 300.0
    on_tool_limit: Literal["finalize", "error"] = "finalize"


class ToolBudget:
    """The runtime's side of the tool budget: counts a turn's calls against its limits.

    `max_tool_calls` counts every call, `max_mcp_calls` MCP tools' (0 allows none). The
    policy's cap is checked apart, at PRE_ACT (services/lib/policy/budget.py).
    """

    def __init__(self, max_tool_calls: int, max_mcp_calls: int) -> None:
        self.max_tool_calls = max_tool_calls
        self.max_mcp_calls = max_mcp_calls
        self.total_calls = 0
        self.mcp_calls = 0

    def can_call(self, is_mcp: bool = False) -> bool:
        if self.total_calls >= self.max_tool_calls:
            return False
        return not (is_mcp and self.mcp_calls >= self.max_mcp_calls)

    def record_call(self, is_mcp: bool = False) -> None:
        self.total_calls += 1
        if is_mcp:
            self.mcp_calls += 1

    def release_call(self, is_mcp: bool = False) -> None:
        """Give back a call recorded for a tool call that was then not run (denied or skipped)."""
        self.total_calls = max(0, self.total_calls - 1)
        if is_mcp:
            self.mcp_calls = max(0, self.mcp_calls - 1)

    def is_exhausted(self) -> bool:
        return self.total_calls >= self.max_tool_calls

    def why_not(self, is_mcp: bool) -> str:
        if self.total_calls >= self.max_tool_calls:
            return f"the turn's tool call limit ({self.max_tool_calls}) is reached"
        return f"the turn's MCP tool call limit ({self.max_mcp_calls}) is reached"

    def reset(self) -> None:
        self.total_calls = self.mcp_calls = 0


@dataclass(frozen=True)
class CostBudget:
    """None means no limit; `action` "error" ends the turn, "warn" reports once and goes on."""

    max_cost_usd: float | None = None
    max_total_tokens: int | None = None
    action: Literal["error", "warn"] = "error"
    per_session: bool = False

    @property
    def is_set(self) -> bool:
        return self.max_cost_usd is not None or self.max_total_tokens is not None


@dataclass
class CostTracker:
    """Accumulates token usage and cost; `check_budget` compares them with a budget."""

    input_tokens: int = 0
    output_tokens: int = 0
    total_cost_usd: float = 0.0
    by_model: dict[str, tuple[int, int, float]] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def record(self, model: str, input_tokens: int, output_tokens: int, cost_usd: float) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.total_cost_usd += cost_usd
        seen_in, seen_out, seen_cost = self.by_model.get(model, (0, 0, 0.0))
        self.by_model[model] = (seen_in + input_tokens, seen_out + output_tokens, seen_cost + cost_usd)

    def check_budget(self, budget: CostBudget) -> BudgetStatus:
        over_cost = budget.max_cost_usd is not None and self.total_cost_usd > budget.max_cost_usd
        over_tokens = budget.max_total_tokens is not None and self.total_tokens > budget.max_total_tokens
        if not (over_cost or over_tokens):
            return "ok"
        return "exceeded" if budget.action == "error" else "warning"

    def describe_excess(self, budget: CostBudget) -> str:
        parts = []
        if budget.max_cost_usd is not None and self.total_cost_usd > budget.max_cost_usd:
            parts.append(f"cost ${self.total_cost_usd:.6f} > ${budget.max_cost_usd:.6f}")
        if budget.max_total_tokens is not None and self.total_tokens > budget.max_total_tokens:
            parts.append(f"tokens {self.total_tokens} > {budget.max_total_tokens}")
        return ", ".join(parts)

    def reset(self) -> None:
        self.input_tokens = self.output_tokens = 0
        self.total_cost_usd = 0.0
        self.by_model.clear()


class SessionCosts:
    """Cost trackers by session on this replica, bounded (least recently used dropped first).

    A turn that brings the session's usage so far (RunTurnRequest.session_usage) seeds
    its tracker from it, so totals do not depend on which replica ran earlier turns.
    """

    def __init__(self, max_sessions: int = 10_000) -> None:
        self.max_sessions = max_sessions
        self._trackers: dict[str, CostTracker] = {}

    def tracker(self, session_id: str, seed: CostTracker | None = None) -> CostTracker:
        tracker = self._trackers.pop(session_id, None)
        if seed is not None and (tracker is None or seed.total_tokens >= tracker.total_tokens):
            tracker = seed
        tracker = tracker or CostTracker()
        self._trackers[session_id] = tracker  # re-inserted: most recently used last
        while len(self._trackers) > self.max_sessions:
            del self._trackers[next(iter(self._trackers))]
        return tracker
