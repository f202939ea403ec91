"""The agent loop of one turn: model call -> policy check per tool call -> tools -> ... -> final.

Plain domain code: the outside world (models, policy, context, tools, persistence)
comes in through `Turn`. It yields cogmesh.common.v1 RuntimeEvents, the suite's
shared event vocabulary, so nothing downstream re-maps them.

Each iteration: compaction of the transcript when it grows past its budget,
PRE_THINK interceptors, one model call (retried on retryable failures, honouring
retry-after, then failed over to the agent's next fallback model), usage and cost
against the cost budget, POST_THINK, then the step's tool calls: argument checks,
the tool budget, one policy round trip for the whole step, PRE_ACT interceptors,
and up to `max_parallel_tools` calls at once, each bounded by its timeout, retried
on transport failures and guarded by its server's circuit breaker. A failing tool's
error goes back to the model as the tool result; so does a call whose arguments are
nested deeper than the suite's messages carry (`services.kit.limits`), whether from the
model, the policy, an interceptor or a reviewer's edit: such arguments are dropped, not
sent on. Limits end the turn with a typed error or, for the tool budget, take the
tools away and ask the model to answer (seed 004's toolLimitFinalize). Cancellation
and the wall-clock limit interrupt whatever the turn awaits.

Some calls are not run but answered from outside, one after the other once the
step's ordinary calls are done: a call the agent's `interrupt_on` names waits for
a human's approval, `ask_user` waits for the user's answer, a client-side tool
waits for the caller's result, and the `task` tool hands a task to a subagent,
whose events stream in this turn. Waiting means pausing: the loop captures a
JSON snapshot of everything it needs to go on (`Turn.pause`), yields the
interrupt event and a PAUSED status, and ends. `Turn.resume` continues from such
a snapshot with the answer, on any replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fnmatch
import functools
import json
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

import jsonschema
from google.protobuf import json_format, struct_pb2
from jsonschema.exceptions import SchemaError

from cogmesh.common.v1 import events_pb2, messages_pb2
from services.kit.limits import argument_depth_problem
from services.kit.llm import (
    ChatMessage,
    ChatModel,
    ModelError,
    TextDelta,
    ToolCallChunk,
    ToolCallRequest,
    ToolSchema,
    UsageChunk,
)
from services.kit.protos import dict_to_struct
from services.runtime.budget import CostBudget, CostTracker, Limits, ToolBudget
from services.runtime.phases import Intercept, Interceptor, Phase, PhaseContext, merge, run_phase
from services.runtime.structured import MAX_REPAIRS, RESPOND_TOOL, OutputSpec, parse_json_text, repair_message
from services.runtime.tools.base import Tool, ToolContext, ToolError, ToolUnavailable, builtin
from services.runtime.tools.breaker import BreakerRegistry

__all__ = [
    "Compaction",
    "CompactionFailed",
    "Decision",
    "ModelChoice",
    "ModelInfo",
    "Pause",
    "ResumePoint",
    "Tool",
    "Turn",
    "Verdict",
    "builtin",
    "run_turn",
]

_ERROR_KINDS = {
    "provider_error": events_pb2.ERROR_KIND_PROVIDER_ERROR,
    "timeout": events_pb2.ERROR_KIND_PROVIDER_ERROR,
    "rate_limited": events_pb2.ERROR_KIND_RATE_LIMITED,
    "invalid_request": events_pb2.ERROR_KIND_INVALID_REQUEST,
    "context_length": events_pb2.ERROR_KIND_CONTEXT_LENGTH,
    "authentication": events_pb2.ERROR_KIND_AUTHENTICATION,
}
# Failures after which another model may do better (seed 002's Failover triggers).
FAILOVER_KINDS = frozenset({"provider_error", "rate_limited", "timeout", "context_length"})
SUMMARY_CHARS = 200
SNAPSHOT_VERSION = 1
MAX_POLICY_RETRIES = 2  # model switches an ON_ERROR interceptor may ask for in one turn
MAX_DELEGATION_DEPTH = 3
_NOT_RUN_BUDGET = "error: not run: "
TOOL_LIMIT_NOTICE = (
    "The tool call limit of this turn has been reached. Do not call any more tools: "
    "answer the user now with what you have."
)
ALLOWED_DECISIONS = [
    events_pb2.APPROVAL_DECISION_APPROVE,
    events_pb2.APPROVAL_DECISION_EDIT,
    events_pb2.APPROVAL_DECISION_REJECT,
]
_INTERRUPT_KINDS = ("approval_required", "user_input_requested", "client_tool_call")
_WAITING_FOR = {"approval": "approval", "ask_user": "user input", "client": "a client tool result"}


@dataclass(frozen=True)
class Verdict:
    """The policy's decision on one tool call."""

    allowed: bool
    reason: str
    arguments: Mapping[str, Any]
    # End the turn (a PRE_ACT STOP): with a final answer `reason` when stop_kind is 0,
    # else with an error of that ErrorKind.
    stop: bool = False
    stop_kind: int = 0
    wait_s: float = 0.0  # wait before running (rate limits); the slot is reserved
    timeout_s: float | None = None  # the call's deadline instead of the turn's default
    events: Sequence[events_pb2.RuntimeEvent] = ()
    # Run only once a human approves (an interceptor's REQUIRE_APPROVAL): paused like `interrupt_on`.
    needs_approval: bool = False
    approval_reason: str = ""


@dataclass(frozen=True)
class ModelInfo:
    id: str
    provider: str
    input_per_million_usd: float = 0.0
    output_per_million_usd: float = 0.0

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_million_usd + output_tokens * self.output_per_million_usd) / 1e6


@dataclass(frozen=True)
class ModelChoice:
    """A model the turn can call: its catalogue entry and its adapter."""

    info: ModelInfo
    model: ChatModel


class TurnPolicy(Protocol):
    """The policy service as the loop sees it (services/runtime/policy_link.py)."""

    phases: frozenset[Phase]  # phases with work to do; the others cost no round trip
    state: dict[str, Any] | None  # interceptor state carried from call to call (and across a pause)

    async def run_phase(self, context: PhaseContext) -> Intercept: ...

    async def check_calls(
        self, calls: Sequence[tuple[ToolCallRequest, Mapping[str, Any]]], context: PhaseContext
    ) -> list[Verdict]: ...

    async def check_result(self, context: PhaseContext) -> Intercept: ...


@dataclass(frozen=True)
class Compaction:
    """The transcript to go on with after the context service summarized its older part."""

    messages: list[ChatMessage]  # without the system prompt
    summary: str
    covered: int  # stored messages the summary covers
    event: events_pb2.ContextCompacted
    system_prompt: str | None = None  # rebuilt with the new summary
    archived: bool = False  # tool results were archived behind markers


class CompactionFailed(Exception):
    """Compaction could not run; the turn goes on with the transcript as it is."""


class Compactor(Protocol):
    def needed(self, transcript: Sequence[ChatMessage], summary: str) -> bool:
        """A cheap local estimate: is the transcript near its budget?"""
        ...

    async def compact(self, transcript: Sequence[ChatMessage], summary: str, covered: int) -> Compaction | None: ...


@dataclass(frozen=True)
class Decision:
    """The answer a paused turn waited for."""

    kind: Literal["approve", "edit", "reject", "input", "tool_result"]
    arguments: Mapping[str, Any] | None = None  # edit: the arguments to run with
    text: str = ""  # reject: the reason; input: the answer; tool_result: the result
    is_error: bool = False  # tool_result: the client's tool failed
    decided_by: str = ""


@dataclass(frozen=True)
class ResumePoint:
    snapshot: Mapping[str, Any]
    decision: Decision | None = None
    abandon: bool = False  # give the turn up: answer its pending calls with a cancellation


@dataclass(frozen=True)
class Pause:
    """Set on the turn when it paused: what to checkpoint and what it waits for."""

    snapshot: dict[str, Any]
    event: events_pb2.RuntimeEvent  # approval_required, user_input_requested or client_tool_call
    interrupt_id: str


# Builds the Turn of a subagent: (agent name, task text, the delegating turn, resume point or None).
Delegator = Callable[[str, str, "Turn", ResumePoint | None], Awaitable["Turn"]]


def _never(name: str) -> bool:
    return False


def interrupt_matcher(interrupt_on: Mapping[str, bool]) -> Callable[[str], bool]:
    """An agent's `interrupt_on` as a predicate: exact names first, then glob patterns."""
    exact = {name: wanted for name, wanted in interrupt_on.items() if not any(c in name for c in "*?[")}
    patterns = [(name, wanted) for name, wanted in interrupt_on.items() if name not in exact]
    if not exact and not patterns:
        return _never

    def needs_approval(tool: str) -> bool:
        if tool in exact:
            return exact[tool]
        return any(wanted for pattern, wanted in patterns if fnmatch.fnmatchcase(tool, pattern))

    return needs_approval


@dataclass
class Turn:
    """Everything one turn needs; `new_messages` fills as the turn goes."""

    turn_id: str
    system_prompt: str
    history: list[ChatMessage]
    user_text: str
    model: ChatModel
    model_info: ModelInfo
    tools: dict[str, Tool]
    check_tool: Callable[[str, Mapping[str, Any]], Awaitable[Verdict]]
    fallbacks: list[ModelChoice] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    cost_budget: CostBudget = field(default_factory=CostBudget)
    # The session's running totals (shared across its turns); the turn's own are in `cost`.
    session_cost: CostTracker = field(default_factory=CostTracker)
    output: OutputSpec | None = None
    interceptors: list[Interceptor] = field(default_factory=list)
    breakers: BreakerRegistry = field(default_factory=BreakerRegistry)
    context: ToolContext = field(default_factory=ToolContext)
    # (kind, text) notices to report when the turn starts, e.g. a tool server that is down.
    notices: list[tuple[str, str]] = field(default_factory=list)
    runtime: str = "cogmesh"
    model_retries: int = 2
    retry_base_s: float = 0.25
    retry_max_wait_s: float = 10.0
    tool_retry_base_s: float = 0.1
    # --- who runs, and the services behind the loop (all optional)
    agent: str = ""
    interrupt_on: Callable[[str], bool] = _never
    policy: TurnPolicy | None = None
    compactor: Compactor | None = None
    delegate: Delegator | None = None
    # Resolves a model the policy asks for by name (PRE_RUN, PRE_THINK, ON_ERROR).
    select_model: Callable[[str], Awaitable[ModelChoice]] | None = None
    # Offered once the transcript holds archived tool results (get_tool_response).
    archive_tool: Tool | None = None
    depth: int = 0  # 0 for the session's agent, 1+ for subagents
    summary: str = ""  # the rolling summary the transcript continues
    covered: int = 0  # stored messages that summary covers
    meta: dict[str, Any] = field(default_factory=dict)  # the caller's data, kept in snapshots
    resume: ResumePoint | None = None
    pause: Pause | None = None
    # --- state
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    new_messages: list[ChatMessage] = field(default_factory=list)
    cost: CostTracker = field(default_factory=CostTracker)
    # The task running the loop while it may still be interrupted; None once the turn has ended.
    task: asyncio.Task[Any] | None = None
    partial_text: str = ""  # text of the model step streaming now (or last)
    partial_stored: bool = False  # whether partial_text is already in new_messages
    stop_reason: str = ""  # "cancel" or "deadline" once interrupted
    ended: bool = False  # run_turn is over (ended or paused): nothing left to cancel

    def request_cancel(self) -> bool:
        """Stop the turn now, even mid-await (a model stream, a policy check, a tool). Idempotent."""
        return self._interrupt("cancel")

    def _interrupt(self, reason: str) -> bool:
        if self.task is None:
            if self.ended or self.cancel.is_set():
                return False
            # Not started yet: run_turn sees the request and ends at once.
            self.stop_reason = self.stop_reason or reason
            self.cancel.set()
            return True
        self.stop_reason = self.stop_reason or reason
        self.cancel.set()
        self.task.cancel()
        return True


def _event(turn: Turn, **payload: Any) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(turn_id=turn.turn_id, **payload)


def _error(turn: Turn, kind: int, message: str, retryable: bool, partial: str) -> events_pb2.RuntimeEvent:
    return _event(
        turn,
        error=events_pb2.TurnError(kind=kind, message=message, retryable=retryable, partial_text=partial),  # type: ignore[arg-type]
    )


def _notice(turn: Turn, kind: str, text: str, **metadata: Any) -> events_pb2.RuntimeEvent:
    return _event(turn, native_notice=events_pb2.NativeNotice(text=text, kind=kind, metadata=dict_to_struct(metadata)))


def _summary(text: str) -> str:
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def is_interrupt(event: events_pb2.RuntimeEvent) -> bool:
    return event.WhichOneof("payload") in _INTERRUPT_KINDS


async def run_turn(turn: Turn) -> AsyncIterator[events_pb2.RuntimeEvent]:
    """Run the loop; a cancel request or the wall-clock limit interrupts whatever it awaits."""
    if turn.cancel.is_set() and turn.depth == 0:  # cancelled before it started
        turn.ended = True
        yield _interrupted(turn, turn.limits)
        return
    turn.task = asyncio.current_task()
    run = _Run(turn)
    timer = None
    budget_s = run.limits.max_wall_clock_s - run.elapsed_before_s
    if run.limits.max_wall_clock_s > 0:
        timer = asyncio.get_running_loop().call_later(max(0.0, budget_s), turn._interrupt, "deadline")
    try:
        async for event in run.steps():
            if event.WhichOneof("payload") in ("final", "error"):
                turn.task = None  # from here on the turn is over: nothing may interrupt its last steps
            yield event
        if run.paused is not None:
            turn.task = None
            interrupt_id = _interrupt_id(run.paused)
            assert run.snapshot is not None
            turn.pause = Pause(run.snapshot, run.paused, interrupt_id)
            yield run.paused
            waiting = _WAITING_FOR.get(run.snapshot.get("waiting", ""), "an answer")
            yield _event(
                turn,
                status=events_pb2.StatusUpdate(
                    state=events_pb2.TURN_STATE_PAUSED, text=f"waiting for {waiting}", interrupt_id=interrupt_id
                ),
            )
    except asyncio.CancelledError:
        if not turn.cancel.is_set() or turn.task is None:
            raise  # the caller went away: propagate
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
        yield _interrupted(turn, run.limits)
    finally:
        if timer is not None:
            timer.cancel()
        turn.task = None
        turn.ended = True


def _interrupt_id(event: events_pb2.RuntimeEvent) -> str:
    payload = event.WhichOneof("payload")
    return str(getattr(event, payload or "").interrupt_id) if payload in _INTERRUPT_KINDS else ""


def close_open_calls(turn: Turn, why: str) -> None:
    """Answer every tool call of the turn that has no result yet, so the history stays well-formed."""
    answered = {m.tool_call_id for m in turn.new_messages if m.role == "tool"}
    for message in [m for m in turn.new_messages if m.tool_calls]:
        for call in message.tool_calls:
            if call.id not in answered:
                turn.new_messages.append(ChatMessage("tool", f"error: {why}", tool_call_id=call.id, name=call.name))


def _interrupted(turn: Turn, limits: Limits) -> events_pb2.RuntimeEvent:
    """Keep what the turn produced, and close tool calls left open so the history stays well-formed."""
    turn.task = None
    if turn.partial_text and not turn.partial_stored:
        turn.new_messages.append(ChatMessage("assistant", turn.partial_text))
    why = "ran out of time" if turn.stop_reason == "deadline" else "was cancelled"
    close_open_calls(turn, f"the turn {why} before this tool call finished")
    if turn.stop_reason == "deadline":
        return _error(
            turn,
            events_pb2.ERROR_KIND_DEADLINE_EXCEEDED,
            f"the turn ran past its wall-clock limit of {limits.max_wall_clock_s:g}s",
            True,
            turn.partial_text,
        )
    return _error(turn, events_pb2.ERROR_KIND_CANCELLED, "turn cancelled on request", False, turn.partial_text)


# Item states: "check" (before the policy), "answered" (result known, not run), "run" (to run now),
# "approval" / "ask_user" / "client" (waiting for an answer), "delegate" (a subagent's task), "done".
_SEQUENTIAL = ("approval", "ask_user", "client", "delegate")


@dataclass
class _Item:
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
    child: dict[str, Any] | None = None  # a paused subagent's snapshot
    needs_approval: bool = False  # the policy asked for a human's yes ...
    approval_reason: str = ""  # ... saying why

    def answer(self, result: str, ok: bool = False) -> None:
        self.result, self.ok, self.state = result, ok, "answered"


class _Run:
    """The state of one run of the loop; `steps` yields its events."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.limits = turn.limits
        self.started = time.perf_counter()
        self.elapsed_before_s = 0.0  # active time before a pause
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
        self.system_prompt = turn.system_prompt  # after PRE_RUN
        self.messages: list[ChatMessage] = []  # the working transcript, system prompt first
        self.offered_names: set[str] | None = None  # narrowed at PRE_RUN for the whole turn
        self.archived = False  # the transcript holds archived tool results
        self.step_text = ""
        self.items: list[_Item] = []  # the step being acted on
        self.done = False
        self.paused: events_pb2.RuntimeEvent | None = None
        self.snapshot: dict[str, Any] | None = None
        self.decision: tuple[str, Decision | None] | None = None  # (call id, answer) to apply on resume
        self.buffer: list[events_pb2.RuntimeEvent] = []  # events the policy returned, to yield next
        # Set by _think:
        self.text = ""
        self.calls: list[ToolCallRequest] = []
        self.failure: ModelError | None = None
        if turn.resume is not None:
            self._restore(turn.resume.snapshot)

    # ------------------------------------------------------------------ the loop

    async def steps(self) -> AsyncIterator[events_pb2.RuntimeEvent]:
        if self.turn.resume is not None:
            async for event in self._resume():
                yield event
        else:
            async for event in self._start():
                yield event
        while not self.done and self.iteration < self.limits.max_iterations:
            # One model step and its tool calls, inline: every event of the step passes one
            # generator less (the loop's overhead is mostly per-event generator hops).
            self.iteration += 1
            turn = self.turn
            async for event in self._compact():
                yield event
            schemas = self._offered()
            call_messages: Sequence[ChatMessage] = self.messages
            change = await self._phase(
                Phase.PRE_THINK, messages=self.messages, tools=schemas, system_prompt=self.system_prompt
            )
            for event in self._drain():
                yield event
            if change.stop is not None:
                yield self._stopped(change)
                return
            if change.messages is not None:
                if change.replace_messages:  # the policy's: for the rest of the turn
                    self.messages = [self.messages[0], *change.messages]
                    call_messages = self.messages
                else:  # an in-process interceptor's: for this call only
                    call_messages = change.messages
            if change.system_prompt is not None:
                call_messages = [ChatMessage("system", change.system_prompt), *call_messages[1:]]
            schemas = list(change.tools) if change.tools is not None else schemas
            if change.wait_s:
                await asyncio.sleep(change.wait_s)
            restore = None
            if change.model is not None and change.model != self.current.info.id:
                restore = self.current
                switched = await self._switch_model(change.model, "pre_think")
                if switched is not None:
                    yield switched

            turn.partial_text, turn.partial_stored = "", False
            while True:
                async for event in self._think(call_messages, schemas):
                    yield event
                if self.failure is None:
                    break
                change = await self._phase(
                    Phase.ON_ERROR, error=str(self.failure), error_kind=self.failure.kind, model_text=self.text
                )
                for event in self._drain():
                    yield event
                if change.stop is not None:
                    yield self._stopped(change, self.text)
                    return
                if change.model is not None and not self.text and self.policy_retries < MAX_POLICY_RETRIES:
                    failed = self.current.info.id
                    switched = await self._switch_model(change.model, "on_error")
                    if switched is not None:
                        yield switched
                    if self.current.info.id != failed:  # retry the call with the model the policy chose
                        self.policy_retries += 1
                        self.metrics.failed_models.append(failed)
                        continue
                yield self._model_failed(self.failure, self.text)
                return
            if restore is not None:
                self.current = restore
            text, calls = self.text, self.calls
            if self.ending is not None:  # the cost budget ran out during the call
                if text:
                    turn.new_messages.append(ChatMessage("assistant", text))
                yield self._end_error(self.ending[0], self.ending[1], False, text)
                return
            change = await self._phase(Phase.POST_THINK, model_text=text, calls=calls)
            for event in self._drain():
                yield event
            if change.stop is not None:
                yield self._stopped(change, text)
                return

            assistant = ChatMessage("assistant", text, tuple(calls))
            turn.new_messages.append(assistant)
            turn.partial_stored = True
            self.messages.append(assistant)
            if not calls:
                if turn.output is None:
                    async for event in self._finish(text):
                        yield event
                    return
                found, value, why = parse_json_text(text)
                errors = turn.output.errors(value) if found else [why]
                if not errors:
                    async for event in self._finish(text, value):
                        yield event
                    return
                if self.repairs >= MAX_REPAIRS:
                    yield self._output_invalid(errors, text)
                    return
                self.repairs += 1
                # Internal instruction for the next call only: not part of the stored conversation.
                self.messages.append(ChatMessage("user", repair_message(errors).removeprefix("error: ")))
                continue

            self.step_text = text
            self.items = await self._prepare(calls)
            for event in self._drain():
                yield event
            for item in self.items:
                if item.internal:
                    continue
                tool = item.tool
                yield _event(
                    turn,
                    tool_call_started=events_pb2.ToolCallStarted(
                        name=item.call.name,
                        arguments=dict_to_struct(item.arguments),
                        correlation_id=item.call.id,
                        source=tool.source if tool and tool.source not in ("builtin", "internal") else "",
                        server=tool.server if tool else "",
                    ),
                )
            async for event in self._act():
                yield event
        if not self.done:
            yield _error(
                self.turn,
                events_pb2.ERROR_KIND_LOOP_LIMIT,
                f"the agent did not finish within {self.limits.max_iterations} model calls",
                False,
                self.text,
            )

    def _drain(self) -> list[events_pb2.RuntimeEvent]:
        events, self.buffer = self.buffer, []
        for event in events:
            event.turn_id = self.turn.turn_id
        return events

    async def _start(self) -> AsyncIterator[events_pb2.RuntimeEvent]:
        turn = self.turn
        user = ChatMessage("user", turn.user_text)
        turn.new_messages.append(user)
        history = list(turn.history)
        # A compacted conversation (a rolling summary) may have archived tool results behind it.
        self.archived = turn.archive_tool is not None and (bool(turn.summary) or any(_is_marker(m) for m in history))
        change = await self._phase(
            Phase.PRE_RUN, system_prompt=self.system_prompt, messages=[*history, user], tools=self._offered()
        )
        for event in self._drain():
            yield event
        if change.stop is not None:
            yield self._stopped(change)
            return
        if change.system_prompt is not None:
            self.system_prompt = change.system_prompt
        if change.tools is not None:
            self.offered_names = {t.name for t in change.tools}
        if change.model is not None:
            switched = await self._switch_model(change.model, "pre_run")
            if switched is not None:
                yield switched
        working = list(change.messages) if change.replace_messages and change.messages is not None else [*history, user]
        self.messages = [ChatMessage("system", self.system_prompt), *working]
        yield _event(turn, status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_RUNNING, text="thinking"))
        for kind, text in turn.notices:
            yield _notice(turn, kind, text)

    async def _act(self) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """Run the step's calls (ordinary ones in parallel, then the ones answered from outside, in order)."""
        refused_by_budget = any(item.result.startswith(_NOT_RUN_BUDGET) for item in self.items)
        if self.ending is not None or self.ending_final is not None:
            for item in self.items:  # keep the history well-formed: every call gets an answer
                if item.state not in ("answered", "done"):
                    item.answer("error: not run: the turn was stopped")
        for item in self.items:
            if item.state == "answered":
                item.state = "done"
                if not item.internal:
                    yield self._finished(item)
        async for item in self._invoke_all([item for item in self.items if item.state == "run"]):
            await self._post_act(item)
            for event in self._drain():
                yield event
            item.state = "done"
            yield self._finished(item)
        for item in self.items:
            if item.state in _SEQUENTIAL:
                async for event in self._settle(item):
                    yield event
                if self.paused is not None:
                    return
        self._record()
        async for event in self._after_step(refused_by_budget):
            yield event

    async def _after_step(self, refused_by_budget: bool) -> AsyncIterator[events_pb2.RuntimeEvent]:
        turn = self.turn
        if self.ending is not None:
            kind, message = self.ending
            yield self._end_error(kind, message, kind == events_pb2.ERROR_KIND_OUTPUT_INVALID, self.step_text)
            return
        if self.ending_final is not None:
            async for event in self._finish(self.ending_final, stored=False):
                yield event
            return
        done, value = self.structured
        if done:
            async for event in self._finish(self.step_text or json.dumps(value, sort_keys=True), value):
                yield event
            return
        if self.tools_enabled and self.budget.is_exhausted():
            if self.limits.on_tool_limit == "error":
                message = f"tool limit: {self.budget.why_not(False)}"
                yield self._end_error(events_pb2.ERROR_KIND_BUDGET_EXCEEDED, message, False, self.step_text)
                return
            self.tools_enabled = False
            self.messages.append(ChatMessage("system", TOOL_LIMIT_NOTICE))
            yield _notice(
                turn,
                "tool_limit",
                f"{self.budget.why_not(False)}: the model is asked to answer without tools",
                tool_calls=self.budget.total_calls,
                max_tool_calls=self.limits.max_tool_calls,
            )
        elif refused_by_budget:  # only the MCP limit: MCP tools stop being offered
            if self.limits.on_tool_limit == "error":
                message = f"tool limit: {self.budget.why_not(True)}"
                yield self._end_error(events_pb2.ERROR_KIND_BUDGET_EXCEEDED, message, False, self.step_text)
                return
            yield _notice(
                turn,
                "tool_limit",
                f"{self.budget.why_not(True)}: MCP tools are no longer offered",
                mcp_calls=self.budget.mcp_calls,
                max_mcp_calls=self.limits.max_mcp_calls,
            )

    def _offered(self) -> list[ToolSchema]:
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

    def _tool(self, name: str) -> Tool | None:
        tool = self.turn.tools.get(name)
        archive = self.turn.archive_tool
        if tool is None and archive is not None and self.archived and name == archive.name:
            tool = archive
        return tool

    async def _switch_model(self, name: str, phase: str) -> events_pb2.RuntimeEvent | None:
        """Use the model an interceptor asked for; a notice says so (or why not)."""
        turn = self.turn
        if turn.select_model is None:
            return None
        previous = self.current.info.id
        try:
            self.current = await turn.select_model(name)
        except Exception as exc:  # noqa: BLE001 - a bad model name must not end the turn here
            return _notice(turn, "model_switch", f"cannot switch to model {name!r}: {exc}", model=name, phase=phase)
        return _notice(
            turn,
            "model_switch",
            f"the policy switched the model from {previous} to {self.current.info.id}",
            from_model=previous,
            to_model=self.current.info.id,
            phase=phase,
        )

    # ------------------------------------------------------------------ context

    async def _compact(self) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """Before a model call: let the context service summarize a transcript near its budget."""
        turn = self.turn
        compactor = turn.compactor
        if compactor is None:
            return
        transcript = self.messages[1:]
        # Only the turn's own user message may follow the stored transcript: the summary counts
        # stored messages, so nothing of this turn may be summarized (see Compaction.covered).
        # (A structured-output repair adds a user message of its own: no compaction after one.)
        users = [m for m in transcript if m.role == "user"]
        if self.repairs or not users or users[-1].content != turn.user_text:
            return
        if not compactor.needed(transcript, turn.summary):
            return
        try:
            result = await compactor.compact(transcript, turn.summary, turn.covered)
        except CompactionFailed as exc:
            yield _notice(turn, "compaction", f"the conversation could not be compacted: {exc}")
            return
        if result is None:
            return
        turn.summary, turn.covered = result.summary, result.covered
        if result.system_prompt is not None:
            self.system_prompt = result.system_prompt
        self.messages = [ChatMessage("system", self.system_prompt), *result.messages]
        self.archived = self.archived or result.archived or any(_is_marker(m) for m in result.messages)
        yield _event(turn, context_compacted=result.event)

    # ------------------------------------------------------------------ model

    async def _think(self, messages: Sequence[ChatMessage], schemas: Sequence[ToolSchema]) -> AsyncIterator[Any]:
        """One model call with retries and failover; sets text, calls and failure."""
        turn = self.turn
        retries_left = turn.model_retries
        while True:
            text, calls = "", []
            self.failure = None
            try:
                # aclosing: a cancelled turn closes the provider stream (and its HTTP request) at once.
                stream: Any = self.current.model.stream(messages, schemas)
                async with contextlib.aclosing(stream):
                    async for chunk in stream:
                        if isinstance(chunk, TextDelta):
                            text += chunk.text
                            turn.partial_text = text
                            yield _event(turn, assistant_delta=events_pb2.AssistantDelta(text=chunk.text))
                        elif isinstance(chunk, ToolCallChunk):
                            calls.append(_bounded(chunk.call))
                        elif isinstance(chunk, UsageChunk):
                            for event in self._usage(chunk):
                                yield event
                self.metrics.model_calls += 1
                self.text, self.calls = text, calls
                return
            except ModelError as exc:
                self.metrics.model_calls += 1
                failure = exc
            # Streamed text cannot be taken back: only a call that produced none is repeated.
            if not text and failure.retryable and retries_left > 0:
                attempt = turn.model_retries - retries_left
                wait = failure.retry_after_s
                if wait is None:
                    wait = turn.retry_base_s * 2**attempt * (0.5 + random.random() / 2)
                if wait <= turn.retry_max_wait_s:
                    retries_left -= 1
                    yield _notice(
                        turn,
                        "retry",
                        f"model {self.current.info.id} failed ({failure.kind}): retrying in {wait:.2f}s",
                        model=self.current.info.id,
                        reason=failure.kind,
                        wait_s=round(wait, 3),
                    )
                    await asyncio.sleep(wait)
                    continue
            if not text and failure.kind in FAILOVER_KINDS and self.fallbacks:
                previous, self.current = self.current, self.fallbacks.pop(0)
                self.metrics.failed_models.append(previous.info.id)
                retries_left = turn.model_retries
                yield _notice(
                    turn,
                    "failover",
                    f"model {previous.info.id} failed ({failure.kind}: {failure}); switching to {self.current.info.id}",
                    from_model=previous.info.id,
                    to_model=self.current.info.id,
                    reason=failure.kind,
                )
                continue
            self.text, self.calls, self.failure = text, [], failure
            return

    def _usage(self, chunk: UsageChunk) -> list[events_pb2.RuntimeEvent]:
        turn, info = self.turn, self.current.info
        cost = info.cost(chunk.input_tokens, chunk.output_tokens)
        turn.cost.record(info.id, chunk.input_tokens, chunk.output_tokens, cost)
        turn.session_cost.record(info.id, chunk.input_tokens, chunk.output_tokens, cost)
        self.metrics.input_tokens += chunk.input_tokens
        self.metrics.output_tokens += chunk.output_tokens
        self.metrics.cost_usd += cost
        events = [
            _event(
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
                self.ending = (
                    events_pb2.ERROR_KIND_BUDGET_EXCEEDED,
                    f"the {scope}'s cost budget is exceeded: {tracker.describe_excess(budget)}",
                )
            elif status == "warning" and not self.budget_warned:
                self.budget_warned = True
                excess = tracker.describe_excess(budget)
                events.append(
                    _notice(
                        turn,
                        "budget_warning",
                        f"the {scope}'s cost budget is exceeded ({excess}); continuing as configured",
                        scope=scope,
                        cost_usd=tracker.total_cost_usd,
                        total_tokens=tracker.total_tokens,
                    )
                )
        return events

    def _model_failed(self, failure: ModelError, text: str) -> events_pb2.RuntimeEvent:
        turn = self.turn
        if text:
            turn.new_messages.append(ChatMessage("assistant", text))
        kind = _ERROR_KINDS.get(failure.kind, events_pb2.ERROR_KIND_PROVIDER_ERROR)
        return self._end_error(kind, f"model {self.current.info.id}: {failure}", failure.retryable, text)

    # ------------------------------------------------------------------ tools

    async def _prepare(self, calls: list[ToolCallRequest]) -> list[_Item]:
        """Local checks, then one policy round trip for the step, then the in-process PRE_ACT interceptors."""
        turn = self.turn
        items: list[_Item] = []
        before = (self.budget.total_calls, self.budget.mcp_calls)
        for call in calls:
            if turn.output is not None and call.name == RESPOND_TOOL:
                items.append(self._respond(call))
                continue
            self.metrics.tool_calls += 1
            item = _Item(call, None, call.arguments)
            items.append(item)
            if self.ending is not None or self.ending_final is not None:
                continue
            self._check_locally(item)
        checked = [i for i in items if i.state == "check" and i.tool is not None and i.tool.policy_checked]
        if checked:
            verdicts = await self._verdicts(checked, before)
            for item, verdict in zip(checked, verdicts, strict=True):
                self.buffer.extend(verdict.events)
                assert item.tool is not None
                if not verdict.allowed:
                    self.budget.release_call(item.tool.is_mcp)
                    item.answer(f"error: {verdict.reason}")
                    if verdict.stop:
                        self._stop_after_step(verdict.stop_kind, verdict.reason)
                    continue
                problem = argument_depth_problem(verdict.arguments)
                if problem:
                    self.budget.release_call(item.tool.is_mcp)
                    item.answer(f"error: the policy's arguments for {item.call.name} are invalid: {problem}")
                    continue
                item.arguments, item.wait_s, item.timeout_s = verdict.arguments, verdict.wait_s, verdict.timeout_s
                item.needs_approval, item.approval_reason = verdict.needs_approval, verdict.approval_reason
        for item in items:
            if item.state != "check":
                continue
            assert item.tool is not None
            if self.ending is not None or self.ending_final is not None:
                self.budget.release_call(item.tool.is_mcp)
                continue  # answered "not run" below
            if turn.interceptors:
                change = await self._phase(
                    Phase.PRE_ACT, tool_name=item.call.name, tool_args=item.arguments, tool_call_id=item.call.id
                )
                if change.stop is not None:
                    self.budget.release_call(item.tool.is_mcp)
                    self.ending = (events_pb2.ERROR_KIND_GUARDRAIL, f"stopped by an interceptor: {change.stop}")
                    item.answer(f"error: not run: stopped by an interceptor: {change.stop}")
                    continue
                if change.skip is not None:
                    self.budget.release_call(item.tool.is_mcp)
                    item.answer(change.skip, ok=True)
                    continue
                if change.tool_args is not None:
                    problem = argument_depth_problem(change.tool_args)
                    if problem:
                        self.budget.release_call(item.tool.is_mcp)
                        item.answer(f"error: an interceptor's arguments for {item.call.name} are invalid: {problem}")
                        continue
                    item.arguments = change.tool_args
            item.state = self._handling(item)
        return items

    def _check_locally(self, item: _Item) -> None:
        """What the loop can decide alone: unknown tool, broken arguments, the tool budget, the schema."""
        call = item.call
        tool = self._tool(call.name) if self.tools_enabled else None
        if tool is None or (
            self.offered_names is not None and call.name not in self.offered_names and tool.policy_checked
        ):
            why = "is not available to this agent" if self.tools_enabled else "was called after the tool limit"
            item.answer(f"error: tool {call.name!r} {why}")
            return
        item.tool = tool
        if call.arguments_error:
            item.answer(f"error: invalid arguments for {call.name}: {call.arguments_error}")
            return
        if tool.handling == "delegate" and self.turn.depth >= MAX_DELEGATION_DEPTH:
            item.answer(f"error: {call.name}: delegation is nested too deep ({MAX_DELEGATION_DEPTH} levels)")
            return
        if not self.budget.can_call(tool.is_mcp):
            why = self.budget.why_not(tool.is_mcp)
            item.answer(f"{_NOT_RUN_BUDGET}{why}; answer with what you have")
            return
        problems = _validate(tool, call.arguments)
        if problems:
            item.answer(f"error: invalid arguments for {call.name}: {problems}")
            return
        self.budget.record_call(tool.is_mcp)  # reserved; given back if the call is then not run

    async def _verdicts(self, items: list[_Item], before: tuple[int, int]) -> list[Verdict]:
        turn = self.turn
        if turn.policy is not None:
            context = self._context(Phase.PRE_ACT, tool_calls=before[0], mcp_calls=before[1])
            verdicts = await turn.policy.check_calls([(i.call, i.arguments) for i in items], context)
            if len(verdicts) != len(items):
                raise RuntimeError(f"the policy answered {len(verdicts)} of {len(items)} tool calls")
            return verdicts
        return [await turn.check_tool(i.call.name, i.arguments) for i in items]

    def _handling(self, item: _Item) -> str:
        tool = item.tool
        assert tool is not None
        if tool.handling != "run":
            return tool.handling
        return "approval" if item.needs_approval or self.turn.interrupt_on(item.call.name) else "run"

    def _stop_after_step(self, kind: int, reason: str) -> None:
        if kind:
            self.ending = self.ending or (kind, reason)
        elif self.ending is None:
            self.ending_final = self.ending_final or reason

    def _respond(self, call: ToolCallRequest) -> _Item:
        """The structured-output tool: accept the answer, or ask for one repair."""
        output = self.turn.output
        assert output is not None
        item = _Item(call, None, call.arguments, internal=True)
        if call.arguments_error:
            errors = [call.arguments_error]
        else:
            value = output.from_tool_arguments(call.arguments)
            errors = output.errors(value)
            if not errors:
                self.structured = (True, value)
                item.answer("ok", ok=True)
                return item
        if self.repairs >= MAX_REPAIRS:
            self.ending = (events_pb2.ERROR_KIND_OUTPUT_INVALID, _invalid_message(errors))
        else:
            self.repairs += 1
        item.answer(repair_message(errors))
        return item

    async def _invoke_all(self, items: list[_Item]) -> AsyncIterator[_Item]:
        """Run calls concurrently (at most max_parallel_tools at once), yielding each as it finishes."""
        if len(items) <= 1:  # the common case: no tasks to create
            for item in items:
                await self._invoke(item)
                yield item
            return
        gate = asyncio.Semaphore(max(1, self.limits.max_parallel_tools))

        async def one(item: _Item) -> _Item:
            async with gate:
                await self._invoke(item)
            return item

        tasks = [asyncio.create_task(one(item)) for item in items]
        try:
            for next_done in asyncio.as_completed(tasks):
                yield await next_done
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _invoke(self, item: _Item) -> None:
        """Run one call: timeout per attempt, retries with backoff on transport failures, circuit breaker."""
        turn, tool, call = self.turn, item.tool, item.call
        assert tool is not None
        timeout = min(self.limits.tool_timeout_s, tool.timeout_s or self.limits.tool_timeout_s)
        if item.timeout_s:
            timeout = item.timeout_s
        breaker = turn.breakers.get(tool.server) if tool.server else None
        context = ToolContext(call.id, turn.context.session_id, turn.context.tenant_id, turn.turn_id)
        if item.wait_s > 0:
            await asyncio.sleep(item.wait_s)
        t0 = time.perf_counter()
        for attempt in range(1, tool.retries + 2):
            if breaker is not None and not breaker.allow_request():
                item.result = (
                    f"error: tool server {tool.server!r} is unavailable (circuit open after repeated failures; "
                    f"retry in {breaker.retry_in_s():.0f}s)"
                )
                break
            item.attempts = attempt
            try:
                async with asyncio.timeout(timeout):  # cheaper than wait_for: no extra task
                    item.result = await tool.run(item.arguments, context)
                item.ok = True
                if breaker is not None:
                    breaker.record_success()
                break
            except TimeoutError:
                if breaker is not None:
                    breaker.record_failure()
                item.result = f"error: tool {call.name!r} timed out after {timeout:g}s"
                break  # not retried: the call may have had effects
            except ToolUnavailable as exc:
                if breaker is not None:
                    breaker.record_failure()
                item.result = f"error: {exc}"
                if attempt <= tool.retries:
                    await asyncio.sleep(turn.tool_retry_base_s * 2 ** (attempt - 1) * (0.5 + random.random() / 2))
            except ToolError as exc:
                if breaker is not None:
                    breaker.record_success()  # the server answered
                item.result = f"error: {exc}"
                break
            except Exception as exc:  # noqa: BLE001 - a failing tool's error goes back to the model
                item.result = f"error: {exc}"
                break
        item.duration_ms = (time.perf_counter() - t0) * 1000

    async def _post_act(self, item: _Item) -> None:
        turn = self.turn
        if turn.interceptors:
            change = await run_phase(
                turn.interceptors,
                self._context(
                    Phase.POST_ACT,
                    tool_name=item.call.name,
                    tool_args=item.arguments,
                    tool_result=item.result,
                    tool_ok=item.ok,
                    tool_call_id=item.call.id,
                ),
            )
            if change.tool_result is not None:
                item.result = change.tool_result
            if change.stop is not None and self.ending is None:
                self.ending = (events_pb2.ERROR_KIND_GUARDRAIL, f"stopped by an interceptor: {change.stop}")
        policy = turn.policy
        if policy is not None and Phase.POST_ACT in policy.phases and item.tool and item.tool.policy_checked:
            checked = await policy.check_result(
                self._context(
                    Phase.POST_ACT,
                    tool_name=item.call.name,
                    tool_args=item.arguments,
                    tool_result=item.result,
                    tool_ok=item.ok,
                    tool_call_id=item.call.id,
                )
            )
            self.buffer.extend(checked.events or ())
            if checked.tool_result is not None:
                item.result = checked.tool_result
            if checked.stop is not None:
                self._stop_after_step(
                    events_pb2.ERROR_KIND_GUARDRAIL if checked.stop_kind is None else checked.stop_kind, checked.stop
                )

    def _finished(self, item: _Item) -> events_pb2.RuntimeEvent:
        return _event(
            self.turn,
            tool_call_finished=events_pb2.ToolCallFinished(
                name=item.call.name,
                correlation_id=item.call.id,
                ok=item.ok,
                result_summary=_summary(item.result),
                duration_ms=item.duration_ms,
                attempts=item.attempts,
            ),
        )

    def _record(self) -> None:
        for item in self.items:
            message = ChatMessage("tool", item.result, tool_call_id=item.call.id, name=item.call.name)
            self.turn.new_messages.append(message)
            self.messages.append(message)
        self.items = []

    # ------------------------------------------------------------------ calls answered from outside

    async def _settle(self, item: _Item) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """A call that waits for an answer (or a subagent): apply the answer, or pause for it."""
        if item.state == "delegate":
            async for event in self._delegate(item):
                yield event
            return
        decision = self._take_decision(item)
        if decision is None:
            self._pause(item)
            return
        kind = item.state
        if kind == "approval":
            if decision.kind == "reject":
                reason = decision.text.strip() or "no reason given"
                item.answer(f"error: a human reviewer rejected this call: {reason}")
            elif decision.kind == "edit" and decision.arguments is not None:
                assert item.tool is not None
                problems = argument_depth_problem(decision.arguments) or _validate(item.tool, decision.arguments)
                if problems:
                    item.answer(f"error: the reviewer's edited arguments are invalid for {item.call.name}: {problems}")
                else:
                    item.arguments = decision.arguments
                    await self._run_now(item)
            else:
                await self._run_now(item)
        elif kind == "ask_user":
            item.answer(decision.text, ok=True)
        else:  # a client-side tool
            text = decision.text
            failed = decision.is_error or text.startswith("error:")
            if decision.is_error and not text.startswith("error:"):
                text = f"error: {text}"
            item.answer(text, ok=not failed)
        for event in self._drain():
            yield event
        item.state = "done"
        yield self._finished(item)

    async def _run_now(self, item: _Item) -> None:
        await self._invoke(item)
        await self._post_act(item)

    def _take_decision(self, item: _Item) -> Decision | None:
        if self.decision is None or self.decision[0] != item.call.id:
            return None
        decision = self.decision[1]
        self.decision = None
        return decision

    def _pause(self, item: _Item) -> None:
        """Capture the snapshot and the interrupt event; `run_turn` yields them and the turn ends here."""
        turn = self.turn
        interrupt_id = f"int_{uuid.uuid4().hex}"
        if item.state == "approval":
            event = _event(
                turn,
                approval_required=events_pb2.ApprovalRequired(
                    action_name=item.call.name,
                    arguments=dict_to_struct(item.arguments),
                    allowed_decisions=ALLOWED_DECISIONS,
                    interrupt_id=interrupt_id,
                    description=item.approval_reason
                    or f"agent {turn.agent or 'the agent'} wants to run {item.call.name}, "
                    "which needs a human's approval",
                    correlation_id=item.call.id,
                ),
            )
        elif item.state == "ask_user":
            event = _event(
                turn,
                user_input_requested=events_pb2.UserInputRequested(
                    prompt=str(item.arguments.get("prompt", "")), interrupt_id=interrupt_id, correlation_id=item.call.id
                ),
            )
        else:
            event = _event(
                turn,
                client_tool_call=events_pb2.ClientToolCall(
                    call=messages_pb2.ToolCall(
                        id=item.call.id, name=item.call.name, arguments=dict_to_struct(item.arguments)
                    ),
                    interrupt_id=interrupt_id,
                ),
            )
        self.snapshot = self._capture(item, item.state)
        self.paused = event
        self.done = True

    async def _delegate(self, item: _Item) -> AsyncIterator[events_pb2.RuntimeEvent]:
        """Hand the task to a subagent; its events stream in this turn, its answer is the call's result."""
        turn = self.turn
        agent = str(item.arguments.get("agent", ""))
        task = str(item.arguments.get("task", ""))
        resume: ResumePoint | None = None
        if item.child is not None:  # resuming: the answer is for the paused subagent
            resume = ResumePoint(item.child, self._take_decision(item))
        else:
            yield _event(
                turn,
                delegation=events_pb2.Delegation(
                    from_agent=turn.agent, to_agent=agent, task=task, correlation_id=item.call.id
                ),
            )
        if turn.delegate is None:
            item.answer("error: delegation is not available in this runtime")
        else:
            t0 = time.perf_counter()
            try:
                child_turn = await turn.delegate(agent, task, turn, resume)
            except Exception as exc:  # noqa: BLE001 - a subagent that cannot start is the model's problem
                item.answer(f"error: cannot delegate to {agent!r}: {exc}")
            else:
                child = _Run(child_turn)
                last: events_pb2.RuntimeEvent | None = None
                async for event in child.steps():
                    if event.WhichOneof("payload") in ("final", "error"):
                        last = event
                        continue
                    if not event.agent:
                        event.agent = agent
                    yield event
                self._merge_metrics(child.metrics)
                item.duration_ms = (time.perf_counter() - t0) * 1000
                if child.paused is not None:
                    if not child.paused.agent:
                        child.paused.agent = agent
                    item.child = child.snapshot
                    self.snapshot = self._capture(item, str((child.snapshot or {}).get("waiting", "")))
                    self.paused = child.paused
                    self.done = True
                    return
                if last is not None and last.HasField("final"):
                    item.answer(last.final.text, ok=True)
                elif last is not None:
                    item.answer(f"error: subagent {agent} failed: {last.error.message}")
                else:
                    item.answer(f"error: subagent {agent} ended without an answer")
                item.child = None
        item.state = "done"
        yield self._finished(item)

    def _merge_metrics(self, child: events_pb2.TurnMetrics) -> None:
        self.metrics.model_calls += child.model_calls
        self.metrics.tool_calls += child.tool_calls
        self.metrics.input_tokens += child.input_tokens
        self.metrics.output_tokens += child.output_tokens
        self.metrics.cost_usd += child.cost_usd
        self.metrics.failed_models.extend(child.failed_models)

    # ------------------------------------------------------------------ snapshots

    def _capture(self, paused: _Item, waiting: str) -> dict[str, Any]:
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
            "messages": [_message_json(m) for m in self.messages],
            "new_messages": [_message_json(m) for m in turn.new_messages],
            "iteration": self.iteration,
            "metrics": json_format.MessageToDict(self.metrics),
            "cost": _tracker_json(turn.cost),
            "session_cost": _tracker_json(turn.session_cost),
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
            "elapsed_s": self.elapsed_before_s + time.perf_counter() - self.started,
            "step_text": self.step_text,
            "items": [_item_json(i) for i in self.items],
            "paused_call": paused.call.id,
            "waiting": waiting,
        }

    def _restore(self, snapshot: Mapping[str, Any]) -> None:
        turn = self.turn
        if snapshot.get("v") != SNAPSHOT_VERSION:
            raise ValueError(f"checkpoint snapshot version {snapshot.get('v')!r} is not {SNAPSHOT_VERSION}")
        self.limits = turn.limits = Limits(**snapshot["limits"])
        turn.cost_budget = CostBudget(**snapshot["cost_budget"])
        turn.output = OutputSpec.of(snapshot["output"]) if snapshot["output"] is not None else None
        self.budget = ToolBudget(self.limits.max_tool_calls, self.limits.max_mcp_calls)
        self.budget.total_calls, self.budget.mcp_calls = snapshot["budget"]
        self.system_prompt = snapshot["system_prompt"]
        self.messages = [_message_from(m) for m in snapshot["messages"]]
        turn.new_messages = [_message_from(m) for m in snapshot["new_messages"]]
        turn.partial_stored = True
        self.iteration = snapshot["iteration"]
        json_format.ParseDict(snapshot["metrics"], self.metrics)
        self.metrics.runtime = turn.runtime
        if turn.depth == 0:  # a subagent shares the delegating turn's trackers
            _tracker_into(turn.cost, snapshot["cost"])
            saved = CostTracker()
            _tracker_into(saved, snapshot["session_cost"])
            if saved.total_tokens > turn.session_cost.total_tokens:
                _tracker_into(turn.session_cost, snapshot["session_cost"])
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
        self.items = [_item_from(i, self._tool(i["name"])) for i in snapshot["items"]]

    async def _resume(self) -> AsyncIterator[events_pb2.RuntimeEvent]:
        turn = self.turn
        point = turn.resume
        assert point is not None
        paused = str(point.snapshot["paused_call"])
        if turn.depth == 0:
            text = "resuming" if not point.abandon else "giving up the paused turn"
            yield _event(turn, status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_RUNNING, text=text))
        if point.abandon:
            for item in self.items:
                if item.state != "done":
                    waiting = _WAITING_FOR.get(item.state, "its turn to run")
                    item.answer(f"error: the turn was cancelled while this call waited for {waiting}")
                    item.state = "done"
                    if not item.internal:
                        yield self._finished(item)
            self._record()
            yield self._end_error(
                events_pb2.ERROR_KIND_CANCELLED, "the paused turn was cancelled", False, self.step_text
            )
            return
        self.decision = (paused, point.decision)
        async for event in self._act():
            yield event

    # ------------------------------------------------------------------ endings

    async def _finish(
        self, text: str, structured: Any = None, stored: bool = True
    ) -> AsyncIterator[events_pb2.RuntimeEvent]:
        turn = self.turn
        if not stored and text:
            turn.new_messages.append(ChatMessage("assistant", text))
        await self._phase(Phase.POST_RUN, model_text=text)
        for event in self._drain():
            yield event
        metrics = self.metrics
        metrics.duration_ms = (self.elapsed_before_s + time.perf_counter() - self.started) * 1000
        metrics.session_cost_usd = turn.session_cost.total_cost_usd
        metrics.session_total_tokens = turn.session_cost.total_tokens
        final = events_pb2.FinalResult(text=text, metrics=metrics, model=self.current.info.id)
        if turn.output is not None:
            final.structured_output.CopyFrom(_to_value(structured))
        self.done = True
        yield _event(turn, final=final)

    def _end_error(self, kind: int, message: str, retryable: bool, text: str) -> events_pb2.RuntimeEvent:
        self.done = True
        return _error(self.turn, kind, message, retryable, text)

    def _output_invalid(self, errors: list[str], text: str) -> events_pb2.RuntimeEvent:
        return self._end_error(events_pb2.ERROR_KIND_OUTPUT_INVALID, _invalid_message(errors), True, text)

    def _stopped(self, change: Intercept, text: str = "") -> events_pb2.RuntimeEvent:
        """A STOP: a guardrail error (in-process interceptors), a final answer, or an error of the given kind."""
        reason = change.stop or ""
        self.done = True
        if change.stop_kind == 0:
            if text:
                self.turn.new_messages.append(ChatMessage("assistant", text))
            self.turn.new_messages.append(ChatMessage("assistant", reason))
            metrics = self.metrics
            metrics.duration_ms = (self.elapsed_before_s + time.perf_counter() - self.started) * 1000
            metrics.session_cost_usd = self.turn.session_cost.total_cost_usd
            metrics.session_total_tokens = self.turn.session_cost.total_tokens
            return _event(
                self.turn, final=events_pb2.FinalResult(text=reason, metrics=metrics, model=self.current.info.id)
            )
        if text:
            self.turn.new_messages.append(ChatMessage("assistant", text))
        if change.stop_kind is None:
            return _error(
                self.turn, events_pb2.ERROR_KIND_GUARDRAIL, f"stopped by an interceptor: {reason}", False, text
            )
        return _error(self.turn, change.stop_kind, reason, False, text)

    async def _phase(self, phase: Phase, **fields: Any) -> Intercept:
        """In-process interceptors, then the policy service's (when the phase has work there)."""
        turn = self.turn
        policy = turn.policy
        remote = policy is not None and phase in policy.phases
        if not turn.interceptors and not remote:
            return _NOTHING
        context = self._context(phase, **fields)
        change = await run_phase(turn.interceptors, context) if turn.interceptors else _NOTHING
        if change.stop is None and remote:
            assert policy is not None
            got = await policy.run_phase(context)
            self.buffer.extend(got.events or ())
            change = merge(change, dataclasses.replace(got, events=None))
        return change

    def _context(self, phase: Phase, **fields: Any) -> PhaseContext:
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


_NOTHING = Intercept()


def _bounded(call: ToolCallRequest) -> ToolCallRequest:
    """A model's call as the loop takes it: arguments nested deeper than the suite's messages can
    carry (services.kit.limits) are dropped, and the call is answered with why, like broken JSON."""
    problem = argument_depth_problem(call.arguments) if call.arguments else ""
    if not problem:
        return call
    return dataclasses.replace(call, arguments={}, arguments_error=call.arguments_error or problem)


def _is_marker(message: ChatMessage) -> bool:
    return message.role == "tool" and message.content.startswith("SUMMARIZED executionId:")


def _validate(tool: Tool, arguments: Mapping[str, Any]) -> str:
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


def _invalid_message(errors: list[str]) -> str:
    return f"the answer does not match the output schema after {MAX_REPAIRS} repair: {'; '.join(errors)}"


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


# ---------------------------------------------------------------------- snapshot encoding


def _message_json(message: ChatMessage) -> dict[str, Any]:
    data: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        data["calls"] = [_call_json(c) for c in message.tool_calls]
    if message.tool_call_id:
        data["tool_call_id"] = message.tool_call_id
    if message.name:
        data["name"] = message.name
    return data


def _message_from(data: Mapping[str, Any]) -> ChatMessage:
    return ChatMessage(
        data["role"],
        data.get("content", ""),
        tuple(_call_from(c) for c in data.get("calls", ())),
        data.get("tool_call_id", ""),
        data.get("name", ""),
    )


def _call_json(call: ToolCallRequest) -> dict[str, Any]:
    return {"id": call.id, "name": call.name, "arguments": dict(call.arguments), "error": call.arguments_error}


def _call_from(data: Mapping[str, Any]) -> ToolCallRequest:
    return ToolCallRequest(data["id"], data["name"], data.get("arguments", {}), data.get("error", ""))


def _item_json(item: _Item) -> dict[str, Any]:
    return {
        "call": _call_json(item.call),
        "name": item.call.name,
        "arguments": dict(item.arguments),
        "state": item.state,
        "result": item.result,
        "ok": item.ok,
        "attempts": item.attempts,
        "duration_ms": item.duration_ms,
        "timeout_s": item.timeout_s,
        "internal": item.internal,
        "child": item.child,
    }


def _item_from(data: Mapping[str, Any], tool: Tool | None) -> _Item:
    item = _Item(
        _call_from(data["call"]),
        tool,
        data["arguments"],
        state=data["state"],
        result=data["result"],
        ok=data["ok"],
        attempts=data["attempts"],
        duration_ms=data["duration_ms"],
        timeout_s=data["timeout_s"],
        internal=data["internal"],
        child=data["child"],
    )
    if tool is None and item.state in ("approval", "run"):
        # The tool went away while the turn was paused (hot reload, a server down).
        item.answer(f"error: tool {item.call.name!r} is no longer available")
    return item


def _tracker_json(tracker: CostTracker) -> dict[str, Any]:
    return {
        "input": tracker.input_tokens,
        "output": tracker.output_tokens,
        "cost": tracker.total_cost_usd,
        "by_model": {k: list(v) for k, v in tracker.by_model.items()},
    }


def _tracker_into(tracker: CostTracker, data: Mapping[str, Any]) -> None:
    tracker.input_tokens, tracker.output_tokens, tracker.total_cost_usd = data["input"], data["output"], data["cost"]
    tracker.by_model = {k: (int(v[0]), int(v[1]), float(v[2])) for k, v in data.get("by_model", {}).items()}


def encode_snapshot(snapshot: Mapping[str, Any]) -> bytes:
    """Deterministic bytes, so a retried WriteCheckpoint with the same snapshot is a no-op."""
    return json.dumps(snapshot, sort_keys=True, separators=(",", ":"), default=str).encode()


def decode_snapshot(payload: bytes) -> dict[str, Any]:
    data = json.loads(payload.decode())
    if not isinstance(data, dict):
        raise ValueError("checkpoint payload is not a JSON object")
    return data
