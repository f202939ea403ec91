"""One model step: PRE_THINK, the model call (retried, failed over, ON_ERROR), POST_THINK.

The step ends with the assistant's message in the transcript. Without tool calls it
is the answer (or, with an output schema, an answer to repair); with tool calls the
next step decides on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Sequence
from typing import Any

from cogmesh.common.v1 import events_pb2
from services.lib.llm import ChatMessage, ModelError, TextDelta, ToolCallChunk, ToolSchema, UsageChunk
from services.runtime import genai_telemetry
from services.runtime.phases import Phase
from services.runtime.steps.finish import finish, output_invalid, stopped
from services.runtime.steps.state import Run, bounded, error, event, notice
from services.runtime.structured import MAX_REPAIRS, parse_json_text, repair_message

ERROR_KINDS = {
    "provider_error": events_pb2.ERROR_KIND_PROVIDER_ERROR,
    "timeout": events_pb2.ERROR_KIND_PROVIDER_ERROR,
    "rate_limited": events_pb2.ERROR_KIND_RATE_LIMITED,
    "invalid_request": events_pb2.ERROR_KIND_INVALID_REQUEST,
    "context_length": events_pb2.ERROR_KIND_CONTEXT_LENGTH,
    "authentication": events_pb2.ERROR_KIND_AUTHENTICATION,
}
# Failures after which another model may do better (seed 002's Failover triggers).
FAILOVER_KINDS = frozenset({"provider_error", "rate_limited", "timeout", "context_length"})
MAX_POLICY_RETRIES = 2  # model switches an ON_ERROR interceptor may ask for in one turn


async def think(run: Run) -> AsyncIterator[events_pb2.RuntimeEvent]:
    """The model step; leaves `run.phase` at "decide" when the model called tools."""
    turn = run.turn
    schemas = run.offered()
    call_messages: Sequence[ChatMessage] = run.messages
    change = await run.phase_change(
        Phase.PRE_THINK, messages=run.messages, tools=schemas, system_prompt=run.system_prompt
    )
    for out in run.drain():
        yield out
    if change.stop is not None:
        yield stopped(run, change)
        return
    if change.messages is not None:
        if change.replace_messages:  # the policy's: for the rest of the turn
            run.messages = [run.messages[0], *change.messages]
            call_messages = run.messages
        else:  # an in-process interceptor's: for this call only
            call_messages = change.messages
    if change.system_prompt is not None:
        call_messages = [ChatMessage("system", change.system_prompt), *call_messages[1:]]
    schemas = list(change.tools) if change.tools is not None else schemas
    if change.wait_s:
        await asyncio.sleep(change.wait_s)
    restore = None
    if change.model is not None and change.model != run.current.info.id:
        restore = run.current
        switched = await switch_model(run, change.model, "pre_think")
        if switched is not None:
            yield switched

    turn.partial_parts, turn.partial_stored = [], False
    while True:
        async for out in model_call(run, call_messages, schemas):
            yield out
        if run.failure is None:
            break
        change = await run.phase_change(
            Phase.ON_ERROR, error=str(run.failure), error_kind=run.failure.kind, model_text=run.text
        )
        for out in run.drain():
            yield out
        if change.stop is not None:
            yield stopped(run, change, run.text)
            return
        if change.model is not None and not run.text and run.policy_retries < MAX_POLICY_RETRIES:
            failed = run.current.info.id
            switched = await switch_model(run, change.model, "on_error")
            if switched is not None:
                yield switched
            if run.current.info.id != failed:  # retry the call with the model the policy chose
                run.policy_retries += 1
                run.metrics.failed_models.append(failed)
                continue
        yield model_failed(run, run.failure, run.text)
        return
    if restore is not None:
        run.current = restore
    text, calls = run.text, run.calls
    if run.ending is not None:  # the cost budget ran out during the call
        if text:
            turn.new_messages.append(ChatMessage("assistant", text))
        yield run.end_error(run.ending[0], run.ending[1], False, text)
        return
    change = await run.phase_change(Phase.POST_THINK, model_text=text, calls=calls)
    for out in run.drain():
        yield out
    if change.stop is not None:
        yield stopped(run, change, text)
        return

    assistant = ChatMessage("assistant", text, tuple(calls))
    turn.new_messages.append(assistant)
    turn.partial_stored = True
    run.messages.append(assistant)
    if calls:
        run.phase = "decide"
        return
    if turn.output is None:
        async for out in finish(run, text):
            yield out
        return
    found, value, why = parse_json_text(text)
    errors = turn.output.errors(value) if found else [why]
    if not errors:
        async for out in finish(run, text, value):
            yield out
        return
    if run.repairs >= MAX_REPAIRS:
        yield output_invalid(run, errors, text)
        return
    run.repairs += 1
    # Internal instruction for the next call only: not part of the stored conversation.
    run.messages.append(ChatMessage("user", repair_message(errors).removeprefix("error: ")))


async def model_call(run: Run, messages: Sequence[ChatMessage], schemas: Sequence[ToolSchema]) -> AsyncIterator[Any]:
    """One model call with retries and failover; sets `run.text`, `run.calls` and `run.failure`."""
    turn = run.turn
    retries_left = turn.model_retries
    while True:
        parts: list[str] = []
        calls = []
        turn.partial_parts = parts
        run.failure = None
        try:
            with genai_telemetry.chat(run, messages) as traced:
                # aclosing: a cancelled turn closes the provider stream (and its HTTP request) at once.
                stream: Any = run.current.model.stream(messages, schemas)
                async with contextlib.aclosing(stream):
                    async for chunk in stream:
                        traced.chunk()
                        if isinstance(chunk, TextDelta):
                            parts.append(chunk.text)
                            yield event(turn, assistant_delta=events_pb2.AssistantDelta(text=chunk.text))
                        elif isinstance(chunk, ToolCallChunk):
                            calls.append(bounded(chunk.call))
                        elif isinstance(chunk, UsageChunk):
                            traced.usage(chunk)
                            for out in usage(run, chunk):
                                yield out
                text = "".join(parts)
                traced.answered(text, calls)
            run.metrics.model_calls += 1
            run.text, run.calls = text, calls
            return
        except ModelError as exc:
            run.metrics.model_calls += 1
            failure = exc
        text = "".join(parts)
        # Streamed text cannot be taken back: only a call that produced none is repeated.
        if not text and failure.retryable and retries_left > 0:
            attempt = turn.model_retries - retries_left
            wait = failure.retry_after_s
            if wait is None:
                wait = turn.retry_base_s * 2**attempt * (0.5 + random.random() / 2)
            if wait <= turn.retry_max_wait_s:
                retries_left -= 1
                yield notice(
                    turn,
                    "retry",
                    f"model {run.current.info.id} failed ({failure.kind}): retrying in {wait:.2f}s",
                    model=run.current.info.id,
                    reason=failure.kind,
                    wait_s=round(wait, 3),
                )
                await asyncio.sleep(wait)
                continue
        if not text and failure.kind in FAILOVER_KINDS and run.fallbacks:
            previous, run.current = run.current, run.fallbacks.pop(0)
            run.metrics.failed_models.append(previous.info.id)
            retries_left = turn.model_retries
            yield notice(
                turn,
                "failover",
                f"model {previous.info.id} failed ({failure.kind}: {failure}); switching to {run.current.info.id}",
                from_model=previous.info.id,
                to_model=run.current.info.id,
                reason=failure.kind,
            )
            continue
        run.text, run.calls, run.failure = text, [], failure
        return


def usage(run: Run, chunk: UsageChunk) -> list[events_pb2.RuntimeEvent]:
    turn, info = run.turn, run.current.info
    cost = info.cost(chunk.input_tokens, chunk.output_tokens)
    turn.cost.record(info.id, chunk.input_tokens, chunk.output_tokens, cost)
    turn.session_cost.record(info.id, chunk.input_tokens, chunk.output_tokens, cost)
    run.metrics.input_tokens += chunk.input_tokens
    run.metrics.output_tokens += chunk.output_tokens
    run.metrics.cost_usd += cost
    events = [
        event(
            turn,
            usage=events_pb2.UsageReport(
                model=info.id,
                provider=info.provider,
                input_tokens=chunk.input_tokens,
                output_tokens=chunk.output_tokens,
                cost_usd=cost,
                turn_cost_usd=turn.cost.total_cost_usd,
            ),
        )
    ]
    budget = turn.cost_budget
    if budget.is_set:
        tracker = turn.session_cost if budget.per_session else turn.cost
        status = tracker.check_budget(budget)
        scope = "session" if budget.per_session else "turn"
        if status == "exceeded":
            run.ending = (
                events_pb2.ERROR_KIND_BUDGET_EXCEEDED,
                f"the {scope}'s cost budget is exceeded: {tracker.describe_excess(budget)}",
            )
        elif status == "warning" and not run.budget_warned:
            run.budget_warned = True
            excess = tracker.describe_excess(budget)
            events.append(
                notice(
                    turn,
                    "budget_warning",
                    f"the {scope}'s cost budget is exceeded ({excess}); continuing as configured",
                    scope=scope,
                    cost_usd=tracker.total_cost_usd,
                    total_tokens=tracker.total_tokens,
                )
            )
    return events


def model_failed(run: Run, failure: ModelError, text: str) -> events_pb2.RuntimeEvent:
    turn = run.turn
    if text:
        turn.new_messages.append(ChatMessage("assistant", text))
    kind = ERROR_KINDS.get(failure.kind, events_pb2.ERROR_KIND_PROVIDER_ERROR)
    return run.end_error(kind, f"model {run.current.info.id}: {failure}", failure.retryable, text)


async def switch_model(run: Run, name: str, phase: str) -> events_pb2.RuntimeEvent | None:
    """Use the model an interceptor asked for; a notice says so (or why not)."""
    turn = run.turn
    if turn.select_model is None:
        return None
    previous = run.current.info.id
    try:
        run.current = await turn.select_model(name)
    except Exception as exc:  # noqa: BLE001 - a bad model name must not end the turn here
        return notice(turn, "model_switch", f"cannot switch to model {name!r}: {exc}", model=name, phase=phase)
    return notice(
        turn,
        "model_switch",
        f"the policy switched the model from {previous} to {run.current.info.id}",
        from_model=previous,
        to_model=run.current.info.id,
        phase=phase,
    )


def loop_limit(run: Run) -> events_pb2.RuntimeEvent:
    return error(
        run.turn,
        events_pb2.ERROR_KIND_LOOP_LIMIT,
        f"the agent did not finish within {run.limits.max_iterations} model calls",
        False,
        run.text,
    )
