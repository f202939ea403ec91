"""ContextCompressor's summarizer: the context service's CompactHistory."""

from __future__ import annotations

from collections.abc import Sequence

from cogmesh.context.v1 import context_pb2
from services.kit.clients import Clients, call
from services.lib.policy.domain import Msg, Scope
from services.lib.policy.interceptors.context import Compaction
from services.lib.policy.wire import msg_from, msg_to


class ContextServiceCompactor:
    """The interceptor hands over only the older messages (keep_recent stay out of it), so
    the limits ask the context service to fold nearly all of them: it keeps no more than
    the last exchange of that part, so a question is never cut from its answer."""

    def __init__(self, clients: Clients, summary_tokens: int = 1000):
        self.clients = clients
        self.summary_tokens = summary_tokens

    async def compact(self, scope: Scope, model: str, messages: Sequence[Msg], summary: str) -> Compaction:
        limits = context_pb2.CompactionLimits(
            max_tokens=self.summary_tokens + 2,
            context_token_limit=self.summary_tokens + 1,
            summary_token_limit=self.summary_tokens,
        )
        # force: the interceptor already decided that the older part must go.
        response = await call(
            "context",
            self.clients.context.CompactHistory,
            context_pb2.CompactHistoryRequest(
                tenant_id=scope.tenant_id,
                session_id=scope.session_id,
                agent=scope.agent,
                model=model,
                messages=[msg_to(m) for m in messages],
                summary=summary,
                limits=limits,
                force=True,
            ),
        )
        return Compaction(
            summary=response.summary,
            messages=[msg_from(m) for m in response.messages],
            summarized_messages=response.summarized_messages,
            tokens_before=response.tokens_before,
            tokens_after=response.tokens_after,
            summary_tokens=response.summary_tokens,
            archived_count=len(response.archived),
        )
