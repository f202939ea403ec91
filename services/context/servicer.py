"""ContextService over the builder and the compactor: validate, convert, delegate.

BuildContext is the library's (services/lib/context/api.py), which the runtime also answers
in process; this service adds rehydration from the sessions service, compaction and the archive.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from google.protobuf import json_format

from cogmesh.common.v1 import errors_pb2, events_pb2, messages_pb2
from cogmesh.context.v1 import context_pb2, context_pb2_grpc
from cogmesh.models.v1 import models_pb2
from services.context import sessions_link
from services.context.archive import ArchiveFull, ArchiveUnavailable, ToolArchive
from services.context.compaction import CompactionLimits, Compactor, Message, ToolCallRef
from services.context.summarizer import ModelFactory, SummarizerError, summarizer_for
from services.kit.clients import Clients, call
from services.kit.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
    Violations,
)
from services.lib.agents import AgentDefinition, AgentRegistry
from services.lib.context.api import MAX_TEXT, ROLE_NAMES, agent_of, build_context
from services.lib.context.builder import ContextBuilder
from services.lib.context.rehydration import RehydrationPayload

_LIMIT_FIELDS = [f.name for f in dataclasses.fields(CompactionLimits)]


def message_from_proto(message: messages_pb2.Message) -> Message:
    return Message(
        role=ROLE_NAMES[message.role],  # type: ignore[arg-type]
        content=message.content,
        tool_calls=tuple(
            ToolCallRef(c.id, c.name, json.dumps(json_format.MessageToDict(c.arguments), sort_keys=True))
            for c in message.tool_calls
        ),
        tool_call_id=message.tool_call_id,
        name=message.name,
        turn_id=message.turn_id,
    )


class ContextServicer(context_pb2_grpc.ContextServiceServicer):
    def __init__(
        self,
        agents: AgentRegistry,
        builder: ContextBuilder,
        compactor: Compactor,
        archive: ToolArchive,
        clients: Clients,
        model_factory: ModelFactory | None = None,
    ):
        self.agents, self.builder, self.compactor, self.archive = agents, builder, compactor, archive
        self.clients, self.model_factory = clients, model_factory

    def _agent(self, name: str) -> AgentDefinition:
        return agent_of(self.agents, name)

    async def _load_payload(self, tenant: str, session_id: str, last_n: int) -> RehydrationPayload:
        return await sessions_link.load_payload(self.clients, tenant, session_id, last_n)

    async def BuildContext(
        self, request: context_pb2.BuildContextRequest, context: Any
    ) -> context_pb2.BuildContextResponse:
        return await build_context(self.builder, self.agents, request, self._load_payload)

    async def CompactHistory(
        self, request: context_pb2.CompactHistoryRequest, context: Any
    ) -> context_pb2.CompactHistoryResponse:
        problems = Violations()
        # Message is also what the service answers and events carry: its fields have no rules of their own.
        for i, message in enumerate(request.messages):
            problems.check(message.role in ROLE_NAMES, f"messages[{i}].role", "must be set")
            problems.check(len(message.content) <= MAX_TEXT, f"messages[{i}].content", "must be at most 1 MiB")
        problems.raise_if_any()
        # The agent only names the model when the request does not (a tenant's stored agent is unknown here).
        resolved = await call(
            "models",
            self.clients.models.ResolveModel,
            models_pb2.ResolveModelRequest(name=request.model or self._agent(request.agent).model),
        )
        model = resolved.model
        limits = CompactionLimits.derive(model.context_window, **{n: getattr(request.limits, n) for n in _LIMIT_FIELDS})
        problems.items.extend((f"limits.{name}", problem) for name, problem in limits.problems())
        problems.raise_if_any()

        messages = [message_from_proto(m) for m in request.messages]
        summarizer = summarizer_for(model.provider, model.id, self.builder.counter, self.model_factory)
        try:
            result = await self.compactor.compact(
                tenant=request.tenant_id,
                session=request.session_id,
                messages=messages,
                summary=request.summary,
                limits=limits,
                summarizer=summarizer,
                force=request.force,
            )
        except SummarizerError as exc:
            if exc.retryable:
                raise Unavailable(str(exc), metadata={"summarizer": summarizer.name, "retryable": "true"}) from exc
            raise FailedPrecondition(str(exc), metadata={"summarizer": summarizer.name}) from exc
        except ArchiveFull as exc:
            raise ResourceExhausted(str(exc)) from exc
        except ArchiveUnavailable as exc:
            raise Unavailable(str(exc), metadata={"dependency": "redis", "retryable": "true"}) from exc

        covered = request.covered_message_count + result.summarized_messages
        stored = False
        if result.compacted and request.store_summary:
            stored = await sessions_link.store_summary(
                self.clients, request.tenant_id, request.session_id, result.summary, covered, request.lease_token
            )
        # The kept messages are a suffix of the request's: copy them so ids, times and turns survive.
        offset = len(request.messages) - len(result.messages)
        kept = []
        for i, compacted in enumerate(result.messages):
            original = messages_pb2.Message()
            original.CopyFrom(request.messages[offset + i])
            original.content = compacted.content
            kept.append(original)
        return context_pb2.CompactHistoryResponse(
            compacted=result.compacted,
            summary=result.summary,
            messages=kept,
            archived=[
                context_pb2.ArchivedToolResult(
                    execution_id=a.execution_id,
                    tool_name=a.tool_name,
                    tool_call_id=a.tool_call_id,
                    tokens=a.tokens,
                    marker=a.marker,
                )
                for a in result.archived
            ],
            summarized_messages=result.summarized_messages,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
            chunks=result.chunks,
            summarizer=result.summarizer,
            event=events_pb2.ContextCompacted(summary_tokens=result.summary_tokens, archived_count=len(result.archived))
            if result.compacted
            else None,
            summary_stored=stored,
            summary_tokens=result.summary_tokens,
            covered_message_count=covered if result.compacted else request.covered_message_count,
        )

    async def GetToolResponse(
        self, request: context_pb2.GetToolResponseRequest, context: Any
    ) -> context_pb2.GetToolResponseResponse:
        try:
            found = await self.archive.get(request.tenant_id, request.session_id, request.execution_id)
        except ArchiveUnavailable as exc:
            raise Unavailable(str(exc), metadata={"dependency": "redis", "retryable": "true"}) from exc
        if found is None:
            raise NotFound(
                f"no archived tool result {request.execution_id!r} in session {request.session_id!r}",
                reason=errors_pb2.ERROR_REASON_TOOL_RESULT_NOT_FOUND,
                metadata={"execution_id": request.execution_id, "session_id": request.session_id},
            )
        total = len(found.content)
        if request.offset > total:
            raise InvalidArgument([("offset", f"must be at most {total}, the length of the archived result")])
        end = total if request.max_chars == 0 else min(total, request.offset + request.max_chars)
        return context_pb2.GetToolResponseResponse(
            execution_id=found.execution_id,
            tool_name=found.tool_name,
            tool_call_id=found.tool_call_id,
            content=found.content[request.offset : end],
            total_chars=total,
            next_offset=end if end < total else 0,
        )

    async def ArchiveToolResult(
        self, request: context_pb2.ArchiveToolResultRequest, context: Any
    ) -> context_pb2.ArchiveToolResultResponse:
        try:
            execution_id = await self.archive.put(
                request.tenant_id,
                request.session_id,
                request.tool_call_id,
                request.tool_name,
                request.tool_call_id,
                request.content,
            )
        except ArchiveUnavailable as exc:
            raise Unavailable(str(exc), metadata={"dependency": "redis", "retryable": "true"}) from exc
        except ArchiveFull as exc:
            raise FailedPrecondition(str(exc)) from exc
        return context_pb2.ArchiveToolResultResponse(execution_id=execution_id)
