"""TokenLimiter and ContextCompressor: keep what goes to the model within a token size."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from services.lib.policy.domain import Msg, Notice, Scope, TurnContext
from services.lib.policy.interceptors.base import Interceptor, InterceptResult
from services.lib.tokens import CharRatioCounter, TokenCounter

# Marks the message that carries the rolling summary, so the next compaction folds it in.
SUMMARY_PREFIX = "[Summary of the earlier conversation]\n"


def count_tokens(counter: TokenCounter, prompt: str, messages: Sequence[Msg]) -> int:
    total = counter.count(prompt)
    for message in messages:
        total += counter.count(message.content)
        for call in message.tool_calls:
            total += counter.count(call.name) + counter.count(json.dumps(dict(call.arguments), default=str))
    return total


class TokenLimiter(Interceptor):
    """Hard stop before a model call whose prompt and messages exceed max_tokens."""

    def __init__(
        self,
        max_tokens: int,
        message: str = "Context too large. Please start a new conversation.",
        exit_behavior: Literal["stop", "error"] = "error",
        counter: TokenCounter | None = None,
    ):
        self.max_tokens = max_tokens
        self.message = message
        self.exit_behavior = exit_behavior
        self.counter = counter or CharRatioCounter()

    async def pre_think(self, ctx: TurnContext) -> InterceptResult:
        used = count_tokens(self.counter, ctx.system_prompt, ctx.messages)
        if used <= self.max_tokens:
            return InterceptResult.ok()
        ctx.status(f"{self.label}: {used} tokens exceed the limit of {self.max_tokens}", interceptor=self.label)
        return InterceptResult.stop(self.message, "budget_exceeded" if self.exit_behavior == "error" else None)


@dataclass(frozen=True)
class Compaction:
    summary: str
    # What the compactor kept live from the messages it was given, oldest first.
    messages: list[Msg]
    summarized_messages: int
    tokens_before: int
    tokens_after: int
    summary_tokens: int
    archived_count: int


class Compactor(Protocol):
    """Summarizes older messages; the context service's CompactHistory in production."""

    async def compact(self, scope: Scope, model: str, messages: Sequence[Msg], summary: str) -> Compaction: ...


class ContextCompressor(Interceptor):
    """Above threshold_tokens, folds all but the keep_recent newest messages into a summary."""

    fail = "continue"  # a summarizer outage must not end turns that still fit the model

    def __init__(
        self,
        compactor: Compactor | None,
        threshold_tokens: int = 8000,
        keep_recent: int = 4,
        counter: TokenCounter | None = None,
    ):
        self.compactor = compactor
        self.threshold_tokens = threshold_tokens
        self.keep_recent = keep_recent
        self.counter = counter or CharRatioCounter()

    async def pre_think(self, ctx: TurnContext) -> InterceptResult:
        used = count_tokens(self.counter, ctx.system_prompt, ctx.messages)
        if used <= self.threshold_tokens:
            return InterceptResult.ok()
        if self.compactor is None:
            raise RuntimeError("no summarizer is configured (the context service address is missing)")
        messages = list(ctx.messages)
        summary = ""
        if messages and messages[0].role == "system" and messages[0].content.startswith(SUMMARY_PREFIX):
            summary = messages.pop(0).content.removeprefix(SUMMARY_PREFIX)
        cut = split_point(messages, self.keep_recent)
        older, recent = messages[:cut], messages[cut:]
        if not older:
            return InterceptResult.ok()
        done = await self.compactor.compact(ctx.scope, ctx.model, older, summary)
        compacted = [Msg("system", SUMMARY_PREFIX + done.summary), *done.messages, *recent]
        after = count_tokens(self.counter, ctx.system_prompt, compacted)
        ctx.notices.append(_compacted_notice(done))
        detail = f"summarized {done.summarized_messages} message(s): {used} -> {after} tokens"
        return InterceptResult.modify_messages(compacted, detail)


def _compacted_notice(done: Compaction) -> Notice:
    return Notice(
        "compacted",
        f"summarized {done.summarized_messages} older message(s)",
        {"summary_tokens": done.summary_tokens, "archived_count": done.archived_count},
    )


def split_point(messages: Sequence[Msg], keep_recent: int) -> int:
    """Index where the kept tail starts: at least keep_recent messages, never starting
    with a tool result whose assistant call would be summarized away."""
    cut = max(0, len(messages) - keep_recent)
    while 0 < cut < len(messages) and messages[cut].role == "tool":
        cut -= 1
    return cut
