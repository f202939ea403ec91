"""Prompt adapters: rewrite the system prompt from the run's context or the conversation's stage."""

from __future__ import annotations

import inspect
import string
from collections.abc import Callable, Mapping
from typing import Any

from services.lib.policy.domain import TurnContext
from services.lib.policy.interceptors.base import Interceptor, InterceptResult


def _join(prompt: str, addition: str) -> str:
    return f"{prompt}\n\n{addition}" if prompt else addition


class _KeepMissing(dict[str, Any]):
    """format_map values: unknown placeholders stay as written instead of raising."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


class ContextPrompt(Interceptor):
    """PRE_RUN: appends `template` with {placeholders} filled from the run context
    (plus agent, role_id, session_id and tenant_id)."""

    def __init__(self, template: str):
        # Reject broken templates at load time, not on the first turn.
        list(string.Formatter().parse(template))
        self.template = template

    def render(self, ctx: TurnContext) -> str:
        values = _KeepMissing(
            agent=ctx.scope.agent,
            role_id=ctx.scope.role_id,
            session_id=ctx.scope.session_id,
            tenant_id=ctx.scope.tenant_id,
        )
        values.update(ctx.run_context)
        return self.template.format_map(values)

    async def pre_run(self, ctx: TurnContext) -> InterceptResult:
        return InterceptResult.modify_prompt(_join(ctx.system_prompt, self.render(ctx)), "added run context")


class ConversationPrompt(Interceptor):
    """PRE_THINK: appends the instruction of the conversation's current stage (the
    stage with the highest message count not above the conversation's length)."""

    def __init__(self, stages: Mapping[int, str]):
        self.stages = sorted(stages.items())

    def current(self, ctx: TurnContext) -> str:
        length = ctx.conversation_length
        text = ""
        for count, instruction in self.stages:
            if count <= length:
                text = instruction
        return text

    async def pre_think(self, ctx: TurnContext) -> InterceptResult:
        text = self.current(ctx)
        if not text:
            return InterceptResult.ok()
        return InterceptResult.modify_prompt(_join(ctx.system_prompt, text), "added stage instruction")


PromptFn = Callable[[str, TurnContext], Any]


class LambdaPrompt(Interceptor):
    """PRE_RUN: the prompt becomes adapter_fn(prompt, ctx) (a Python entry point in YAML)."""

    def __init__(self, adapter_fn: PromptFn):
        self.adapter_fn = adapter_fn

    async def pre_run(self, ctx: TurnContext) -> InterceptResult:
        result = self.adapter_fn(ctx.system_prompt, ctx)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, str):
            raise TypeError(f"adapter_fn returned {type(result).__name__}, expected str")
        if result == ctx.system_prompt:
            return InterceptResult.ok()
        return InterceptResult.modify_prompt(result, "prompt adapted")
