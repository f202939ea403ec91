"""RateLimiter and ThrottleInterceptor: pace tool calls (PRE_ACT).

Both take slots from a WindowStore shared by every turn (and, with Redis, by every
replica). "wait" reserves the next free slot and returns it as wait time; the
runtime sleeps before running the call. "block" ends the turn when the window is full.
"""

from __future__ import annotations

from typing import Literal

from services.lib.policy.domain import TurnContext
from services.lib.policy.interceptors.base import Interceptor, InterceptResult
from services.lib.policy.ratelimit import WindowStore

# Or "scope:<key>": one window per tenant and value of the session's scope key (sessions
# without that key share one window of their tenant).
Scope = Literal["agent", "session", "tenant", "global"] | str


def _scope_key(ctx: TurnContext, scope: Scope) -> str:
    s = ctx.scope
    if scope.startswith("scope:"):
        name = scope.removeprefix("scope:")
        return f"tenant={s.tenant_id}/{name}={s.session_scope.get(name, '')}"
    match scope:
        case "agent":
            return f"agent={s.agent}"
        case "session":
            return f"session={s.tenant_id}/{s.session_id}"
        case "tenant":
            return f"tenant={s.tenant_id}"
        case "global":
            return "global"
    raise ValueError(f"unknown rate limit scope {scope!r}")


class RateLimiter(Interceptor):
    def __init__(
        self,
        store: WindowStore,
        calls_per_window: int = 10,
        window_seconds: float = 60.0,
        action: Literal["wait", "block"] = "wait",
        per_tool: bool = False,
        scope: Scope = "agent",
        max_wait_seconds: float | None = None,
    ):
        self.store = store
        self.calls_per_window = calls_per_window
        self.window_seconds = window_seconds
        self.action = action
        self.per_tool = per_tool
        self.scope = scope
        # Waiting longer than a whole window means the limit is oversubscribed: refuse instead.
        self.max_wait_seconds = window_seconds if max_wait_seconds is None else max_wait_seconds

    def key(self, ctx: TurnContext) -> str:
        tool = ctx.tool_name if self.per_tool else "*"
        return f"{self.label}:{_scope_key(ctx, self.scope)}:tool={tool}"

    async def pre_act(self, ctx: TurnContext) -> InterceptResult:
        max_wait = 0.0 if self.action == "block" else self.max_wait_seconds
        slot = await self.store.reserve(self.key(ctx), self.calls_per_window, self.window_seconds, max_wait)
        what = f"tool {ctx.tool_name!r}" if self.per_tool else "tool calls"
        if not slot.granted:
            return InterceptResult.stop(
                f"rate limit: {what} limited to {self.calls_per_window} per {self.window_seconds:g}s "
                f"(next slot in {slot.wait_s:.2f}s)",
                "rate_limited",
            )
        if slot.wait_s > 0:
            ctx.notify(
                f"{self.label}: waiting {slot.wait_s:.2f}s for a slot ({what}: "
                f"{self.calls_per_window} per {self.window_seconds:g}s)",
                interceptor=self.label,
                kind="rate_limit_wait",
                wait_s=slot.wait_s,
            )
            return InterceptResult.ok(wait_s=slot.wait_s, detail=f"wait {slot.wait_s:.3f}s")
        return InterceptResult.ok()


class ThrottleInterceptor(RateLimiter):
    """At least min_delay seconds between consecutive tool calls: a window of one call."""

    def __init__(self, store: WindowStore, min_delay: float = 0.5, per_tool: bool = True, scope: Scope = "agent"):
        super().__init__(
            store,
            calls_per_window=1,
            window_seconds=min_delay,
            action="wait",
            per_tool=per_tool,
            scope=scope,
            # A throttle always waits its turn, however many calls queue up.
            max_wait_seconds=float("inf"),
        )
