"""How a turn ends: the final answer (after POST_RUN), a typed error, a STOP, an interruption."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from google.protobuf import struct_pb2

from cogmesh.common.v1 import events_pb2
from services.lib.llm import ChatMessage
from services.runtime.budget import Limits
from services.runtime.phases import Intercept, Phase
from services.runtime.steps.state import Run, error, event
from services.runtime.structured import MAX_REPAIRS
from services.runtime.turn import Turn


async def finish(
    run: Run, text: str, structured: Any = None, stored: bool = True
) -> AsyncIterator[events_pb2.RuntimeEvent]:
    turn = run.turn
    if not stored and text:
        turn.new_messages.append(ChatMessage("assistant", text))
    await run.phase_change(Phase.POST_RUN, model_text=text)
    for out in run.drain():
        yield out
    final = events_pb2.FinalResult(text=text, metrics=_metrics(run), model=run.current.info.id)
    if turn.output is not None:
        final.structured_output.CopyFrom(_to_value(structured))
    run.done = True
    yield event(turn, final=final)


def stopped(run: Run, change: Intercept, text: str = "") -> events_pb2.RuntimeEvent:
    """A STOP: a guardrail error (in-process interceptors), a final answer, or an error of the given kind."""
    turn, reason = run.turn, change.stop or ""
    run.done = True
    if text:
        turn.new_messages.append(ChatMessage("assistant", text))
    if change.stop_kind == 0:
        turn.new_messages.append(ChatMessage("assistant", reason))
        return event(turn, final=events_pb2.FinalResult(text=reason, metrics=_metrics(run), model=run.current.info.id))
    if change.stop_kind is None:
        return error(turn, events_pb2.ERROR_KIND_GUARDRAIL, f"stopped by an interceptor: {reason}", False, text)
    return error(turn, change.stop_kind, reason, False, text)


def output_invalid(run: Run, errors: list[str], text: str) -> events_pb2.RuntimeEvent:
    return run.end_error(events_pb2.ERROR_KIND_OUTPUT_INVALID, invalid_message(errors), True, text)


def invalid_message(errors: list[str]) -> str:
    return f"the answer does not match the output schema after {MAX_REPAIRS} repair: {'; '.join(errors)}"


def close_open_calls(turn: Turn, why: str) -> None:
    """Answer every tool call of the turn that has no result yet, so the history stays well-formed."""
    answered = {m.tool_call_id for m in turn.new_messages if m.role == "tool"}
    for message in [m for m in turn.new_messages if m.tool_calls]:
        for call in message.tool_calls:
            if call.id not in answered:
                turn.new_messages.append(ChatMessage("tool", f"error: {why}", tool_call_id=call.id, name=call.name))


def interrupted(turn: Turn, limits: Limits) -> events_pb2.RuntimeEvent:
    """Keep what the turn produced, and close tool calls left open so the history stays well-formed."""
    turn.task = None
    if turn.partial_text and not turn.partial_stored:
        turn.new_messages.append(ChatMessage("assistant", turn.partial_text))
    why = "ran out of time" if turn.stop_reason in ("deadline", "expired") else "was cancelled"
    close_open_calls(turn, f"the turn {why} before this tool call finished")
    if turn.stop_reason == "expired":
        return error(
            turn, events_pb2.ERROR_KIND_DEADLINE_EXCEEDED, "the turn ran past its deadline", True, turn.partial_text
        )
    if turn.stop_reason == "deadline":
        return error(
            turn,
            events_pb2.ERROR_KIND_DEADLINE_EXCEEDED,
            f"the turn ran past its wall-clock limit of {limits.max_wall_clock_s:g}s",
            True,
            turn.partial_text,
        )
    return error(turn, events_pb2.ERROR_KIND_CANCELLED, "turn cancelled on request", False, turn.partial_text)


def _metrics(run: Run) -> events_pb2.TurnMetrics:
    metrics = run.metrics
    metrics.duration_ms = run.elapsed_ms()
    metrics.session_cost_usd = run.turn.session_cost.total_cost_usd
    metrics.session_total_tokens = run.turn.session_cost.total_tokens
    return metrics


def _to_value(value: Any) -> struct_pb2.Value:
    out = struct_pb2.Value()
    if value is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int | float):
        out.number_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, dict):
        out.struct_value.update(value)
    elif isinstance(value, list):
        out.list_value.extend(value)
    return out
