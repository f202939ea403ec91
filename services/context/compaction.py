"""Compaction: keep a long transcript within its token budget by summarizing its older part.

The lifecycle, for one call of ``compact``:

1. Estimate the tokens of the transcript plus the rolling summary. Within
   ``max_tokens`` (and not forced) nothing changes.
2. Keep the newest messages verbatim: always the current exchange (from the
   last user message on), then older exchanges while they fit in
   ``context_token_limit - summary_token_limit``. Cuts fall between *groups*:
   a group is a user message, or an assistant message together with the tool
   results answering its tool calls, so a tool call is never separated from
   its result.
3. Archive every tool result of the older part (and, if the kept part alone is
   still too large, the kept part's tool results, oldest first): the original
   goes to the ``ToolArchive`` and a ``SUMMARIZED executionId:'…'`` marker
   takes its place.
4. Cut the older part into chunks of at most ``chunk_tokens``, whole groups
   per chunk, and summarize every chunk with the ``Summarizer`` (the agent's
   model), a few at a time.
5. Merge the partial summaries one after the other into the rolling summary,
   each merge within ``summary_token_limit``.
6. Report the new summary, the kept transcript, the archived results and the
   sizes, which the runtime emits as a context_compacted event.

Plain domain code: no gRPC. Token sizes come from one ``TokenCounter``; a
message costs its rendered text plus ``MESSAGE_OVERHEAD`` tokens, roughly what
chat formats add per message.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from services.context.archive import ToolArchive, is_marker, marker
from services.context.summarizer import Summarizer
from services.lib.context.builder import truncate
from services.lib.tokens import TokenCounter

MESSAGE_OVERHEAD = 4
SUMMARY_CONCURRENCY = 4
DEFAULT_SUMMARY_TOKENS = 1000

MessageRole = Literal["user", "assistant", "system", "tool"]


@dataclass(frozen=True)
class ToolCallRef:
    id: str
    name: str
    arguments_json: str = "{}"


@dataclass(frozen=True)
class Message:
    role: MessageRole
    content: str = ""
    tool_calls: tuple[ToolCallRef, ...] = ()
    tool_call_id: str = ""
    name: str = ""
    turn_id: str = ""


@dataclass(frozen=True)
class CompactionLimits:
    """Token limits of compaction (the seed's maxToken, contextTokenLimit and summaryTokenLimit)."""

    max_tokens: int
    context_token_limit: int
    summary_token_limit: int
    chunk_tokens: int

    @classmethod
    def derive(
        cls,
        context_window: int,
        max_tokens: int = 0,
        context_token_limit: int = 0,
        summary_token_limit: int = 0,
        chunk_tokens: int = 0,
    ) -> CompactionLimits:
        """Fill the zero fields with defaults derived from the model's context window."""
        max_tokens = max_tokens or max(1, context_window // 2)
        context_token_limit = context_token_limit or max(1, max_tokens // 2)
        summary_token_limit = summary_token_limit or max(1, min(DEFAULT_SUMMARY_TOKENS, context_token_limit // 4))
        chunk_tokens = chunk_tokens or summary_token_limit * 4
        return cls(max_tokens, context_token_limit, summary_token_limit, chunk_tokens)

    def problems(self) -> list[tuple[str, str]]:
        """(field, problem) pairs; empty when the limits are consistent."""
        out = [(name, "must be > 0") for name, value in vars(self).items() if value <= 0]
        if out:
            return out
        if self.context_token_limit > self.max_tokens:
            out.append(("context_token_limit", f"must not exceed max_tokens ({self.max_tokens})"))
        if self.summary_token_limit >= self.context_token_limit:
            out.append(
                (
                    "summary_token_limit",
                    f"must be below context_token_limit ({self.context_token_limit}): the summary shares that budget",
                )
            )
        return out


@dataclass(frozen=True)
class Archived:
    execution_id: str
    tool_name: str
    tool_call_id: str
    tokens: int
    marker: str


@dataclass(frozen=True)
class Compaction:
    compacted: bool
    summary: str
    messages: tuple[Message, ...]
    archived: tuple[Archived, ...] = ()
    summarized_messages: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    summary_tokens: int = 0
    chunks: int = 0
    summarizer: str = ""


@dataclass
class _Group:
    messages: list[Message] = field(default_factory=list)


class Compactor:
    def __init__(self, counter: TokenCounter, archive: ToolArchive) -> None:
        self._counter = counter
        self._archive = archive

    def message_tokens(self, message: Message) -> int:
        return self._counter.count(render(message)) + MESSAGE_OVERHEAD

    def transcript_tokens(self, messages: Sequence[Message], summary: str) -> int:
        return sum(self.message_tokens(m) for m in messages) + self._counter.count(summary)

    async def compact(
        self,
        *,
        tenant: str,
        session: str,
        messages: Sequence[Message],
        summary: str,
        limits: CompactionLimits,
        summarizer: Summarizer,
        force: bool = False,
    ) -> Compaction:
        before = self.transcript_tokens(messages, summary)
        unchanged = Compaction(False, summary, tuple(messages), tokens_before=before, tokens_after=before)
        unchanged = replace(unchanged, summary_tokens=self._counter.count(summary), summarizer=summarizer.name)
        if before <= limits.max_tokens and not force:
            return unchanged

        groups = _groups(messages)
        room = limits.context_token_limit - limits.summary_token_limit
        split = self._split(groups, room)
        older = [m for g in groups[:split] for m in g.messages]
        kept = [m for g in groups[split:] for m in g.messages]
        archived: list[Archived] = []
        kept = await self._archive_until_fits(tenant, session, kept, room, archived)
        if not older and not archived:
            return unchanged

        chunks = self._chunks(await self._archive_older(tenant, session, older, archived), limits.chunk_tokens)
        partials = await _bounded_gather(
            [summarizer.summarize(chunk, limits.summary_token_limit) for chunk in chunks], SUMMARY_CONCURRENCY
        )
        merged = summary.strip()
        for partial in partials:
            merged = await self._merge(summarizer, merged, partial.strip(), limits.summary_token_limit)
        merged = truncate(merged, lambda text: self._counter.count(text) <= limits.summary_token_limit)
        summary_tokens = self._counter.count(merged)
        return Compaction(
            compacted=True,
            summary=merged,
            messages=tuple(kept),
            archived=tuple(archived),
            summarized_messages=len(older),
            tokens_before=before,
            tokens_after=sum(self.message_tokens(m) for m in kept) + summary_tokens,
            summary_tokens=summary_tokens,
            chunks=len(chunks),
            summarizer=summarizer.name,
        )

    def _split(self, groups: list[_Group], room: int) -> int:
        """Index of the first kept group: the current exchange, then whole older exchanges while they fit.

        An exchange starts at a user message, so the kept transcript never opens
        with an answer whose question was summarized away. A transcript without
        user messages is split between groups instead.
        """
        starts = [i for i, g in enumerate(groups) if g.messages[0].role == "user"] or list(range(len(groups)))
        split = starts.pop() if starts else 0
        used = sum(self.message_tokens(m) for g in groups[split:] for m in g.messages)
        while starts:
            previous = starts[-1]
            cost = sum(self.message_tokens(m) for g in groups[previous:split] for m in g.messages)
            if used + cost > room:
                break
            used += cost
            split = starts.pop()
        return split

    async def _archive_until_fits(
        self, tenant: str, session: str, kept: list[Message], room: int, archived: list[Archived]
    ) -> list[Message]:
        """Replace the kept part's tool results by markers, oldest first, while it is over ``room``."""
        used = sum(self.message_tokens(m) for m in kept)
        out = list(kept)
        for i, message in enumerate(out):
            if used <= room:
                break
            if message.role != "tool" or is_marker(message.content):
                continue
            replacement = await self._archive_one(tenant, session, message, archived)
            used += self.message_tokens(replacement) - self.message_tokens(message)
            out[i] = replacement
        return out

    async def _archive_older(
        self, tenant: str, session: str, older: list[Message], archived: list[Archived]
    ) -> list[list[str]]:
        """Archive the older part's tool results; returns its groups rendered for the summarizer.

        An archived result is shown to the summarizer with its original text
        and the execution id, so the summary can point at it.
        """
        rendered: list[list[str]] = []
        for message in older:
            text = render(message)
            if message.role == "tool" and not is_marker(message.content):
                await self._archive_one(tenant, session, message, archived)
                execution_id = archived[-1].execution_id
                text = f"tool {message.name or 'result'} [executionId:'{execution_id}']: {message.content}"
            if message.role == "tool" and rendered:
                rendered[-1].append(text)
            else:
                rendered.append([text])
        return rendered

    async def _archive_one(self, tenant: str, session: str, message: Message, archived: list[Archived]) -> Message:
        preferred = message.tool_call_id or f"result-{len(archived) + 1}"
        execution_id = await self._archive.put(
            tenant, session, preferred, message.name, message.tool_call_id, message.content
        )
        text = marker(execution_id, message.name)
        tokens = self._counter.count(message.content)
        archived.append(Archived(execution_id, message.name, message.tool_call_id, tokens, text))
        return replace(message, content=text)

    def _chunks(self, groups: list[list[str]], chunk_tokens: int) -> list[str]:
        """Rendered transcript chunks of at most ``chunk_tokens``, whole groups each."""
        chunks: list[str] = []
        current: list[str] = []
        used = 0
        for group in groups:
            text = "\n".join(group)
            cost = self._counter.count(text)
            if cost > chunk_tokens:
                # A group larger than a chunk is cut to fit; its tool results are archived already.
                text = truncate(text, lambda t: self._counter.count(t) <= chunk_tokens)
                cost = self._counter.count(text)
            if current and used + cost > chunk_tokens:
                chunks.append("\n".join(current))
                current, used = [], 0
            current.append(text)
            used += cost
        if current:
            chunks.append("\n".join(current))
        return chunks

    async def _merge(self, summarizer: Summarizer, older: str, newer: str, limit: int) -> str:
        if not older:
            return newer
        if not newer:
            return older
        joined = f"{older}\n{newer}"
        # Two summaries that fit together need no model call.
        if self._counter.count(joined) <= limit:
            return joined
        return await summarizer.merge(older, newer, limit)


def render(message: Message) -> str:
    """One line of transcript as the summarizer and the token estimate see it."""
    if message.role == "tool":
        return f"tool {message.name or 'result'}: {message.content}"
    calls = "; ".join(f"{call.name} {_compact_json(call.arguments_json)}" for call in message.tool_calls)
    if not calls:
        return f"{message.role}: {message.content}"
    if not message.content.strip():
        return f"{message.role} calls {calls}"
    return f"{message.role}: {message.content} [calls {calls}]"


def _compact_json(arguments_json: str) -> str:
    try:
        return json.dumps(json.loads(arguments_json), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except ValueError:
        return arguments_json


def _groups(messages: Sequence[Message]) -> list[_Group]:
    """Split a transcript into groups; tool results join the group of the call they answer."""
    groups: list[_Group] = []
    for message in messages:
        if message.role == "tool" and groups:
            groups[-1].messages.append(message)
        else:
            groups.append(_Group([message]))
    return groups


async def _bounded_gather(calls: list[Coroutine[Any, Any, str]], limit: int) -> list[str]:
    """Run ``calls`` at most ``limit`` at a time; the first failure cancels the rest."""
    semaphore = asyncio.Semaphore(limit)

    async def run(call: Coroutine[Any, Any, str]) -> str:
        async with semaphore:
            return await call

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(run(call)) for call in calls]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [task.result() for task in tasks]
