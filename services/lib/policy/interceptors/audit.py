"""LoggingInterceptor: one structured log line per phase of the agent loop.

It never changes anything (always OK). Tool arguments and results stay out of
the log unless `include_args` says otherwise: they may carry personal data.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from services.kit.logging import log
from services.lib.policy.domain import Phase, TurnContext
from services.lib.policy.interceptors.base import Interceptor, InterceptResult

LogLevel = Literal["debug", "info", "warning"]


class LoggingInterceptor(Interceptor):
    """Logs the loop's progress at the phases in `phases` (all seven by default)."""

    def __init__(
        self,
        phases: Iterable[Phase | str] = tuple(Phase),
        level: LogLevel = "info",
        include_args: bool = False,
    ):
        self.phases = frozenset(Phase(p) for p in phases)
        self.level = level
        self.include_args = include_args

    def handler(self, phase: Phase) -> Any:
        # Only the configured phases cost a call (the chain skips phases with no handler).
        return super().handler(phase) if phase in self.phases else None

    def _log(self, ctx: TurnContext, phase: Phase, event: str, **fields: Any) -> InterceptResult:
        getattr(log, self.level)(
            event,
            interceptor=self.label,
            phase=phase.value,
            agent=ctx.scope.agent,
            role=ctx.scope.role_id,
            session_id=ctx.scope.session_id,
            turn_id=ctx.scope.turn_id,
            **fields,
        )
        return InterceptResult.ok()

    async def pre_run(self, ctx: TurnContext) -> InterceptResult:
        return self._log(ctx, Phase.PRE_RUN, "turn starting", tools=len(ctx.tools), model=ctx.model)

    async def pre_think(self, ctx: TurnContext) -> InterceptResult:
        return self._log(ctx, Phase.PRE_THINK, "model call", call=ctx.model_calls + 1, messages=ctx.conversation_length)

    async def post_think(self, ctx: TurnContext) -> InterceptResult:
        response = ctx.model_response
        tool_calls = len(response.tool_calls) if response is not None else 0
        return self._log(ctx, Phase.POST_THINK, "model answered", call=ctx.model_calls, tool_calls=tool_calls)

    async def pre_act(self, ctx: TurnContext) -> InterceptResult:
        extra: dict[str, Any] = {"arguments": ctx.tool_args} if self.include_args else {}
        return self._log(ctx, Phase.PRE_ACT, "tool call", tool=ctx.tool_name, call=ctx.tool_calls + 1, **extra)

    async def post_act(self, ctx: TurnContext) -> InterceptResult:
        extra: dict[str, Any] = {"result": ctx.tool_result} if self.include_args else {}
        status = "error" if ctx.tool_error is not None else "ok"
        return self._log(ctx, Phase.POST_ACT, "tool finished", tool=ctx.tool_name, status=status, **extra)

    async def post_run(self, ctx: TurnContext) -> InterceptResult:
        return self._log(ctx, Phase.POST_RUN, "turn finished", model_calls=ctx.model_calls, tool_calls=ctx.tool_calls)

    async def on_error(self, ctx: TurnContext) -> InterceptResult:
        kind = ctx.error.kind if ctx.error is not None else ""
        return self._log(ctx, Phase.ON_ERROR, "model call failed", kind=kind, model=ctx.model)
