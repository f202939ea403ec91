"""ContextService's BuildContext over a builder: request validation, proto <-> domain, the response.

The context service answers the RPC with it, and the runtime answers the same requests in
process (services/runtime/local_context.py), so a prompt built either way is the same
prompt, hash, token counts and pack report, and a bad request fails with the same error.

Rehydration reads the session from the sessions service: that part is the caller's
(`load_payload`); a caller without one answers only requests that do not ask for it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable
from typing import Any

from cogmesh.common.v1 import errors_pb2, messages_pb2
from cogmesh.context.v1 import context_pb2
from services.kit.errors import FailedPrecondition, InvalidArgument, NotFound, Violations
from services.lib.agents import AgentDefinition, AgentRegistry, UnknownAgentError, agent_from_json
from services.lib.context.builder import ContextBudget, ContextBuilder, ContextInput
from services.lib.context.rehydration import DEFAULT_LAST_N, RehydrationPayload, RehydrationReport, rehydrate

ACTIONS = {
    "kept": context_pb2.PACK_ACTION_KEPT,
    "truncated": context_pb2.PACK_ACTION_TRUNCATED,
    "dropped": context_pb2.PACK_ACTION_DROPPED,
}
ROLE_NAMES = {
    messages_pb2.ROLE_USER: "user",
    messages_pb2.ROLE_ASSISTANT: "assistant",
    messages_pb2.ROLE_SYSTEM: "system",
    messages_pb2.ROLE_TOOL: "tool",
}
_CAP_FIELDS = [f.name for f in dataclasses.fields(ContextBudget) if f.name != "total_tokens"]
MAX_TEXT = 1 << 20  # characters of a free text (context.proto's rules say it of the requests' own fields)
ROLE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")

# (tenant_id, session_id, last_n) -> the session's rehydration payload.
PayloadLoader = Callable[[str, str, int], Awaitable[RehydrationPayload]]


def budget_from_proto(budget: context_pb2.ContextBudget, problems: Violations) -> ContextBudget:
    """Zero keeps a field's default (never above the total); caps above the total are reported (a negative
    value is refused by the request's rules)."""
    defaults = ContextBudget()
    total = budget.total_tokens if budget.total_tokens > 0 else defaults.total_tokens
    values = {"total_tokens": total}
    for name in _CAP_FIELDS:
        value = getattr(budget, name)
        problems.check(
            value <= total,
            f"budget.{name}",
            f"must not exceed budget.total_tokens ({total}): a pack cannot be larger than the whole budget",
        )
        values[name] = value if value > 0 else min(getattr(defaults, name), total)
    return defaults if problems.items else ContextBudget(**values)


def check_recalled(memories: Any, problems: Violations) -> None:
    """Beyond the rules of RecalledMemory (context.proto: at most 50, a text of 1 to 65536 characters, a key)."""
    for i, memory in enumerate(memories):
        problems.check(bool(memory.text.strip()), f"recalled_memories[{i}].text", "must not be blank")


def recalled_text(message: messages_pb2.Message) -> tuple[str, str]:
    """(role, text) of a message for the recent-messages pack; tool calls are named."""
    role = ROLE_NAMES.get(message.role, "user")
    text = message.content
    calls = ", ".join(call.name for call in message.tool_calls)
    if calls:
        text = f"{text} [called {calls}]".strip()
    if role == "tool" and message.name:
        role = f"tool {message.name}"
    return role, text


def report_to_proto(report: RehydrationReport) -> context_pb2.Rehydration:
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


def agent_of(agents: AgentRegistry, name: str) -> AgentDefinition:
    try:
        return agents.get(name)
    except UnknownAgentError as exc:
        raise NotFound(str(exc), reason=errors_pb2.ERROR_REASON_AGENT_NOT_FOUND, metadata={"agent": name}) from exc


def stored_agent(request: context_pb2.BuildContextRequest) -> AgentDefinition:
    """A tenant's stored agent, from the definition the request carries."""
    try:
        return agent_from_json(request.agent, request.agent_definition_json)
    except ValueError as exc:
        raise InvalidArgument([("agent_definition_json", str(exc))]) from exc


async def build_context(
    builder: ContextBuilder,
    agents: AgentRegistry,
    request: context_pb2.BuildContextRequest,
    load_payload: PayloadLoader | None = None,
) -> context_pb2.BuildContextResponse:
    """BuildContext's answer; raises the kit's errors (INVALID_ARGUMENT naming the field, NOT_FOUND, ...).

    A request with `rehydrate` needs `load_payload`: without one it is a ValueError (the
    caller should have sent it to the context service).
    """
    problems = Violations()
    if request.rehydrate:
        problems.require(request.tenant_id, "tenant_id")
        problems.require(request.session_id, "session_id")
    check_recalled(request.recalled_memories, problems)
    budget = budget_from_proto(request.budget, problems)
    problems.raise_if_any()
    agent = stored_agent(request) if request.agent_definition_json else agent_of(agents, request.agent)
    inp = ContextInput(
        agent=agent,
        role_id=request.role_id,
        user_text=request.user_text,
        goal=request.goal,
        phase=request.phase,
        skill_instructions=tuple(request.skill_instructions),
        last_messages=tuple(recalled_text(m) for m in request.last_messages),
        memory=dict(request.memory),
        user_profile=dict(request.user_profile),
        summary=request.summary,
        recalled_memories=tuple((m.key, m.text) for m in request.recalled_memories),
        budget=budget,
    )
    report: RehydrationReport | None = None
    if request.rehydrate:
        if load_payload is None:
            raise ValueError("a BuildContext request with rehydrate needs the sessions service: send it to the service")
        payload = await load_payload(request.tenant_id, request.session_id, request.rehydrate_last_n or DEFAULT_LAST_N)
        if payload.role_id and not ROLE_ID.fullmatch(payload.role_id):
            raise FailedPrecondition(f"session {request.session_id!r} stores an invalid role_id")
        if request.rehydrate_without_messages:
            payload = dataclasses.replace(payload, last_messages=())
        inp, report = rehydrate(inp, payload)
    built = builder.build(inp)
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
            context_pb2.PackReport(name=p.name, priority=p.priority, tokens=p.tokens, action=ACTIONS[p.action])
            for p in built.packs
        ],
        truncated_packs=list(built.truncated_packs),
        tokens_used=built.tokens_used,
        tool_budget_tokens=built.tool_budget,
        rehydration=report_to_proto(report) if report is not None else None,
    )
