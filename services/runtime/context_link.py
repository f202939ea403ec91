"""The context service as the loop's `Compactor`, the get_tool_response tool, and per-session memory.

Compaction: before each model call the loop asks `needed` — a local estimate
(characters / 4, the same rule the context service's "chars" counter uses, with a
safety margin) — so a transcript far below its budget costs no round trip. Near
the budget, CompactHistory summarizes the older part, stores the rolling summary
in the sessions service (fenced by the turn lease) and returns the transcript to
go on with; the system prompt is then rebuilt with the new summary.

`SessionMemory` remembers, per session on this replica, the rolling summary and
how many stored messages it covers, as of the session's message count when this
replica last finished a turn there. A matching count at the next turn means no
other replica ran one since: the summary goes straight into BuildContext. Any
other count (a restart, another replica) means BuildContext rehydrates the session
from the sessions service instead.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from cogmesh.context.v1 import context_pb2
from services.kit.clients import Clients
from services.kit.dependencies import ContextClient
from services.kit.errors import CogmeshError, DependencyError
from services.lib.agents import AgentDefinition
from services.lib.llm import ChatMessage, ToolSchema
from services.runtime.policy_link import message_from_proto, message_to_proto
from services.runtime.tools.base import Tool, ToolContext, ToolError, ToolUnavailable
from services.runtime.turn import Compaction, CompactionFailed

# Compact once the estimate reaches this share of the threshold: the context service counts
# tokens exactly (tiktoken by default) and decides; the margin covers text that tokenizes
# denser than 4 characters per token.
ESTIMATE_MARGIN = 0.75
MESSAGE_OVERHEAD_TOKENS = 4
GET_TOOL_RESPONSE = ToolSchema(
    name="get_tool_response",
    description=(
        "Read the original of a tool result that was archived, because it was too long or when the "
        "conversation was summarized (its place shows a SUMMARIZED executionId:'...' marker). A long "
        "result comes in pages: each ends saying the offset of the next."
    ),
    parameters={
        "type": "object",
        "properties": {
            "execution_id": {"type": "string", "minLength": 1, "description": "The executionId from the marker."},
            "offset": {
                "type": "integer",
                "minimum": 0,
                "description": "Character to start reading at (default 0); each page says where the next starts.",
            },
        },
        "required": ["execution_id"],
        "additionalProperties": False,
    },
)
PAGE_FOOTER_CHARS = 200  # room left in a page for its footer, so a page is never over the limit itself


def estimate_tokens(messages: Sequence[ChatMessage], summary: str = "") -> int:
    chars = len(summary)
    for message in messages:
        chars += len(message.content)
        for tool_call in message.tool_calls:
            chars += len(tool_call.name) + len(json.dumps(dict(tool_call.arguments), default=str))
    return chars // 4 + MESSAGE_OVERHEAD_TOKENS * len(messages)


class ContextLink:
    """Compaction of one turn's transcript through ContextService.CompactHistory."""

    def __init__(
        self,
        clients: Clients,
        tenant_id: str,
        session_id: str,
        agent: AgentDefinition,
        lease_token: int,
        context_window: int,
        rebuild_prompt: Callable[[str], Awaitable[str]] | None = None,
    ) -> None:
        self.clients = clients
        self.tenant_id, self.session_id = tenant_id, session_id
        self.agent = agent
        self.lease_token = lease_token
        settings = agent.compaction
        self.threshold = settings.max_tokens or max(1, context_window // 2)
        self.rebuild_prompt = rebuild_prompt

    def needed(self, transcript: Sequence[ChatMessage], summary: str) -> bool:
        if not self.agent.compaction.enabled:
            return False
        return estimate_tokens(transcript, summary) >= self.threshold * ESTIMATE_MARGIN

    async def compact(self, transcript: Sequence[ChatMessage], summary: str, covered: int) -> Compaction | None:
        settings = self.agent.compaction
        request = context_pb2.CompactHistoryRequest(
            tenant_id=self.tenant_id,
            session_id=self.session_id,
            agent=self.agent.name,
            model=settings.model,
            messages=[message_to_proto(m) for m in transcript],
            summary=summary,
            limits=context_pb2.CompactionLimits(
                max_tokens=settings.max_tokens,
                context_token_limit=settings.context_token_limit,
                summary_token_limit=settings.summary_token_limit,
            ),
            store_summary=True,
            covered_message_count=covered,
            lease_token=self.lease_token,
        )
        try:
            reply = await ContextClient.of(self.clients).CompactHistory(request)
        except DependencyError as exc:
            raise CompactionFailed(f"context service: {exc.status_code.name}: {exc.status_message}") from exc
        if not reply.compacted:
            return None
        prompt = None
        if self.rebuild_prompt is not None:
            try:
                prompt = await self.rebuild_prompt(reply.summary)
            except CogmeshError:
                prompt = None  # the old prompt still works; the summary is stored for the next turn
        return Compaction(
            messages=[message_from_proto(m) for m in reply.messages],
            summary=reply.summary,
            covered=reply.covered_message_count,
            event=reply.event,
            system_prompt=prompt,
            archived=len(reply.archived) > 0,
        )


def archive_tool(clients: Clients, tenant_id: str, session_id: str, page_chars: int = 0) -> Tool:
    """get_tool_response(execution_id, offset): an archived tool result, in pages of `page_chars` (0: whole)."""
    page = max(page_chars - PAGE_FOOTER_CHARS, page_chars // 2) if page_chars else 0  # a page + footer fits

    async def run(arguments: Mapping[str, Any], context: ToolContext) -> str:
        execution_id = str(arguments.get("execution_id", ""))
        offset = arguments.get("offset", 0)
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ToolError(f"offset must be a whole number >= 0, not {offset!r}")
        try:
            reply = await ContextClient.of(clients).GetToolResponse(
                context_pb2.GetToolResponseRequest(
                    tenant_id=tenant_id, session_id=session_id, execution_id=execution_id, offset=offset, max_chars=page
                )
            )
        except DependencyError as exc:
            if exc.status_code == grpc.StatusCode.NOT_FOUND:
                raise ToolError(f"no archived tool result {execution_id!r} in this session") from exc
            if exc.status_code == grpc.StatusCode.INVALID_ARGUMENT:
                raise ToolError(exc.status_message or "invalid execution_id") from exc
            raise ToolUnavailable(str(exc)) from exc
        if not reply.next_offset and offset == 0:
            return str(reply.content)
        end = reply.next_offset or reply.total_chars
        footer = f"\n[characters {offset:,}-{end:,} of {reply.total_chars:,}"
        footer += f"; the next page starts at offset {reply.next_offset}]" if reply.next_offset else "; the end]"
        return str(reply.content) + footer

    return Tool(GET_TOOL_RESPONSE, run, source="internal", policy_checked=False)


def result_archiver(clients: Clients, tenant_id: str, session_id: str) -> Callable[[str, str, str], Awaitable[str]]:
    """Keeps a whole tool result in the context service's archive; returns its execution id."""

    async def archive(tool_name: str, call_id: str, content: str) -> str:
        reply = await ContextClient.of(clients).ArchiveToolResult(
            context_pb2.ArchiveToolResultRequest(
                tenant_id=tenant_id, session_id=session_id, tool_name=tool_name, tool_call_id=call_id, content=content
            )
        )
        return str(reply.execution_id)

    return archive


@dataclass(frozen=True)
class Memory:
    summary: str
    covered: int  # stored messages the summary covers
    message_count: int  # the session's message count when this was remembered


class SessionMemory:
    """Per-session summaries this replica knows are current (least recently used dropped first)."""

    def __init__(self, max_sessions: int = 10_000) -> None:
        self.max_sessions = max_sessions
        self._known: OrderedDict[str, Memory] = OrderedDict()

    def get(self, session_id: str, message_count: int) -> Memory | None:
        """The remembered summary when nothing was stored since (same message count), else None."""
        known = self._known.get(session_id)
        if known is None or known.message_count != message_count:
            return None
        self._known.move_to_end(session_id)
        return known

    def put(self, session_id: str, memory: Memory) -> None:
        self._known[session_id] = memory
        self._known.move_to_end(session_id)
        while len(self._known) > self.max_sessions:
            self._known.popitem(last=False)

    def forget(self, session_id: str) -> None:
        self._known.pop(session_id, None)
