"""BudgetGuard: caps model and tool calls per turn, with a warning near the cap."""

from __future__ import annotations

from typing import Literal

from services.lib.policy.domain import TurnContext
from services.lib.policy.interceptors.base import Interceptor, InterceptResult


class BudgetGuard(Interceptor):
    """Counts come from the runtime (TurnContext.model_calls / tool_calls), so the
    guard keeps no per-turn state of its own except which warnings it gave."""

    def __init__(
        self,
        model_calls: int = 0,
        tool_calls: int = 0,
        exit_behavior: Literal["stop", "error"] = "stop",
        warning_threshold: float = 0.8,
    ):
        self.model_calls = model_calls  # 0 = unlimited
        self.tool_calls = tool_calls  # 0 = unlimited
        self.exit_behavior = exit_behavior
        self.warning_threshold = warning_threshold

    async def pre_think(self, ctx: TurnContext) -> InterceptResult:
        return self._check(ctx, "model", ctx.model_calls, self.model_calls)

    async def pre_act(self, ctx: TurnContext) -> InterceptResult:
        return self._check(ctx, "tool", ctx.tool_calls, self.tool_calls)

    def _check(self, ctx: TurnContext, kind: str, used: int, limit: int) -> InterceptResult:
        if limit <= 0:
            return InterceptResult.ok()
        if used >= limit:
            text = f"{kind} call budget exhausted: {used} of {limit} {kind} calls used"
            return InterceptResult.stop(text, "budget_exceeded" if self.exit_behavior == "error" else None)
        # The call about to happen is number used + 1; warn once when it crosses the threshold.
        key = f"{self.label}.warned_{kind}"
        if (used + 1) >= self.warning_threshold * limit and not ctx.state.get(key):
            ctx.state[key] = True
            ctx.notify(
                f"{kind} call budget at {used + 1} of {limit}",
                interceptor=self.label,
                kind="budget_warning",
                used=used + 1,
                limit=limit,
            )
        return InterceptResult.ok()

    def remaining(self, ctx: TurnContext) -> dict[str, int | None]:
        """Budget left after the calls counted in `ctx`; None means unlimited."""
        return {
            "model_calls": max(0, self.model_calls - ctx.model_calls) if self.model_calls else None,
            "tool_calls": max(0, self.tool_calls - ctx.tool_calls) if self.tool_calls else None,
        }
