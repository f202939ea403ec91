"""Failover (switch models when calls fail) and CircuitBreaker (stop calling failing tools)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.lib.policy.domain import ModelFailureKind, TurnContext
from services.lib.policy.interceptors.base import Interceptor, InterceptResult
from services.lib.policy.resilience import CircuitBreakerRegistry


class Failover(Interceptor):
    """ON_ERROR: on a matching failure, retry with the next fallback model; every
    fallback gets `max_retries_per_model` attempts. PRE_THINK keeps later model
    calls of the turn on the model it switched to. Progress lives in the turn state."""

    def __init__(
        self,
        fallbacks: Sequence[str],
        on: Sequence[ModelFailureKind] = ("rate_limit", "timeout", "error"),
        max_retries_per_model: int = 2,
    ):
        self.fallbacks = tuple(fallbacks)
        self.on = frozenset(on)
        self.max_retries_per_model = max_retries_per_model

    def _progress(self, ctx: TurnContext) -> dict[str, Any]:
        progress: dict[str, Any] = ctx.state.setdefault(self.label, {"index": -1, "attempts": 0})
        return progress

    async def pre_think(self, ctx: TurnContext) -> InterceptResult:
        index = int(ctx.state.get(self.label, {}).get("index", -1))
        if 0 <= index < len(self.fallbacks) and ctx.model != self.fallbacks[index]:
            return InterceptResult.use_model(self.fallbacks[index], "stay on the failover model")
        return InterceptResult.ok()

    async def on_error(self, ctx: TurnContext) -> InterceptResult:
        if ctx.error is None or ctx.error.kind not in self.on:
            return InterceptResult.ok()
        progress = self._progress(ctx)
        index, attempts = int(progress["index"]), int(progress["attempts"])
        failed = ctx.model or "the primary model"
        if index >= 0 and attempts < self.max_retries_per_model:
            attempts += 1
        else:
            index, attempts = index + 1, 1
        if index >= len(self.fallbacks):
            progress.update(index=len(self.fallbacks), attempts=0)
            ctx.notify(
                f"{self.label}: {failed} failed ({ctx.error.kind}); no fallback model left",
                interceptor=self.label,
                kind="failover_exhausted",
            )
            return InterceptResult.ok()
        progress.update(index=index, attempts=attempts)
        model = self.fallbacks[index]
        ctx.notify(
            f"{self.label}: {failed} failed ({ctx.error.kind}: {ctx.error.message}); "
            f"retrying with {model} (attempt {attempts} of {self.max_retries_per_model})",
            interceptor=self.label,
            kind="failover",
            failed_model=failed,
            model=model,
        )
        return InterceptResult.use_model(model, f"{failed} -> {model}")


class CircuitBreaker(Interceptor):
    """Counts failed results per tool (POST_ACT) and skips calls while the tool's breaker is open."""

    def __init__(self, breakers: CircuitBreakerRegistry, tools: Sequence[str] | None = None):
        self.breakers = breakers
        self.tools = None if tools is None else frozenset(tools)
        self.failure_threshold = breakers.failure_threshold
        self.reset_timeout = breakers.cooldown_s

    def _key(self, ctx: TurnContext) -> str | None:
        if self.tools is not None and ctx.tool_name not in self.tools:
            return None
        return f"{ctx.scope.agent}/{ctx.tool_name}"

    async def pre_act(self, ctx: TurnContext) -> InterceptResult:
        key = self._key(ctx)
        if key is None:
            return InterceptResult.ok()
        breaker = self.breakers.get(key)
        if breaker.allow_request():
            return InterceptResult.ok()
        return InterceptResult.skip(
            f"circuit open for tool {ctx.tool_name!r} after {breaker.failures} consecutive failures; "
            f"retry in {breaker.retry_in_s():.1f}s"
        )

    async def post_act(self, ctx: TurnContext) -> InterceptResult:
        key = self._key(ctx)
        if key is None:
            return InterceptResult.ok()
        breaker = self.breakers.get(key)
        if ctx.tool_error is None:
            breaker.record_success()
        else:
            breaker.record_failure()
        return InterceptResult.ok()
