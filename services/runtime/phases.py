"""Interception points of the loop (seed 002's seven phases), for policy and context to plug into.

An interceptor is an async callable that gets a `PhaseContext` and returns None
(carry on) or an `Intercept` saying what to change. Interceptors run in order; a
`stop` ends the turn with a guardrail error at once. What each phase may change:

    PRE_RUN     prompt, tools, model, stop          POST_THINK  stop
    PRE_THINK   messages, tools, prompt, model, stop PRE_ACT    args, skip, stop
    POST_ACT    tool result, stop                   POST_RUN    (observe only)
    ON_ERROR    stop, model (retry the call with it; failover is the loop's own)

The policy service's interceptors reach the loop through the same `Intercept`
(services/runtime/policy_link.py): they also bring events to yield, and their STOP
may end the turn with a final answer (`stop_kind` 0) or a typed error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.lib.llm import ChatMessage, ToolCallRequest, ToolSchema

# The policy's enum, so a phase means the same on both sides (its proto table is there too).
from services.lib.policy.domain import Phase

__all__ = ["Intercept", "Interceptor", "Phase", "PhaseContext", "merge", "run_phase"]


@dataclass
class PhaseContext:
    phase: Phase
    turn_id: str
    model: str
    messages: Sequence[ChatMessage] = ()
    tools: Sequence[ToolSchema] = ()
    model_calls: int = 0
    tool_calls: int = 0
    system_prompt: str = ""
    model_text: str = ""
    tool_name: str = ""
    tool_args: Mapping[str, Any] = field(default_factory=dict)
    tool_result: str = ""
    tool_ok: bool = True
    error: str = ""
    # The user's message of the turn, the failure's kind at ON_ERROR, the tool call's id.
    task: str = ""
    error_kind: str = ""
    tool_call_id: str = ""
    mcp_calls: int = 0
    # POST_THINK: the tool calls the model asked for.
    calls: Sequence[ToolCallRequest] = ()


@dataclass(frozen=True)
class Intercept:
    """What an interceptor wants changed; fields left None change nothing."""

    stop: str | None = None  # end the turn; the text says why
    skip: str | None = None  # PRE_ACT: do not run the tool; the text is its result
    messages: Sequence[ChatMessage] | None = None
    tools: Sequence[ToolSchema] | None = None
    system_prompt: str | None = None
    tool_args: Mapping[str, Any] | None = None
    tool_result: str | None = None
    # Use this model (PRE_RUN: for the turn; PRE_THINK: for the call; ON_ERROR: retry with it).
    model: str | None = None
    # How a `stop` ends the turn: None a guardrail error, 0 a final answer whose text is
    # `stop`, any other cogmesh.common.v1.ErrorKind an error of that kind.
    stop_kind: int | None = None
    # Wait this long before going on (rate limits, throttling).
    wait_s: float | None = None
    # PRE_THINK `messages` replace the working messages for the rest of the turn (without
    # the system prompt) instead of being used for this call only.
    replace_messages: bool | None = None
    # Events to yield before acting on the change (policy notices).
    events: Sequence[Any] | None = None


Interceptor = Callable[[PhaseContext], Awaitable[Intercept | None]]


async def run_phase(interceptors: Sequence[Interceptor], context: PhaseContext) -> Intercept:
    """Run the interceptors in order, each seeing the changes of the ones before; merge their changes."""
    merged: dict[str, Any] = {}
    for interceptor in interceptors:
        result = await interceptor(context)
        if result is None:
            continue
        changes = {k: v for k, v in vars(result).items() if v is not None}
        merged |= changes
        if "messages" in changes:
            context.messages = changes["messages"]
        if "tools" in changes:
            context.tools = changes["tools"]
        if "tool_args" in changes:
            context.tool_args = changes["tool_args"]
        if "tool_result" in changes:
            context.tool_result = changes["tool_result"]
        if "system_prompt" in changes:
            context.system_prompt = changes["system_prompt"]
        if "stop" in changes or "skip" in changes:
            break  # later interceptors are skipped, as in seed 002
    return Intercept(**merged)


def merge(first: Intercept, second: Intercept) -> Intercept:
    """`second`'s changes over `first`'s; events of both, in order."""
    fields = {k: v for k, v in vars(first).items() if v is not None}
    fields |= {k: v for k, v in vars(second).items() if v is not None}
    if first.events and second.events:
        fields["events"] = [*first.events, *second.events]
    return Intercept(**fields)
