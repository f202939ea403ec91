"""ContextService over the builder and the compactor: validate, convert, delegate."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from google.protobuf import json_format

from cogmesh.common.v1 import errors_pb2, events_pb2, messages_pb2
from cogmesh.context.v1 import context_pb2, context_pb2_grpc
from cogmesh.models.v1 import models_pb2
from services.context import sessions_link
from services.context.archive import ArchiveFull, ArchiveUnavailable, ToolArchive
from services.context.builder import ContextBudget, ContextBuilder, ContextInput
from services.context.compaction import CompactionLimits, Compactor, Message, ToolCallRef
from services.context.rehydration import DEFAULT_LAST_N, RehydrationReport, rehydrate
from services.context.summarizer import ModelFactory, SummarizerError, summarizer_for
from services.kit.agents import AgentDefinition, AgentRegistry, UnknownAgentError
from services.kit.clients import Clients, call
from services.kit.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
    Violations,
)

_ACTIONS = {
    "kept": context_pb2.PACK_ACTION_KEPT,
    "truncated": context_pb2.PACK_ACTION_TRUNCATED,
    "dropped": context_pb2.PACK_ACTION_DROPPED,
}
_ROLES = {
    messages_pb2.ROLE_USER: "user",
    messages_pb2.ROLE_ASSISTANT: "assistant",
    messages_pb2.ROLE_SYSTEM: "system",
    messages_pb2.ROLE_TOOL: "tool",
}
_CAP_FIELDS = [f.name for f in dataclasses.fields(ContextBudget) if f.name != "total_tokens"]
_LIMIT_FIELDS = [f.name for f in dataclasses.fields(CompactionLimits)]
MAX_TEXT = 1 << 20
MAX_MESSAGES = 10_000
MAX_LAST_N = 1000
MAX_RECALLED = 50
MAX_RECALLED_TEXT = 64 << 10
MAX_MEMORY_KEY = 256
ROLE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def budget_from_proto(budget: context_pb2.ContextBudget, problems: Violations) -> ContextBudget:
    """Zero keeps a field's default (never above the total); negative values and caps above the total are reported."""
    defaults = ContextBudget()
    problems.check(budget.total_tokens >= 0, "budget.total_tokens", "must be >= 0")
    total = budget.total_tokens if budget.total_tokens > 0 else defaults.total_tokens
    values = {"total_tokens": total}
    for name in _CAP_FIELDS:
        value = getattr(budget, name)
        problems.check(value >= 0, f"budget.{name}", "must be >= 0")
        problems.check(
            value <= total,
            f"budget.{name}",
            f"must not exceed budget.total_tokens ({total}): a pack cannot be larger than the whole budget",
        )
        values[name] = value if value > 0 else min(getattr(defaults, name), total)
    return defaults if problems.items else ContextBudget(**values)


def _check_text_sizes(request: Any, names: tuple[str, ...], problems: Violations) -> None:
    for name in names:
        problems.check(len(getattr(request, name)) <= MAX_TEXT, name, "must be at most 1 MiB")


def _check_recalled(memories: Any, problems: Violations) -> None:
    problems.check(len(memories) <= MAX_RECALLED, "recalled_memories", f"must hold at most {MAX_RECALLED}")
    for i, memory in enumerate(memories[:MAX_RECALLED]):
        problems.check(bool(memory.text.strip()), f"recalled_memories[{i}].text", "must not be empty")
        problems.check(len(memory.text) <= MAX_RECALLED_TEXT, f"recalled_memories[{i}].text", "must be at most 64 KiB")
        problems.check(
            len(memory.key) <= MAX_MEMORY_KEY,
            f"recalled_memories[{i}].key",
            f"must be at most {MAX_MEMORY_KEY} characters",
        )


def message_from_proto(message: messages_pb2.Message) -> Message:
    return Message(
        role=_ROLES[message.role],  # type: ignore[arg-type]
        content=message.content,
        tool_calls=tuple(
            ToolCallRef(c.id, c.name, json.dumps(json_format.MessageToDict(c.arguments), sort_keys=True))
            for c in message.tool_calls
        ),
        tool_call_id=message.tool_call_id,
        name=message.name,
        turn_id=message.turn_id,
    )


def _report_to_proto(report: RehydrationReport) -> context_pb2.Rehydration:
    return context_pb2.Rehydration(
        role_id=report.role_id,
        active_skill_ids=list(report.active_skill_ids),
        previous_prompt_hash=report.previous_prompt_hash,
        summary_loaded=report.summary_loaded,
        messages_loaded=report.messages_loaded,
        goal_loaded=report.goal_loaded,
        phase_loaded=report.phase_loaded,
        unavailable=list(report.unavailable),
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
        try:
            return self.agents.get(name)
        except UnknownAgentError as exc:
            raise NotFound(str(exc), reason=errors_pb2.ERROR_REASON_AGENT_NOT_FOUND, metadata={"agent": name}) from exc

    async def BuildContext(
        self, request: context_pb2.BuildContextRequest, context: Any
    ) -> context_pb2.BuildContextResponse:
        problems = Violations()
        problems.require(request.agent, "agent")
        _check_text_sizes(request, ("user_text", "goal", "phase", "summary"), problems)
        problems.check(
            not request.role_id or ROLE_ID.fullmatch(request.role_id) is not None,
            "role_id",
            "must be 1-64 letters, digits, '_' or '-', starting with a letter or digit",
        )
        if request.rehydrate:
            problems.require(request.tenant_id, "tenant_id")
            problems.require(request.session_id, "session_id")
        problems.check(
            0 <= request.rehydrate_last_n <= MAX_LAST_N, "rehydrate_last_n", f"must be between 0 and {MAX_LAST_N}"
        )
        _check_recalled(request.recalled_memories, problems)
        budget = budget_from_proto(request.budget, problems)
        problems.raise_if_any()
        agent = self._agent(request.agent)
        inp = ContextInput(
            agent=agent,
            role_id=request.role_id,
            user_text=request.user_text,
            goal=request.goal,
            phase=request.phase,
            skill_instructions=tuple(request.skill_instructions),
            last_messages=tuple(sessions_link.recalled_text(m) for m in request.last_messages),
            memory=dict(request.memory),
            user_profile=dict(request.user_profile),
            summary=request.summary,
            recalled_memories=tuple((m.key, m.text) for m in request.recalled_memories),
            budget=budget,
        )
        report: RehydrationReport | None = None
        if request.rehydrate:
            payload = await sessions_link.load_payload(
                self.clients, request.tenant_id, request.session_id, request.rehydrate_last_n or DEFAULT_LAST_N
            )
            if payload.role_id and not ROLE_ID.fullmatch(payload.role_id):
                raise FailedPrecondition(f"session {request.session_id!r} stores an invalid role_id")
            if request.rehydrate_without_messages:
                payload = dataclasses.replace(payload, last_messages=())
            inp, report = rehydrate(inp, payload)
        built = self.builder.build(inp)
        fixed = sum(p.tokens for p in built.packs if p.priority in ("P0", "P0.5"))
        if request.budget.total_tokens > 0 and fixed > budget.total_tokens:
            raise InvalidArgument(
                [
                    (
                        "budget.total_tokens",
                        f"must be at least {fixed}: agent {agent.name!r}'s identity, guardrails and role "
                        f"instructions are never dropped and need {fixed} tokens",
                    )
                ]
            )
        return context_pb2.BuildContextResponse(
            system_prompt=built.system_prompt,
            prompt_hash=built.prompt_hash,
            packs=[
                context_pb2.PackReport(name=p.name, priority=p.priority, tokens=p.tokens, action=_ACTIONS[p.action])
                for p in built.packs
            ],
            truncated_packs=list(built.truncated_packs),
            tokens_used=built.tokens_used,
            tool_budget_tokens=built.tool_budget,
            rehydration=_report_to_proto(report) if report is not None else None,
        )

    async def CompactHistory(
        self, request: context_pb2.CompactHistoryRequest, context: Any
    ) -> context_pb2.CompactHistoryResponse:
        problems = Violations()
        for name in ("tenant_id", "session_id", "agent"):
            problems.require(getattr(request, name), name)
        _check_text_sizes(request, ("summary",), problems)
        problems.check(len(request.model) <= 256, "model", "must be at most 256 characters")
        problems.check(len(request.messages) <= MAX_MESSAGES, "messages", f"must hold at most {MAX_MESSAGES}")
        for i, message in enumerate(request.messages):
            problems.check(message.role in _ROLES, f"messages[{i}].role", "must be set")
            problems.check(len(message.content) <= MAX_TEXT, f"messages[{i}].content", "must be at most 1 MiB")
        for name in _LIMIT_FIELDS:
            problems.check(getattr(request.limits, name) >= 0, f"limits.{name}", "must be >= 0")
        problems.check(request.covered_message_count >= 0, "covered_message_count", "must be >= 0")
        problems.raise_if_any()
        agent = self._agent(request.agent)
        resolved = await call(
            "models",
            self.clients.models.ResolveModel,
            models_pb2.ResolveModelRequest(name=request.model or agent.model),
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
        problems = Violations()
        _check_archive_ids(request, ("tenant_id", "session_id", "execution_id"), problems)
        problems.check(request.offset >= 0, "offset", "must be >= 0")
        problems.check(request.max_chars >= 0, "max_chars", "must be >= 0 (0: the whole rest)")
        problems.raise_if_any()
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
        problems = Violations()
        _check_archive_ids(request, ("tenant_id", "session_id", "tool_call_id"), problems)
        problems.check(len(request.tool_name) <= 256, "tool_name", "must be at most 256 characters")
        problems.require(request.content, "content")
        problems.raise_if_any()
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


def _check_archive_ids(request: Any, names: tuple[str, ...], problems: Violations) -> None:
    for name in names:
        problems.require(getattr(request, name), name)
        problems.check(len(getattr(request, name)) <= 256, name, "must be at most 256 characters")
