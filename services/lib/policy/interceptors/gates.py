"""Tool gates: decide which tools the model sees (PRE_RUN, PRE_THINK) and refuse calls
to hidden ones (PRE_ACT), since a model may call a tool it was not offered."""

from __future__ import annotations

import fnmatch
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from services.lib.policy.domain import ToolInfo, TurnContext
from services.lib.policy.interceptors.base import Interceptor, InterceptResult

# A Python tool filter named in YAML: (tools, ctx) -> the tools (or names) to keep, sync or async.
FilterFn = Callable[[list[ToolInfo], TurnContext], list[Any] | Awaitable[list[Any]]]


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(p == "*" or fnmatch.fnmatchcase(name, p) for p in patterns)


class ToolGate(Interceptor):
    """Override `filter`; the gate hides what it drops and skips calls to it."""

    async def filter(self, tools: list[ToolInfo], ctx: TurnContext) -> list[ToolInfo]:
        return tools

    async def pre_run(self, ctx: TurnContext) -> InterceptResult:
        return await self._narrow(ctx)

    async def pre_think(self, ctx: TurnContext) -> InterceptResult:
        return await self._narrow(ctx)

    async def pre_act(self, ctx: TurnContext) -> InterceptResult:
        kept = await self.filter([ToolInfo(ctx.tool_name)], ctx)
        if any(t.name == ctx.tool_name for t in kept):
            return InterceptResult.ok()
        return InterceptResult.skip(f"tool {ctx.tool_name!r} is not available now ({self.label})")

    async def _narrow(self, ctx: TurnContext) -> InterceptResult:
        kept = await self.filter(list(ctx.tools), ctx)
        names = [t.name for t in kept]
        if names == [t.name for t in ctx.tools]:
            return InterceptResult.ok()
        hidden = sorted({t.name for t in ctx.tools} - set(names))
        return InterceptResult.modify_tools(names, f"hid {', '.join(hidden)}")


class PatternGate(ToolGate):
    """ToolGate from YAML: `allow` and `deny` glob lists, or a Python `filter` entry point."""

    name = "ToolGate"  # its type in YAML

    def __init__(
        self,
        allow: Sequence[str] = ("*",),
        deny: Sequence[str] = (),
        filter_fn: FilterFn | None = None,
    ):
        self.allow = tuple(allow)
        self.deny = tuple(deny)
        self.filter_fn = filter_fn

    async def filter(self, tools: list[ToolInfo], ctx: TurnContext) -> list[ToolInfo]:
        kept = [t for t in tools if _matches(t.name, self.allow) and not _matches(t.name, self.deny)]
        if self.filter_fn is None:
            return kept
        result = self.filter_fn(kept, ctx)
        if inspect.isawaitable(result):
            result = await result
        # A filter may answer with tool objects or names; either way it can only narrow.
        names = {t if isinstance(t, str) else t.name for t in result}
        return [t for t in kept if t.name in names]


class PermissionGate(ToolGate):
    """Allowlist of tool names (globs, "*" for all); `by_role` gives each role its own list."""

    def __init__(self, tools: Sequence[str] = (), by_role: Mapping[str, Sequence[str]] | None = None):
        self.tools = tuple(tools)
        self.by_role = {role: tuple(names) for role, names in (by_role or {}).items()}

    def allowed_tools(self, ctx: TurnContext) -> Sequence[str]:
        return self.by_role.get(ctx.scope.role_id, self.tools)

    async def filter(self, tools: list[ToolInfo], ctx: TurnContext) -> list[ToolInfo]:
        allowed = self.allowed_tools(ctx)
        return [t for t in tools if _matches(t.name, allowed)]


class ConversationGate(ToolGate):
    """Unlocks tools as the conversation grows: the stage with the highest message
    count not above the conversation's length applies."""

    def __init__(self, stages: Mapping[int, Sequence[str]]):
        if 0 not in stages:
            raise ValueError("stages must include stage 0 (the tools of a new conversation)")
        self.stages = sorted((count, tuple(names)) for count, names in stages.items())

    def allowed_tools(self, ctx: TurnContext) -> Sequence[str]:
        length = ctx.conversation_length
        current: Sequence[str] = ()
        for count, names in self.stages:
            if count <= length:
                current = names
        return current

    async def filter(self, tools: list[ToolInfo], ctx: TurnContext) -> list[ToolInfo]:
        allowed = self.allowed_tools(ctx)
        return [t for t in tools if _matches(t.name, allowed)]
