"""What one turn needs, and the vocabulary the loop shares with the rest of the runtime.

`Turn` is the turn's environment: the model and its fallbacks, the tools, the
services behind the loop (policy, compaction, delegation, model selection) and the
turn's settings. It holds no progress of its own beyond what the caller reads at
the end (`new_messages`, `cost`); the progress between steps is the loop's state
(services/runtime/steps/state.py), which is what the journal records.
"""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from cogmesh.common.v1 import events_pb2
from services.lib import journal_kinds
from services.lib.agents import ApprovalSettings
from services.lib.llm import ChatMessage, ChatModel, ToolCallRequest
from services.runtime.budget import CostBudget, CostTracker, Limits
from services.runtime.phases import Intercept, Interceptor, Phase, PhaseContext
from services.runtime.structured import OutputSpec
from services.runtime.tools.base import Tool, ToolContext
from services.runtime.tools.breaker import BreakerRegistry


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
    lease_token: int  # its writes (the stored summary) go under the turn's lease

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
    """Where a turn goes on from: a journaled state, with the answer it waited for, if any.

    `abandon` gives a paused turn up (its pending calls are answered with a cancellation);
    `takeover` continues a turn whose runtime stopped at that state, waiting for nothing.
    """

    snapshot: Mapping[str, Any]
    decision: Decision | None = None
    abandon: bool = False
    takeover: bool = False


@dataclass(frozen=True)
class Pause:
    """Set on the turn when it paused: what to checkpoint and what it waits for."""

    snapshot: dict[str, Any]
    event: events_pb2.RuntimeEvent  # approval_required, user_input_requested or client_tool_call
    interrupt_id: str


class Journal(Protocol):
    """Where the loop records each completed step before it starts the next one.

    `kind` names the step just done (JournalEntryKind: START, MODEL, DECIDE, TOOL, STEP,
    COMPACTION, DELEGATION, PAUSE); `state` is everything the loop needs to go on
    from there (services/runtime/steps/state.py), as JSON-ready data.
    """

    async def record(self, kind: journal_kinds.Kind, state: dict[str, Any]) -> None: ...


# Builds the Turn of a subagent: (agent name, task text, the delegating turn, resume point or None).
Delegator = Callable[[str, str, "Turn", ResumePoint | None], Awaitable["Turn"]]


def _never(name: str) -> bool:
    return False


def _no_settings(name: str) -> ApprovalSettings | None:
    return None


def _is_pattern(name: str) -> bool:
    return any(c in name for c in "*?[")


def interrupt_matcher(interrupt_on: Mapping[str, bool]) -> Callable[[str], bool]:
    """An agent's `interrupt_on` as a predicate: exact names first, then glob patterns."""
    exact = {name: wanted for name, wanted in interrupt_on.items() if not _is_pattern(name)}
    patterns = [(name, wanted) for name, wanted in interrupt_on.items() if name not in exact]
    if not exact and not patterns:
        return _never

    def needs_approval(tool: str) -> bool:
        if tool in exact:
            return exact[tool]
        return any(wanted for pattern, wanted in patterns if fnmatch.fnmatchcase(tool, pattern))

    return needs_approval


def approvals_matcher(approvals: Mapping[str, ApprovalSettings]) -> Callable[[str], ApprovalSettings | None]:
    """An agent's `approvals` by tool name, matched as `interrupt_on` is: an exact name wins, else the
    first glob pattern (in the definition's order) that matches."""
    exact = {name: settings for name, settings in approvals.items() if not _is_pattern(name)}
    patterns = [(name, settings) for name, settings in approvals.items() if name not in exact]
    if not exact and not patterns:
        return _no_settings

    def settings_of(tool: str) -> ApprovalSettings | None:
        if tool in exact:
            return exact[tool]
        return next((settings for pattern, settings in patterns if fnmatch.fnmatchcase(tool, pattern)), None)

    return settings_of


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
    # What a reviewer is shown for a call that needs approval (the agent's `approvals`), by tool name.
    approvals: Callable[[str], ApprovalSettings | None] = _no_settings
    policy: TurnPolicy | None = None
    compactor: Compactor | None = None
    delegate: Delegator | None = None
    # Resolves a model the policy asks for by name (PRE_RUN, PRE_THINK, ON_ERROR).
    select_model: Callable[[str], Awaitable[ModelChoice]] | None = None
    # Offered once the transcript holds archived tool results (get_tool_response).
    archive_tool: Tool | None = None
    # Tool results longer than this (characters; 0: no limit) go to the archive (steps/evict.py) ...
    result_limit_chars: int = 0
    # ... through this: (tool name, call id, whole result) -> execution id.
    archive_result: Callable[[str, str, str], Awaitable[str]] | None = None
    depth: int = 0  # 0 for the session's agent, 1+ for subagents
    # A subagent's place in its turn: the delegating calls' idempotency keys, so its calls' keys are its own.
    call_path: str = ""
    summary: str = ""  # the rolling summary the transcript continues
    covered: int = 0  # stored messages that summary covers
    meta: dict[str, Any] = field(default_factory=dict)  # the caller's data, kept in snapshots
    resume: ResumePoint | None = None
    pause: Pause | None = None
    journal: Journal | None = None  # None: nothing is recorded between steps (tests, benches)
    deadline: float | None = None  # when the turn must be over (its caller's deadline), in time.time() seconds
    # --- state
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    new_messages: list[ChatMessage] = field(default_factory=list)
    cost: CostTracker = field(default_factory=CostTracker)
    # The task running the loop while it may still be interrupted; None once the turn has ended.
    task: asyncio.Task[Any] | None = None
    # The text of the model step streaming now (or last), as its chunks came: joined only when read
    # (building it with += per chunk copied the whole reply at every chunk).
    partial_parts: list[str] = field(default_factory=list)
    partial_stored: bool = False  # whether partial_text is already in new_messages
    stop_reason: str = ""  # "cancel" or "deadline" once interrupted
    ended: bool = False  # run_turn is over (ended or paused): nothing left to cancel

    @property
    def partial_text(self) -> str:
        return "".join(self.partial_parts)

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
