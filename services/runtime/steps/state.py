"""The state of one run of the loop: what the steps read and change, and what the journal keeps.

`Run` holds the turn's progress between steps: the working transcript, the step's
tool calls and how far each got, counters, budgets, costs and what ends the turn.
`capture` turns it into JSON-ready data and `restore` reads it back, so a turn can
go on from any recorded step on any replica: after a pause (with the answer it
waited for) or after its runtime stopped (a takeover). `phase` says where it goes
on: "think" (the next model step), "decide" (the policy's decisions on the calls of
the model step just done) or "act" (running those calls).

Nothing else carries over between steps: a step module reads the `Run`, awaits the
services through the `Turn`, yields events and leaves the `Run` ready for the next.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import jsonschema
from google.protobuf import json_format
from jsonschema.exceptions import SchemaError

from cogmesh.common.v1 import events_pb2
from services.kit.limits import argument_depth_problem
from services.kit.protos import dict_to_struct
from services.lib import journal_kinds
from services.lib.llm import ChatMessage, ModelError, ToolCallRequest, ToolSchema
from services.runtime.budget import CostBudget, CostTracker, Limits, ToolBudget
from services.runtime.phases import Intercept, Phase, PhaseContext, merge, run_phase
from services.runtime.structured import OutputSpec
from services.runtime.tools.base import Tool
from services.runtime.turn import ModelChoice, Turn

SNAPSHOT_VERSION = 1
SUMMARY_CHARS = 200
# Call states: "check" (before the policy), "answered" (result known, not run), "run" (to run now),
# "approval" / "ask_user" / "client" (waiting for an answer), "delegate" (a subagent's task),
# "session" (a handoff or the todo list, answered from the session's state), "done".
SEQUENTIAL = ("approval", "ask_user", "client", "delegate", "session")
WAITING_FOR = {"approval": "approval", "ask_user": "user input", "client": "a client tool result"}
NOTHING = Intercept()


@dataclass
class CallState:
    """One tool call of a step and how far it got."""

    call: ToolCallRequest
    tool: Tool | None
    arguments: Mapping[str, Any]
    state: str = "check"
    result: str = ""
    ok: bool = False
    attempts: int = 0
    duration_ms: float = 0.0
    wait_s: float = 0.0
    timeout_s: float | None = None
    internal: bool = False  # the structured-output tool: no events
    child: dict[str, Any] | None = None  # a subagent's state while it runs or waits
    needs_approval: bool = False  # the policy asked for a human's yes ...
    approval_reason: str = ""  # ... saying why

    def answer(self, result: str, ok: bool = False) -> None:
        self.result, self.ok, self.state = result, ok, "answered"


def event(turn: Turn, **payload: Any) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id=turn.turn_id, **payload)


def error(turn: Turn, kind: int, message: str, retryable: bool, partial: str) -> events_pb2.RuntimeEvent:
    return event(
        turn,
        error=events_pb2.TurnError(kind=kind, message=message, retryable=retryable, partial_text=partial),  # type: ignore[arg-type]
    )


def notice(turn: Turn, kind: str, text: str, **metadata: Any) -> events_pb2.RuntimeEvent:
    return event(turn, native_notice=events_pb2.NativeNotice(text=text, kind=kind, metadata=dict_to_struct(metadata)))


def summary(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


class Run:
    """The state of one run of the loop over a `Turn`."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.limits = turn.limits
        self.started = time.perf_counter()
        self.elapsed_before_s = 0.0  # active time before this run (a pause or a takeover)
        self.metrics = events_pb2.TurnMetrics(runtime=turn.runtime)
        self.current = ModelChoice(turn.model_info, turn.model)
        self.fallbacks = list(turn.fallbacks)
        self.budget = ToolBudget(self.limits.max_tool_calls, self.limits.max_mcp_calls)
        self.tools_enabled = True
        self.repairs = 0
        self.budget_warned = False
        self.policy_retries = 0
        # Set when the turn must end after the current step: (error kind, message), or a final answer.
        self.ending: tuple[int, str] | None = None
        self.ending_final: str | None = None
        self.structured: tuple[bool, Any] = (False, None)
        self.iteration = 0
        self.phase = "think"  # where the loop goes on: "think", "decide" or "act"
        self.system_prompt = turn.system_prompt  # after PRE_RUN
        self.messages: list[ChatMessage] = []  # the working transcript, system prompt first
        self.call_messages: list[ChatMessage] = []  # what the model step sent (PRE_THINK may change it)
        self.offered_names: set[str] | None = None  # narrowed at PRE_RUN for the whole turn
        self.archived = False  # the transcript holds archived tool results
        self.compacted = False  # the compaction step just replaced the transcript
        self.step_text = ""
        self.items: list[CallState] = []  # the step being acted on
        self.done = False
        self.paused: events_pb2.RuntimeEvent | None = None
        self.snapshot: dict[str, Any] | None = None
        self.decision: tuple[str, Any] | None = None  # (call id, Decision) to apply on resume
        self.buffer: list[events_pb2.RuntimeEvent] = []  # events the policy returned, to yield next
        # Set by the model step:
        self.text = ""
        self.calls: list[ToolCallRequest] = []
        self.failure: ModelError | None = None
        if turn.resume is not None:
            self.restore(turn.resume.snapshot)

    # ------------------------------------------------------------------ small helpers of every step

    def drain(self) -> list[events_pb2.RuntimeEvent]:
        events, self.buffer = self.buffer, []
        for item in events:
            item.turn_id = self.turn.turn_id
        return events

    def elapsed_ms(self) -> float:
        return (self.elapsed_before_s + time.perf_counter() - self.started) * 1000

    def offered(self) -> list[ToolSchema]:
        schemas: list[ToolSchema] = []
        if self.tools_enabled:
            mcp_open = self.budget.mcp_calls < self.limits.max_mcp_calls
            names = self.offered_names
            schemas = [
                t.schema
                for t in self.turn.tools.values()
                if (mcp_open or not t.is_mcp) and (names is None or t.name in names)
            ]
            archive = self.turn.archive_tool
            if archive is not None and self.archived and archive.name not in self.turn.tools:
                schemas.append(archive.schema)
        if self.turn.output is not None:
            schemas.append(self.turn.output.tool())
        return schemas

    def tool(self, name: str) -> Tool | None:
        tool = self.turn.tools.get(name)
        archive = self.turn.archive_tool
        if tool is None and archive is not None and self.archived and name == archive.name:
            tool = archive
        return tool

    def end_error(self, kind: int, message: str, retryable: bool, text: str) -> events_pb2.RuntimeEvent:
        self.done = True
        return error(self.turn, kind, message, retryable, text)

    def finished(self, item: CallState) -> events_pb2.RuntimeEvent:
        return event(
            self.turn,
            tool_call_finished=events_pb2.ToolCallFinished(
                name=item.call.name,
                correlation_id=item.call.id,
                ok=item.ok,
                result_summary=summary(item.result),
                duration_ms=item.duration_ms,
                attempts=item.attempts,
            ),
        )

    def record_results(self) -> None:
        """The step's results join the transcript, in the order the model asked for the calls."""
        for item in self.items:
            message = ChatMessage("tool", item.result, tool_call_id=item.call.id, name=item.call.name)
            self.turn.new_messages.append(message)
            self.messages.append(message)
        self.items = []

    async def phase_change(self, phase: Phase, **fields: Any) -> Intercept:
        """In-process interceptors, then the policy service's (when the phase has work there)."""
        turn = self.turn
        policy = turn.policy
        remote = policy is not None and phase in policy.phases
        if not turn.interceptors and not remote:
            return NOTHING
        context = self.context(phase, **fields)
        change = await run_phase(turn.interceptors, context) if turn.interceptors else NOTHING
        if change.stop is None and remote:
            assert policy is not None
            got = await policy.run_phase(context)
            self.buffer.extend(got.events or ())
            change = merge(change, dataclasses.replace(got, events=None))
        return change

    def context(self, phase: Phase, **fields: Any) -> PhaseContext:
        values: dict[str, Any] = {
            "phase": phase,
            "turn_id": self.turn.turn_id,
            "model": self.current.info.id,
            "model_calls": self.metrics.model_calls,
            "tool_calls": self.budget.total_calls,
            "mcp_calls": self.budget.mcp_calls,
            "task": self.turn.user_text,
        }
        values.update(fields)
        return PhaseContext(**values)

    # ------------------------------------------------------------------ the journal

    async def record(self, kind: journal_kinds.Kind, phase: str) -> None:
        """Step `kind` is done and the loop goes on at `phase`: the journal keeps that before anything else runs."""
        self.phase = phase
        journal = self.turn.journal
        if journal is not None:
            await journal.record(kind, self.capture())

    def capture(self, waiting: str = "", paused_call: str = "") -> dict[str, Any]:
        """Everything needed to go on, as JSON-ready data (no callables, no protos)."""
        turn = self.turn
        return {
            "v": SNAPSHOT_VERSION,
            "turn_id": turn.turn_id,
            "agent": turn.agent,
            "depth": turn.depth,
            "meta": turn.meta,
            "model": self.current.info.id,
            "fallbacks": [choice.info.id for choice in self.fallbacks],
            "system_prompt": self.system_prompt,
            "messages": [message_json(m) for m in self.messages],
            "new_messages": [message_json(m) for m in turn.new_messages],
            "iteration": self.iteration,
            "phase": self.phase,
            "metrics": json_format.MessageToDict(self.metrics),
            "cost": tracker_json(turn.cost),
            "session_cost": tracker_json(turn.session_cost),
            "budget": [self.budget.total_calls, self.budget.mcp_calls],
            "tools_enabled": self.tools_enabled,
            "offered": sorted(self.offered_names) if self.offered_names is not None else None,
            "archived": self.archived,
            "repairs": self.repairs,
            "budget_warned": self.budget_warned,
            "policy_retries": self.policy_retries,
            "structured": list(self.structured),
            "ending": list(self.ending) if self.ending else None,
            "ending_final": self.ending_final,
            "limits": asdict(self.limits),
            "cost_budget": asdict(turn.cost_budget),
            "output": dict(turn.output.schema) if turn.output is not None else None,
            "policy_state": turn.policy.state if turn.policy is not None else None,
            "summary": turn.summary,
            "covered": turn.covered,
            "elapsed_s": self.elapsed_ms() / 1000,
            "step_text": self.step_text,
            "text": self.text,
            "calls": [call_json(c) for c in self.calls],
            "items": [item_json(i) for i in self.items],
            "paused_call": paused_call,
            "waiting": waiting,
        }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        turn = self.turn
        if snapshot.get("v") != SNAPSHOT_VERSION:
            raise ValueError(f"checkpoint snapshot version {snapshot.get('v')!r} is not {SNAPSHOT_VERSION}")
        self.limits = turn.limits = Limits(**snapshot["limits"])
        turn.cost_budget = CostBudget(**snapshot["cost_budget"])
        turn.output = OutputSpec.of(snapshot["output"]) if snapshot["output"] is not None else None
        self.budget = ToolBudget(self.limits.max_tool_calls, self.limits.max_mcp_calls)
        self.budget.total_calls, self.budget.mcp_calls = snapshot["budget"]
        self.system_prompt = snapshot["system_prompt"]
        self.messages = [message_from(m) for m in snapshot["messages"]]
        turn.new_messages = [message_from(m) for m in snapshot["new_messages"]]
        turn.partial_stored = True
        self.iteration = snapshot["iteration"]
        self.phase = snapshot.get("phase", "act")  # a pause's snapshot goes on with its step's calls
        json_format.ParseDict(snapshot["metrics"], self.metrics)
        self.metrics.runtime = turn.runtime
        if turn.depth == 0:  # a subagent shares the delegating turn's trackers
            tracker_into(turn.cost, snapshot["cost"])
            saved = CostTracker()
            tracker_into(saved, snapshot["session_cost"])
            if saved.total_tokens > turn.session_cost.total_tokens:
                tracker_into(turn.session_cost, snapshot["session_cost"])
        self.tools_enabled = snapshot["tools_enabled"]
        offered = snapshot["offered"]
        self.offered_names = set(offered) if offered is not None else None
        self.archived = snapshot["archived"]
        self.repairs = snapshot["repairs"]
        self.budget_warned = snapshot["budget_warned"]
        self.policy_retries = snapshot["policy_retries"]
        self.structured = (bool(snapshot["structured"][0]), snapshot["structured"][1])
        self.ending = (int(snapshot["ending"][0]), str(snapshot["ending"][1])) if snapshot["ending"] else None
        self.ending_final = snapshot["ending_final"]
        if turn.policy is not None:
            turn.policy.state = snapshot["policy_state"]
        turn.summary, turn.covered = snapshot["summary"], snapshot["covered"]
        self.elapsed_before_s = float(snapshot["elapsed_s"])
        self.step_text = snapshot["step_text"]
        self.text = snapshot.get("text", "")
        self.calls = [call_from(c) for c in snapshot.get("calls", ())]
        self.items = [item_from(i, self.tool(i["name"])) for i in snapshot["items"]]


# ---------------------------------------------------------------------- JSON forms


def message_json(message: ChatMessage) -> dict[str, Any]:
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        data["calls"] = [call_json(c) for c in message.tool_calls]
    if message.tool_call_id:
        data["tool_call_id"] = message.tool_call_id
    if message.name:
        data["name"] = message.name
    return data


def message_from(data: Mapping[str, Any]) -> ChatMessage:
    return ChatMessage(
        data["role"],
        data.get("content", ""),
        tuple(call_from(c) for c in data.get("calls", ())),
        data.get("tool_call_id", ""),
        data.get("name", ""),
    )


def call_json(call: ToolCallRequest) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": dict(call.arguments), "error": call.arguments_error}


def call_from(data: Mapping[str, Any]) -> ToolCallRequest:
    return ToolCallRequest(data["id"], data["name"], data.get("arguments", {}), data.get("error", ""))


def item_json(item: CallState) -> dict[str, Any]:
    return {
        "call": call_json(item.call),
        "name": item.call.name,
        "arguments": dict(item.arguments),
        "state": item.state,
        "result": item.result,
        "ok": item.ok,
        "attempts": item.attempts,
        "duration_ms": item.duration_ms,
        "wait_s": item.wait_s,
        "timeout_s": item.timeout_s,
        "internal": item.internal,
        "child": item.child,
        "needs_approval": item.needs_approval,
        "approval_reason": item.approval_reason,
    }


def item_from(data: Mapping[str, Any], tool: Tool | None) -> CallState:
    item = CallState(
        call_from(data["call"]),
        tool,
        data["arguments"],
        state=data["state"],
        result=data["result"],
        ok=data["ok"],
        attempts=data["attempts"],
        duration_ms=data["duration_ms"],
        wait_s=data.get("wait_s", 0.0),
        timeout_s=data["timeout_s"],
        internal=data["internal"],
        child=data["child"],
        needs_approval=data.get("needs_approval", False),
        approval_reason=data.get("approval_reason", ""),
    )
    if tool is None and item.state in ("approval", "run"):
        # The tool went away while the turn was paused (hot reload, a server down).
        item.answer(f"error: tool {item.call.name!r} is no longer available")
    return item


def tracker_json(tracker: CostTracker) -> dict[str, Any]:
    return {
        "input": tracker.input_tokens,
        "output": tracker.output_tokens,
        "cost": tracker.total_cost_usd,
        "by_model": {k: list(v) for k, v in tracker.by_model.items()},
    }


def tracker_into(tracker: CostTracker, data: Mapping[str, Any]) -> None:
    tracker.input_tokens, tracker.output_tokens, tracker.total_cost_usd = data["input"], data["output"], data["cost"]
    tracker.by_model = {k: (int(v[0]), int(v[1]), float(v[2])) for k, v in data.get("by_model", {}).items()}


def encode_snapshot(snapshot: Mapping[str, Any]) -> bytes:
    """Deterministic bytes, so a retried write of the same state is a no-op."""
    return json.dumps(snapshot, sort_keys=True, separators=(",", ":"), default=str).encode()


def decode_snapshot(payload: bytes) -> dict[str, Any]:
    data = json.loads(payload.decode())
    if not isinstance(data, dict):
        raise ValueError("checkpoint payload is not a JSON object")
    return data


# ---------------------------------------------------------------------- argument checks


def bounded(call: ToolCallRequest) -> ToolCallRequest:
    """A model's call as the loop takes it: arguments nested deeper than the suite's messages can
    carry (services.kit.limits) are dropped, and the call is answered with why, like broken JSON."""
    problem = argument_depth_problem(call.arguments) if call.arguments else ""
    if not problem:
        return call
    return dataclasses.replace(call, arguments={}, arguments_error=call.arguments_error or problem)


def validate(tool: Tool, arguments: Mapping[str, Any]) -> str:
    """Check arguments against the tool's JSON Schema; "" when they match (or the schema is unusable)."""
    validator = _validator(json.dumps(tool.schema.parameters, sort_keys=True, default=str))
    if validator is None:
        return ""
    errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.absolute_path))
    return "; ".join(f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors[:5])


@functools.lru_cache(maxsize=1024)
def _validator(schema_json: str) -> Any:
    """A validator per distinct schema: checking a schema costs milliseconds, so it is done once."""
    schema = json.loads(schema_json)
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
    except SchemaError:
        return None  # the tool validates its own input
    return cls(schema)
