"""Domain types of the sessions service, shared by every store (no gRPC).

Messages, checkpoint requests, decisions, payloads and journal states are opaque
bytes: the servicer serializes them, every store keeps them verbatim, and so a Redis
store and the memory store hold exactly the same data. The event log holds the
suite's shared event vocabulary, cogmesh.common.v1 RuntimeEvents, which it stamps
with their seq. Times are seconds since the epoch.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from cogmesh.common.v1 import events_pb2
from services.lib import session_search as search

T = TypeVar("T")

JsonObject = dict[str, Any]

# Limits and timings every store keeps alike (tests/contract holds each store to them).
MAX_GOALS = 100  # per session
MAX_PENDING_CHECKPOINTS = 100  # per session
WAITER_TTL_S = 5.0  # a queued turn that stops polling for this long (its replica died) loses its place
REMEMBERED_APPENDS = 32  # a retried append is recognised among the session's last this many
JOURNALS_KEPT = 8  # journals of ended turns a session keeps (an open or paused turn's is always kept)
CONSUMED_TTL_S = 300.0  # how long a consumed checkpoint answers a retried ConsumeCheckpoint
INTERRUPT_BASE = 0.0  # queue scores: INTERRUPT waiters sort before every ENQUEUE waiter
ENQUEUE_BASE = float(1 << 40)


class Strategy(enum.Enum):
    """What a turn does when another one holds the session's lease."""

    REJECT = "reject"
    ENQUEUE = "enqueue"
    INTERRUPT = "interrupt"
    ROLLBACK = "rollback"  # as INTERRUPT, then the stopped turn is rewound (services/sessions/history.py)

    @property
    def interrupts(self) -> bool:
        """Asks the running turn to stop and waits ahead of ENQUEUE waiters."""
        return self in (Strategy.INTERRUPT, Strategy.ROLLBACK)


class GoalStatus(enum.Enum):
    ACTIVE = "active"
    COMPLETED = "completed"
    ABANDONED = "abandoned"


# --------------------------------------------------------------------------- errors


class SessionError(Exception):
    """Base of the domain errors; the servicer maps each to a status."""


class SessionNotFound(SessionError, LookupError):
    def __init__(self, session_id: str):
        super().__init__(f"session {session_id!r} not found")
        self.session_id = session_id


class LeaseHeld(SessionError):
    """Another turn holds the session's lease."""

    def __init__(self, session_id: str, turn_id: str, waited_s: float = 0.0, resuming: bool = False):
        waited = f" after waiting {waited_s:.1f}s" if waited_s else ""
        doing = "resuming turn" if resuming else "busy with turn"
        super().__init__(f"session {session_id!r} is {doing} {turn_id!r}{waited}")
        self.session_id, self.turn_id, self.waited_s = session_id, turn_id, waited_s
        self.resuming = resuming  # the holder is a resume of the very turn asked about (AnswerPause)


class StaleLease(SessionError):
    """A write quoted a fencing token that no longer holds the lease."""

    def __init__(self, session_id: str, token: int):
        super().__init__(f"lease token {token} no longer holds session {session_id!r}")
        self.session_id, self.token = session_id, token


class CheckpointNotFound(SessionError, LookupError):
    def __init__(self, session_id: str, interrupt_id: str):
        super().__init__(f"session {session_id!r} has no checkpoint {interrupt_id!r}")
        self.session_id, self.interrupt_id = session_id, interrupt_id


class CheckpointExists(SessionError):
    """A checkpoint with this interrupt id exists with different content."""

    def __init__(self, session_id: str, interrupt_id: str):
        super().__init__(f"session {session_id!r} already has a different checkpoint {interrupt_id!r}")
        self.session_id, self.interrupt_id = session_id, interrupt_id


class CheckpointConflict(SessionError):
    """The checkpoint is in the wrong state: decided differently, or not decided yet."""

    def __init__(self, session_id: str, interrupt_id: str, why: str, recorded: bytes | None = None):
        super().__init__(f"checkpoint {interrupt_id!r} of session {session_id!r} {why}")
        self.session_id, self.interrupt_id, self.why = session_id, interrupt_id, why
        self.recorded = recorded  # decided differently: the decision recorded first


class LimitExceeded(SessionError):
    """A per-session limit (goals, pending checkpoints) was hit."""


class InvalidValue(SessionError):
    """A value is out of bounds for the session's current state, e.g. a summary covering unknown messages."""

    def __init__(self, field_name: str, message: str):
        super().__init__(message)
        self.field_name = field_name


class TurnNotFound(SessionError, LookupError):
    """The session has no such turn (no message of it, for the history RPCs)."""

    def __init__(self, session_id: str, turn_id: str):
        super().__init__(f"session {session_id!r} has no turn {turn_id!r}")
        self.session_id, self.turn_id = session_id, turn_id


class HistoryChanged(SessionError):
    """The conversation changed while a rewind read it (a compare-and-set failed twice): try again."""

    def __init__(self, session_id: str):
        super().__init__(f"session {session_id!r} changed while it was being rewound; try again")
        self.session_id = session_id


class StoreUnavailable(SessionError):
    """The backing store could not be reached; nothing was written, the call may be retried."""

    def __init__(self, detail: str):
        super().__init__(f"session store unavailable: {detail}")
        self.detail = detail


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Origin:
    """Where a forked session came from (common.v1.SessionOrigin)."""

    session_id: str
    turn_id: str  # the last turn of the original the fork holds; "" when it holds none
    forked_at: float


@dataclass(frozen=True)
class NewSession:
    user_id: str
    topic_id: str
    agent: str
    role_id: str = ""
    active_skill_ids: tuple[str, ...] = ()
    runtime_config: JsonObject = field(default_factory=dict)
    delegated_from: str = ""
    scope: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    forked_from: Origin | None = None
    agent_version: int = 0  # of a tenant's stored agent; 0: a built-in


@dataclass(frozen=True)
class SessionRecord:
    session_id: str
    tenant_id: str
    user_id: str
    topic_id: str
    agent: str
    role_id: str = ""
    active_skill_ids: tuple[str, ...] = ()
    prompt_hash: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    message_count: int = 0
    active_turn_id: str = ""
    runtime_config: JsonObject = field(default_factory=dict)
    delegated_from: str = ""
    delegation_turn_count: int = 0
    expires_at: float = 0.0  # 0: never
    pending_interrupt_ids: tuple[str, ...] = ()
    scope: Mapping[str, str] = field(default_factory=dict)  # set at creation, never changed
    active_agent: str = ""  # the agent a handoff gave the session to; "": `agent` answers
    delegated_turns: int = 0  # turns that delegated to a subagent
    plan: bytes = b""  # the todo list: a serialized common.v1 PlanUpdated (opaque); b"": none
    labels: Mapping[str, str] = field(default_factory=dict)  # the application's, changed by UpdateSession
    outcome: str = ""  # how the last turn that stopped ended (search.COMPLETED, FAILED...); "": none yet
    forked_from: Origin | None = None  # set at creation by ForkSession, never changed
    agent_version: int = 0  # the version of `agent` (a tenant's stored agent); 0: a built-in

    def answering(self) -> str:
        """The active agent as the session reports it: "" when its own agent answers."""
        return "" if self.active_agent == self.agent else self.active_agent

    @property
    def status(self) -> str:
        """idle, running, paused or failed (search.status)."""
        return search.status(bool(self.active_turn_id), bool(self.pending_interrupt_ids), self.outcome)

    def facts(self) -> search.Facts:
        origin = self.forked_from.session_id if self.forked_from else ""
        return search.Facts(
            self.agent,
            self.labels,
            self.created_at,
            self.updated_at,
            self.status,
            self.scope,
            forked_from=origin,
            agent_version=self.agent_version,
        )


@dataclass(frozen=True)
class SessionUpdate:
    """Fields to change; None leaves a field as it is."""

    role_id: str | None = None
    active_skill_ids: tuple[str, ...] | None = None
    prompt_hash: str | None = None
    runtime_config: JsonObject | None = None
    delegated_from: str | None = None
    delegation_turn_count: int | None = None
    active_agent: str | None = None
    plan: bytes | None = None
    labels: Mapping[str, str] | None = None  # replaces every label
    agent: str | None = None  # a move to another agent or version: set with agent_version
    agent_version: int | None = None
    # Sets a label (a value) or removes it (None), atomically with the rest; applied after `labels`.
    label_changes: Mapping[str, str | None] | None = None

    def changes(self) -> dict[str, Any]:
        """The record's fields to replace (label_changes, which merge, left out)."""
        return {k: v for k, v in self.__dict__.items() if v is not None and k != "label_changes"}

    def relabel(self, labels: Mapping[str, str]) -> dict[str, str]:
        """The labels after this update, from `labels` (the session's now)."""
        out = dict(self.labels if self.labels is not None else labels)
        for key, value in (self.label_changes or {}).items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    next_cursor: int | None  # None on the last page


@dataclass(frozen=True)
class AppendResult:
    message_count: int
    deduplicated: bool = False


@dataclass(frozen=True)
class Acquired:
    token: int
    expires_at: float
    pending_interrupt_ids: tuple[str, ...] = ()
    start_seq: int = 0  # the session's last event seq before the events logged with the grant
    last_seq: int = 0  # the last of those events; 0 when none was logged
    rehydration: Rehydration | None = None  # the session as the turn starts from it, when asked and granted


@dataclass(frozen=True)
class Queued:
    """The lease is busy (or promised to a turn queued earlier): wait and try again."""

    holder_turn_id: str  # empty when the lease is free but an earlier waiter goes first
    holder_expires_at: float = 0.0  # when the holder's lease runs out unless renewed (0: no holder)


@dataclass(frozen=True)
class LeaseGrant:
    token: int
    expires_at: float
    interrupted_turn_id: str = ""
    waited_s: float = 0.0
    pending_interrupt_ids: tuple[str, ...] = ()
    start_seq: int = 0
    last_seq: int = 0
    rehydration: Rehydration | None = None


@dataclass(frozen=True)
class LeaseInfo:
    turn_id: str
    token: int
    expires_at: float
    interrupt_requested_by: str = ""
    holder: str = ""  # address of the runtime replica running the turn
    takeovers: int = 0
    resume: str = ""  # held by a resume of turn_id: its attempt id (sessions.v1.LeaseResume)


@dataclass(frozen=True)
class JournalRecord:
    """One recorded step of a turn (opaque to the store) and where the event log stood then."""

    kind: str
    state: bytes
    seq: int
    recorded_at: float


@dataclass(frozen=True)
class NewEvents:
    """What one AppendEvents writes, all or nothing, under the turn's lease."""

    turn_id: str
    token: int
    events: Sequence[events_pb2.RuntimeEvent]
    journal: Sequence[tuple[str, bytes, int]] = ()  # (kind, state, how many of the events precede it)
    append_id: str = ""
    release: bool = False  # the turn's end: free the lease in the same write
    pause: NewCheckpoint | None = None  # the turn paused: store what it waits for, free the lease
    messages: Sequence[bytes] = ()  # the turn's messages, stored with its end
    holder: str = ""  # the runtime replica writing, recorded as the lease's holder ("" keeps it)
    consume_interrupt_id: str = ""  # a resumed turn's first append: take its checkpoint in the same write


@dataclass(frozen=True)
class SessionEffects:
    """What logging a batch of events changes in its session (stored in the same write as the events)."""

    active_agent: str | None = None  # the last handoff's receiving agent
    plan: bytes | None = None  # the last plan event's PlanUpdated, serialized
    delegated: bool = False  # the batch delegated a task: its turn counts once in `delegated_turns`
    outcome: str | None = None  # the batch ended or paused its turn: how (SessionRecord.outcome)

    def __bool__(self) -> bool:
        return self.active_agent is not None or self.plan is not None or self.delegated or self.outcome is not None


def effects_of(events: Sequence[events_pb2.RuntimeEvent]) -> SessionEffects:
    """The session's changes carried by events: a handoff, a plan, a delegation, the turn's end or pause
    (the last of each wins)."""
    active_agent: str | None = None
    plan: bytes | None = None
    delegated = False
    outcome: str | None = None
    for event in events:
        kind = event.WhichOneof("payload")
        if kind == "handoff":
            active_agent = event.handoff.to_agent
        elif kind == "plan":
            plan = event.plan.SerializeToString(deterministic=True)
        elif kind == "delegation":
            delegated = True
        elif kind == "final":
            outcome = search.COMPLETED
        elif kind == "error":
            outcome = search.CANCELLED if event.error.kind == events_pb2.ERROR_KIND_CANCELLED else search.FAILED
        elif kind == "status" and event.status.state == events_pb2.TURN_STATE_PAUSED:
            outcome = search.PAUSED
    return SessionEffects(active_agent, plan, delegated, outcome)


@dataclass(frozen=True)
class Appended:
    last_seq: int
    message_count: int
    duplicate: bool = False


@dataclass(frozen=True)
class Renewal:
    tenant_id: str
    session_id: str
    token: int
    ttl_s: float
    holder: str = ""
    hand_over: bool = False


@dataclass(frozen=True)
class Renewed:
    session_id: str
    token: int
    held: bool
    interrupt_requested_by: str = ""
    expires_at: float = 0.0


@dataclass(frozen=True)
class Claimed:
    """An orphaned turn handed to a runtime replica, with its new fencing token."""

    tenant_id: str
    session_id: str
    turn_id: str
    token: int
    takeovers: int
    last_seq: int
    previous_holder: str = ""  # the replica that held the lapsed lease: it may still run the turn
    interrupt_requested_by: str = ""  # a cancel reached the lease while nobody ran the turn
    resume: str = ""  # the lease claimed was a resume's: its attempt id


class Orphans(list[Claimed]):
    """The turns a look for orphans claimed. `none_open`: it found no turn open at all, so none can come due
    within a lease TTL (a turn's first lease is longer), and a replica with nothing to do may wait that long."""

    none_open: bool = False


@dataclass(frozen=True)
class LogState:
    first_seq: int
    last_seq: int
    ends_with_turn_end: bool  # empty, or its last event ended a turn


@dataclass(frozen=True)
class LeaseState:
    lease: LeaseInfo | None
    queued_turn_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rewind:
    """What one atomic rewind does (SessionStore.rewind), worked out by services/sessions/history.py from a read
    of the session: applied only while the session still holds `expected_messages` messages and its log ends
    at `expected_head` (else HistoryChanged), and while no turn runs, waits or is paused (else LeaseHeld), but
    for the holder of `token` (a ROLLBACK turn rewinding the turn it interrupted)."""

    keep: int  # messages kept: the dropped turn's first message's index
    expected_messages: int
    expected_head: int
    dropped_turn_ids: Sequence[str]
    event: events_pb2.RuntimeEvent  # the SessionRewound to log (its void range set)
    token: int = 0  # 0: nobody may hold the lease; else the holder's (fenced)
    turn_id: str = ""  # the turn the event is logged under ("" outside a turn)


@dataclass(frozen=True)
class Summary:
    text: str
    covered_message_count: int
    updated_at: float


@dataclass(frozen=True)
class Goal:
    goal_id: str
    text: str
    status: GoalStatus
    data: JsonObject
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class Phase:
    phase: str
    data: JsonObject
    updated_at: float


@dataclass(frozen=True)
class NewCheckpoint:
    interrupt_id: str
    turn_id: str
    kind: str  # which request: "approval", "user_input" or "client_tool"
    request: bytes  # the serialized request (opaque)
    payload: bytes  # the runtime's snapshot (opaque)


@dataclass(frozen=True)
class Checkpoint:
    interrupt_id: str
    turn_id: str
    kind: str
    request: bytes
    payload: bytes
    lease_token: int
    created_at: float
    decision: bytes | None = None  # serialized decision (opaque), None while pending
    decided_at: float = 0.0


@dataclass(frozen=True)
class PauseAnswer:
    """An answer to a paused turn and the resume it starts (AnswerPause): one atomic store step."""

    interrupt_id: str
    resume: str  # the attempt's id: the resume lease's holder is (the paused turn, this id)
    ttl_s: float
    kind: str = ""  # the kind of pause the decision answers ("approval", "user_input", "client_tool")
    decision: bytes | None = None  # serialized decision (opaque); None: go on with the one recorded
    abandon: bool = False  # give the turn up: no decision needed


@dataclass(frozen=True)
class PauseAnswered:
    """What a runtime needs to resume the paused turn, read in the step that took its lease."""

    checkpoint: Checkpoint  # with its decision (None only when abandoned undecided)
    token: int
    start_seq: int  # the log's last seq when the lease was taken
    journal: list[JournalRecord]  # the paused turn's, oldest first


@dataclass(frozen=True)
class Rehydration:
    """Seed order: session state, rolling summary, last N messages, active goal, phase."""

    session: SessionRecord
    summary: Summary | None
    last_messages: list[bytes]
    goal: Goal | None
    phase: Phase | None


def active_goal(goals: list[Goal]) -> Goal | None:
    """The goal being pursued: the most recently changed ACTIVE one."""
    active = [g for g in goals if g.status is GoalStatus.ACTIVE]
    return max(active, key=lambda g: (g.updated_at, g.created_at)) if active else None
