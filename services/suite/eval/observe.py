"""What a case's turns showed: the graded answer, the tools called, tokens, cost, latency and a transcript.

Built from the RuntimeEvents each turn streamed to the client (cogmesh.common.v1), so the graders
judge exactly what an application would have seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format

from cogmesh.client.results import TurnResult, voided
from cogmesh.common.v1 import events_pb2


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    ok: bool | None  # None: no tool_call_finished was seen


@dataclass
class Turn:
    """One turn as the client saw it: the message sent, its events, its wall time and time to first event."""

    message: str
    events: list[events_pb2.RuntimeEvent] = field(default_factory=list)
    wall_s: float = 0.0
    first_event_s: float | None = None


@dataclass
class Observation:
    """A case as run for one agent; `error` is set when it could not be run to a final answer."""

    session_id: str = ""
    answer: str = ""
    structured_output: Any = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0  # every turn's wall time, summed
    first_event_s: float = 0.0  # the longest any turn waited for its first event
    error: str = ""
    transcript: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def observe(turns: list[Turn], session_id: str = "", error: str = "") -> Observation:
    """The observation of a case's turns; the last turn's answer is the one graded."""
    seen = Observation(session_id=session_id, error=error)
    for turn in turns:
        result = TurnResult(list(turn.events))
        seen.latency_s += turn.wall_s
        seen.first_event_s = max(seen.first_event_s, turn.first_event_s or 0.0)
        seen.tool_calls += _tool_calls(turn.events)
        tokens_in, tokens_out, cost = _usage(result)
        seen.input_tokens += tokens_in
        seen.output_tokens += tokens_out
        seen.cost_usd += cost
        lines = [_line(e) for e in turn.events if not e.HasField("assistant_delta")]  # the answer holds them
        seen.transcript.append({"user": turn.message, "events": lines})
    if turns:
        last = TurnResult(list(turns[-1].events))
        seen.answer = last.text
        seen.structured_output = last.structured_output
        if not seen.error:
            seen.error = _turn_problem(last)
    elif not seen.error:
        seen.error = "no turn ran"
    return seen


def _turn_problem(result: TurnResult) -> str:
    """Why a turn did not end with an answer; "" when it did."""
    if result.ok:
        return ""
    if result.error is not None:
        kind = events_pb2.ErrorKind.Name(result.error.kind).removeprefix("ERROR_KIND_")
        return f"the turn failed: {kind}: {result.error.message}"
    if result.paused:
        pause = result.pause
        what = pause.kind.replace("_", " ") if pause is not None else "an answer"
        return f"the turn paused waiting for {what}, which an eval cannot give"
    return "the turn's stream ended without a final answer"


def _tool_calls(events: list[events_pb2.RuntimeEvent]) -> list[ToolCall]:
    void = voided(events)
    started: dict[str, tuple[str, dict[str, Any]]] = {}
    order: list[str] = []
    finished: dict[str, bool] = {}
    for event in events:
        if event.seq in void:
            continue
        if event.HasField("tool_call_started"):
            call = event.tool_call_started
            key = call.correlation_id or f"#{len(order)}"
            started[key] = (call.name, json_format.MessageToDict(call.arguments))
            order.append(key)
        elif event.HasField("tool_call_finished"):
            finished[event.tool_call_finished.correlation_id] = event.tool_call_finished.ok
    return [ToolCall(started[key][0], started[key][1], finished.get(key)) for key in order]


def _usage(result: TurnResult) -> tuple[int, int, float]:
    """(input tokens, output tokens, cost) of a turn: its final metrics, else its usage events summed."""
    if result.final is not None and result.final.HasField("metrics"):
        metrics = result.final.metrics
        return int(metrics.input_tokens), int(metrics.output_tokens), float(metrics.cost_usd)
    void = voided(result.events)
    usage = [e.usage for e in result.events if e.HasField("usage") and e.seq not in void]
    return sum(u.input_tokens for u in usage), sum(u.output_tokens for u in usage), sum(u.cost_usd for u in usage)


def _line(event: events_pb2.RuntimeEvent) -> dict[str, Any]:
    """A compact, JSON-ready form of an event for transcripts ."""
    kind = event.WhichOneof("payload") or ""
    line: dict[str, Any] = {"seq": event.seq, "kind": kind}
    if kind == "tool_call_started":
        call = event.tool_call_started
        line |= {"name": call.name, "arguments": json_format.MessageToDict(call.arguments)}
    elif kind == "tool_call_finished":
        done = event.tool_call_finished
        line |= {"name": done.name, "ok": done.ok, "result": done.result_summary}
    elif kind == "final":
        line |= {"text": TurnResult([event]).text}
    elif kind == "error":
        line |= {
            "error": events_pb2.ErrorKind.Name(event.error.kind).removeprefix("ERROR_KIND_"),
            "message": event.error.message,
        }
    elif kind == "approval_required":
        line |= {"name": event.approval_required.action_name}
    elif kind == "status":
        line |= {"state": events_pb2.TurnState.Name(event.status.state).removeprefix("TURN_STATE_")}
    elif kind == "usage":
        line |= {"model": event.usage.model, "input_tokens": event.usage.input_tokens}
        line |= {"output_tokens": event.usage.output_tokens, "cost_usd": event.usage.cost_usd}
    return line
