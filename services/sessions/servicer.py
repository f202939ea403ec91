"""SessionsService over a SessionStore, as two tables: RPC -> store call, domain error -> status.

Each row of `RPCS` says what one RPC checks in its request (every field problem at once,
as BadRequest violations), which store call it makes, and how the response is built from
what the store returned; `SessionsServicer` answers every RPC from its row. `STATUSES`
turns each domain error into the status a client sees: a foreign tenant's session is
NOT_FOUND like a missing one, a busy session FAILED_PRECONDITION naming the running turn,
an unreachable store UNAVAILABLE with retryable=true.

A new RPC is a store method, a row in RPCS and a two-line method on SessionsServicer that
answers from it (tests/unit/test_sessions_tables.py fails while an RPC of the proto, or a
domain error, has no row, or an RPC no method).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import grpc
from google.protobuf import struct_pb2, timestamp_pb2
from google.protobuf.message import Message

from cogmesh.common.v1 import errors_pb2, events_pb2, messages_pb2, resources_pb2, turns_pb2
from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from services.kit.errors import (
    CogmeshError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
    Violations,
)
from services.kit.protos import APPROVAL_DECISIONS, MAX_ID, dict_to_struct, now, struct_to_dict
from services.kit.tasks import first_of
from services.kit.validation import check as check_rules
from services.lib import answers, journal_kinds, lease_holders
from services.lib import session_search as search
from services.sessions import history, leases
from services.sessions.append_stream import serve_appends
from services.sessions.model import (
    Appended,
    CheckpointConflict,
    CheckpointExists,
    CheckpointNotFound,
    Claimed,
    Goal,
    GoalStatus,
    HistoryChanged,
    InvalidValue,
    JournalRecord,
    LeaseGrant,
    LeaseHeld,
    LeaseInfo,
    LeaseState,
    LimitExceeded,
    NewCheckpoint,
    NewEvents,
    NewSession,
    Origin,
    Page,
    PauseAnswer,
    PauseAnswered,
    Phase,
    Rehydration,
    Renewal,
    Renewed,
    SessionError,
    SessionNotFound,
    SessionRecord,
    SessionUpdate,
    StaleLease,
    StoreUnavailable,
    Strategy,
    Summary,
    TurnNotFound,
)
from services.sessions.model import Checkpoint as CheckpointRecord
from services.sessions.store import SessionStore
from services.sessions.watch import watch_events

# A stored message may hold a long reply: internal calls take up to COGMESH_MAX_MESSAGE_BYTES (64 MiB).
MAX_MESSAGE_BYTES = 16 << 20
MAX_DECISION_BYTES = 1 << 20
MAX_PAGE_BYTES = 3 << 20  # stay well under gRPC's 4 MiB message limit
MAX_JSON_BYTES = 64 << 10
MAX_PAYLOAD_BYTES = 3 << 20  # a checkpoint's payload (paused turns keep theirs in the journal)
MAX_ENTRY_BYTES = 32 << 20  # a journal entry: a step's state, a long reply in it
DEFAULT_LEASE_TTL_S = 300
DEFAULT_REHYDRATION_MESSAGES = 10
MAX_LEASE_WAIT_S = 600.0  # an ENQUEUE without a deadline still gives up eventually
MAX_EVENT_BYTES = 1 << 20
DEFAULT_CLAIMS = 10
DEFAULT_HEARTBEAT_MS = 15_000
MAX_HEARTBEAT_MS = 600_000

_STRATEGIES = {
    sessions_pb2.MULTITASK_STRATEGY_UNSPECIFIED: Strategy.REJECT,
    sessions_pb2.MULTITASK_STRATEGY_REJECT: Strategy.REJECT,
    sessions_pb2.MULTITASK_STRATEGY_ENQUEUE: Strategy.ENQUEUE,
    sessions_pb2.MULTITASK_STRATEGY_INTERRUPT: Strategy.INTERRUPT,
    sessions_pb2.MULTITASK_STRATEGY_ROLLBACK: Strategy.ROLLBACK,
}
_GOAL_STATUS = {
    sessions_pb2.GOAL_STATUS_UNSPECIFIED: GoalStatus.ACTIVE,
    sessions_pb2.GOAL_STATUS_ACTIVE: GoalStatus.ACTIVE,
    sessions_pb2.GOAL_STATUS_COMPLETED: GoalStatus.COMPLETED,
    sessions_pb2.GOAL_STATUS_ABANDONED: GoalStatus.ABANDONED,
}
_GOAL_STATUS_PROTO = {
    GoalStatus.ACTIVE: sessions_pb2.GOAL_STATUS_ACTIVE,
    GoalStatus.COMPLETED: sessions_pb2.GOAL_STATUS_COMPLETED,
    GoalStatus.ABANDONED: sessions_pb2.GOAL_STATUS_ABANDONED,
}
MAX_PLAN_ITEMS = 100  # a todo list set with UpdateSession (the manage_todo_list tool keeps fewer)
_UPDATE_PATHS = (
    "role_id",
    "active_skill_ids",
    "prompt_hash",
    "runtime_config",
    "delegated_from",
    "delegation_turn_count",
    "active_agent",
    "plan",
    "agent",
)


class AlreadyExists(CogmeshError):
    code = grpc.StatusCode.ALREADY_EXISTS


class Aborted(CogmeshError):
    code = grpc.StatusCode.ABORTED


# --------------------------------------------------------------------------- domain error -> status

# Keyed by the exact class the store raises; an error without a row is INTERNAL.
STATUSES: dict[type[SessionError], Callable[[Any], CogmeshError]] = {
    SessionNotFound: lambda e: NotFound(
        str(e), reason=errors_pb2.ERROR_REASON_SESSION_NOT_FOUND, metadata={"session_id": e.session_id}
    ),
    LeaseHeld: lambda e: FailedPrecondition(
        str(e),
        reason=errors_pb2.ERROR_REASON_TURN_IN_PROGRESS,
        metadata={"session_id": e.session_id, "turn_id": e.turn_id, "waited_seconds": f"{e.waited_s:.3f}"},
    ),
    StaleLease: lambda e: FailedPrecondition(
        str(e),
        reason=errors_pb2.ERROR_REASON_TURN_NOT_FOUND,
        metadata={"session_id": e.session_id, "lease_token": str(e.token)},
    ),
    # A paused turn that does not exist (or was already resumed).
    CheckpointNotFound: lambda e: NotFound(
        str(e),
        reason=errors_pb2.ERROR_REASON_TURN_NOT_FOUND,
        metadata={"session_id": e.session_id, "interrupt_id": e.interrupt_id},
    ),
    CheckpointExists: lambda e: AlreadyExists(
        str(e), metadata={"session_id": e.session_id, "interrupt_id": e.interrupt_id}
    ),
    CheckpointConflict: lambda e: FailedPrecondition(
        str(e), metadata={"session_id": e.session_id, "interrupt_id": e.interrupt_id, "conflict": e.why}
    ),
    TurnNotFound: lambda e: NotFound(
        str(e),
        reason=errors_pb2.ERROR_REASON_TURN_NOT_FOUND,
        metadata={"session_id": e.session_id, "turn_id": e.turn_id},
    ),
    HistoryChanged: lambda e: Aborted(str(e), metadata={"session_id": e.session_id, "retryable": "true"}),
    InvalidValue: lambda e: InvalidArgument([(e.field_name, str(e))]),
    LimitExceeded: lambda e: ResourceExhausted(str(e)),
    StoreUnavailable: lambda e: Unavailable(str(e), metadata={"dependency": "session-store", "retryable": "true"}),
}


def status_of(error: SessionError) -> CogmeshError:
    to_status = STATUSES.get(type(error))
    return to_status(error) if to_status is not None else CogmeshError(str(error))


# --------------------------------------------------------------------------- conversions


def _timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def session_to_proto(record: SessionRecord) -> resources_pb2.Session:
    return resources_pb2.Session(
        session_id=record.session_id,
        tenant_id=record.tenant_id,
        user_id=record.user_id,
        topic_id=record.topic_id,
        agent=record.agent,
        role_id=record.role_id,
        active_skill_ids=list(record.active_skill_ids),
        prompt_hash=record.prompt_hash,
        create_time=_timestamp(record.created_at),
        update_time=_timestamp(record.updated_at),
        message_count=record.message_count,
        active_turn_id=record.active_turn_id,
        scope=record.scope,
        active_agent=record.answering(),
        delegated_turn_count=record.delegated_turns,
        labels=record.labels,
        status=search.STATUS_PROTOS[record.status],
        forked_from=_origin_to_proto(record.forked_from),
        agent_version=record.agent_version,
    )


def _origin_to_proto(origin: Origin | None) -> turns_pb2.SessionOrigin | None:
    if origin is None:
        return None
    return turns_pb2.SessionOrigin(
        session_id=origin.session_id, turn_id=origin.turn_id, fork_time=_timestamp(origin.forked_at)
    )


def state_to_proto(record: SessionRecord) -> sessions_pb2.SessionState:
    state = sessions_pb2.SessionState(
        runtime_config=dict_to_struct(record.runtime_config),
        delegated_from=record.delegated_from,
        delegation_turn_count=record.delegation_turn_count,
        pending_interrupt_ids=list(record.pending_interrupt_ids),
    )
    if record.expires_at:
        state.expire_time.CopyFrom(_timestamp(record.expires_at))
    if record.plan:
        state.plan.ParseFromString(record.plan)
    return state


def summary_to_proto(summary: Summary) -> sessions_pb2.Summary:
    return sessions_pb2.Summary(
        text=summary.text,
        covered_message_count=summary.covered_message_count,
        update_time=_timestamp(summary.updated_at),
    )


def goal_to_proto(goal: Goal) -> sessions_pb2.Goal:
    return sessions_pb2.Goal(
        goal_id=goal.goal_id,
        text=goal.text,
        status=_GOAL_STATUS_PROTO[goal.status],
        data=dict_to_struct(goal.data),
        create_time=_timestamp(goal.created_at),
        update_time=_timestamp(goal.updated_at),
    )


def phase_to_proto(phase: Phase) -> sessions_pb2.PhaseState:
    return sessions_pb2.PhaseState(
        phase=phase.phase, data=dict_to_struct(phase.data), update_time=_timestamp(phase.updated_at)
    )


def checkpoint_to_proto(record: CheckpointRecord) -> sessions_pb2.Checkpoint:
    checkpoint = sessions_pb2.Checkpoint(
        interrupt_id=record.interrupt_id,
        turn_id=record.turn_id,
        payload=record.payload,
        create_time=_timestamp(record.created_at),
        lease_token=record.lease_token,
    )
    getattr(checkpoint, record.kind).MergeFromString(record.request)
    if record.decision is not None:
        checkpoint.decision.MergeFromString(record.decision)
        checkpoint.decision.decide_time.CopyFrom(_timestamp(record.decided_at))
    return checkpoint


def encode_page_token(kind: str, value: int | None) -> str:
    return "" if value is None else base64.urlsafe_b64encode(f"{kind}:{value}".encode()).decode()


def decode_page_token(token: str, kind: str) -> int | None:
    if not token:
        return None
    try:
        found, _, value = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
        number = int(value)
    except ValueError as exc:
        raise InvalidArgument([("page_token", "is not a token returned by this API")]) from exc
    if found != kind or number < 0:
        raise InvalidArgument([("page_token", "is not a token returned by this API")])
    return number


def page_size(value: int, default: int) -> int:
    """A page's size: the request's (0..1000 by its rules, sessions.proto) or the RPC's default."""
    return value or default


def _fit(payloads: Sequence[bytes], budget: int, newest: bool = False) -> list[bytes]:
    """As many payloads as fit in the budget (always at least one), from the start or the end."""
    order = list(reversed(payloads)) if newest else list(payloads)
    kept: list[bytes] = []
    used = 0
    for payload in order:
        if kept and used + len(payload) > budget:
            break
        kept.append(payload)
        used += len(payload)
    return kept[::-1] if newest else kept


# --------------------------------------------------------------------------- validation
# The rules of single fields (ids, page sizes, TTLs, tokens, label and scope maps, known enum values)
# are on sessions.proto and checked before a servicer runs (services/kit/validation.py): what is
# here goes beyond them (across fields, sizes of what a field holds, what the service knows).


def _rules_only(r: Message, problems: Violations) -> None:
    """For an RPC whose request's field rules (checked before) are all there is to check."""


def _check_id(value: str, name: str, problems: Violations) -> None:
    """An id inside a record the rules do not reach (a journal entry's kind, a decision's author)."""
    problems.check(len(value) <= MAX_ID, name, f"must be at most {MAX_ID} characters")


def _require_id(value: str, name: str, problems: Violations) -> None:
    problems.require(value, name)
    _check_id(value, name, problems)


def _check_json(value: struct_pb2.Struct, name: str, problems: Violations) -> None:
    problems.check(value.ByteSize() <= MAX_JSON_BYTES, name, f"must be at most {MAX_JSON_BYTES >> 10} KiB")


def _lease_ttl(value: int) -> float:
    """A lease's TTL: the request's (0..86400 by its rules) or the default."""
    return float(value or DEFAULT_LEASE_TTL_S)


def _max_wait(context: Any) -> float:
    """Wait for a lease until just before the caller's deadline, so it gets our answer, not DEADLINE_EXCEEDED."""
    left = context.time_remaining() if context is not None else None
    if left is None:
        return MAX_LEASE_WAIT_S
    remaining = float(left)
    return max(0.0, min(MAX_LEASE_WAIT_S, remaining - min(0.5, remaining * 0.25)))


def _decision_bytes(decision: sessions_pb2.CheckpointDecision) -> bytes:
    """The decision as stored and compared: without the time the service stamps on it."""
    stored = sessions_pb2.CheckpointDecision()
    stored.CopyFrom(decision)
    stored.ClearField("decide_time")
    return stored.SerializeToString(deterministic=True)


# --------------------------------------------------------------------------- what each RPC checks


def _check_create(r: sessions_pb2.CreateSessionRequest, problems: Violations) -> None:
    _check_json(r.runtime_config, "runtime_config", problems)
    problems.check(
        not r.reuse_existing or bool(r.user_id or r.topic_id),
        "reuse_existing",
        "needs user_id or topic_id to find the existing session",
    )


def _check_lookup(r: sessions_pb2.LookupSessionRequest, problems: Violations) -> None:
    problems.check(bool(r.user_id or r.topic_id), "user_id", "user_id or topic_id is required")


def _check_list_sessions(r: sessions_pb2.ListSessionsRequest, problems: Violations) -> tuple[int, search.SessionFilter]:
    return page_size(r.page_size, 50), search.filter_of(r, problems)


def _check_update(r: sessions_pb2.UpdateSessionRequest, problems: Violations) -> search.LabelUpdate | None:
    paths = list(r.update_mask.paths)
    named = ", ".join((*_UPDATE_PATHS, "labels", "labels.<key>"))
    problems.check(bool(paths), "update_mask", f"must name at least one of {named}")
    for path in paths:
        known = path in _UPDATE_PATHS or path == "labels" or path.startswith("labels.")
        problems.check(known, "update_mask", f"unknown path {path!r}")
    labels = search.label_update(paths, r.labels, problems)
    if "agent" in paths:
        problems.require(r.agent, "agent")
    # The plan is an event's payload too (PlanUpdated): a list that long is refused here only.
    problems.check(len(r.plan.items) <= MAX_PLAN_ITEMS, "plan.items", f"must be at most {MAX_PLAN_ITEMS} items")
    _check_json(r.runtime_config, "runtime_config", problems)
    return labels


def _stored_messages(r: sessions_pb2.AppendMessagesRequest, problems: Violations) -> list[bytes]:
    """The messages as stored: stamped with the time they arrived, each within the size limit."""
    stamp = now()
    payloads = []
    for i, message in enumerate(r.messages):
        problems.check(message.role != messages_pb2.ROLE_UNSPECIFIED, f"messages[{i}].role", "must be set")
        stored = messages_pb2.Message()
        stored.CopyFrom(message)
        stored.create_time.CopyFrom(stamp)
        payload = stored.SerializeToString()
        problems.check(
            len(payload) <= MAX_MESSAGE_BYTES, f"messages[{i}]", f"must be at most {MAX_MESSAGE_BYTES >> 20} MiB"
        )
        payloads.append(payload)
    return payloads


def _check_list_messages(r: sessions_pb2.ListMessagesRequest, problems: Violations) -> int:
    size = page_size(r.page_size, 100)
    problems.check(not (r.through_turn_id and r.last_n), "through_turn_id", "cannot be combined with last_n")
    return size


def _check_list_turns(r: sessions_pb2.ListTurnsRequest, problems: Violations) -> int:
    return r.page_size or history.DEFAULT_TURNS_PAGE  # at most history.MAX_TURNS_PAGE by the request's rules


def _check_fork(r: sessions_pb2.ForkSessionRequest, problems: Violations) -> None:
    problems.check(not r.before_turn or bool(r.turn_id), "before_turn", "needs turn_id: the turn to stop before")


def _check_acquire(r: sessions_pb2.AcquireTurnLeaseRequest, problems: Violations) -> tuple[float, NewEvents | None]:
    if r.HasField("resume"):
        problems.check(
            not lease_holders.parse_holder(r.turn_id).resume, "turn_id", "must be the paused turn's id with resume set"
        )
    ttl = _lease_ttl(r.ttl_seconds)
    _check_events(r.events, problems)
    _check_entries(r.entries, problems)
    opening = None
    if r.events or r.entries:
        turn_id = _holder(r).turn_id
        entries = [(journal_kinds.stored_name(e), e.state, e.position or len(r.events)) for e in r.entries]
        opening = NewEvents(turn_id, 0, list(r.events), entries)
    return ttl, opening


def _check_renew(r: sessions_pb2.RenewTurnLeaseRequest, problems: Violations) -> float:
    return _lease_ttl(r.ttl_seconds)


def _check_renew_many(r: sessions_pb2.RenewTurnLeasesRequest, problems: Violations) -> list[Renewal]:
    return [
        Renewal(
            lease.tenant_id,
            lease.session_id,
            lease.lease_token,
            _lease_ttl(lease.ttl_seconds),
            lease.holder,
            lease.hand_over,
        )
        for lease in r.leases
    ]


def _renewed_to_proto(renewed: Renewed) -> sessions_pb2.RenewedTurnLease:
    lease = sessions_pb2.RenewedTurnLease(
        session_id=renewed.session_id,
        lease_token=renewed.token,
        held=renewed.held,
        interrupt_requested_by=renewed.interrupt_requested_by,
    )
    if renewed.held:
        lease.expire_time.CopyFrom(_timestamp(renewed.expires_at))
    return lease


def _check_events(events: Sequence[events_pb2.RuntimeEvent], problems: Violations, name: str = "events") -> None:
    for i, event in enumerate(events):
        problems.check(event.WhichOneof("payload") is not None, f"{name}[{i}]", "must carry a payload")
        problems.check(
            event.ByteSize() <= MAX_EVENT_BYTES, f"{name}[{i}]", f"must be at most {MAX_EVENT_BYTES >> 20} MiB"
        )


def _check_entries(entries: Sequence[sessions_pb2.JournalEntry], problems: Violations) -> None:
    for i, entry in enumerate(entries):
        # Stored by name: the enum's, or the one an older writer sent in `kind` (services/lib/journal_kinds.py).
        _require_id(journal_kinds.stored_name(entry), f"entries[{i}].entry_kind", problems)
        problems.check(
            len(entry.state) <= MAX_ENTRY_BYTES,
            f"entries[{i}].state",
            f"must be at most {MAX_ENTRY_BYTES >> 20} MiB",
        )


def _check_append(r: sessions_pb2.AppendEventsRequest, problems: Violations) -> NewEvents:
    _check_events(r.events, problems)
    _check_entries(r.entries, problems)
    problems.check(
        not (r.release_lease and r.HasField("pause")),
        "pause",
        "cannot be set with release_lease: a turn ends or pauses",
    )
    pause = None
    if r.HasField("pause"):
        _check_pause(r.pause, problems)
        if not problems.items:
            pause = _new_checkpoint(r.pause)
    messages = []
    stamp = now()
    for i, message in enumerate(r.messages):
        problems.check(message.role != messages_pb2.ROLE_UNSPECIFIED, f"messages[{i}].role", "must be set")
        stored = messages_pb2.Message()
        stored.CopyFrom(message)
        stored.create_time.CopyFrom(stamp)
        payload = stored.SerializeToString()
        problems.check(
            len(payload) <= MAX_MESSAGE_BYTES, f"messages[{i}]", f"must be at most {MAX_MESSAGE_BYTES >> 20} MiB"
        )
        messages.append(payload)
    return NewEvents(
        r.turn_id,
        r.lease_token,
        list(r.events),
        [(journal_kinds.stored_name(e), e.state, e.position) for e in r.entries],
        r.append_id,
        r.release_lease,
        pause,
        messages,
        r.holder,
        r.consume_interrupt_id,
    )


def _check_pause(checkpoint: sessions_pb2.Checkpoint, problems: Violations) -> None:
    # A Checkpoint is also what the service answers (and the runtime is sent back): its fields carry no rules.
    _require_id(checkpoint.interrupt_id, "pause.interrupt_id", problems)
    _require_id(checkpoint.turn_id, "pause.turn_id", problems)
    kind = checkpoint.WhichOneof("request")
    problems.check(kind is not None, "pause.request", "must be approval, user_input or client_tool")
    problems.check(not checkpoint.payload, "pause.payload", "must be empty: the turn's journal holds its state")


def _appended_to_proto(appended: Appended) -> sessions_pb2.AppendEventsResponse:
    return sessions_pb2.AppendEventsResponse(
        last_seq=appended.last_seq, duplicate=appended.duplicate, message_count=appended.message_count
    )


def _journal_to_proto(records: list[JournalRecord]) -> sessions_pb2.GetJournalResponse:
    return sessions_pb2.GetJournalResponse(
        entries=[
            sessions_pb2.JournalEntry(
                kind=r.kind,  # both fields: a runtime of an older version reads the name
                entry_kind=journal_kinds.kind_named(r.kind),
                state=r.state,
                seq=r.seq,
                record_time=_timestamp(r.recorded_at),
            )
            for r in records
        ]
    )


def _check_claim(r: sessions_pb2.ClaimOrphanedTurnsRequest, problems: Violations) -> tuple[int, float]:
    return r.max_turns or DEFAULT_CLAIMS, _lease_ttl(r.ttl_seconds)


def _interrupted_to_proto(info: LeaseInfo | None) -> sessions_pb2.InterruptTurnResponse:
    if info is None:
        return sessions_pb2.InterruptTurnResponse()
    return sessions_pb2.InterruptTurnResponse(turn_id=info.turn_id, holder=info.holder)


def _check_read(r: sessions_pb2.ReadEventsRequest, problems: Violations) -> float:
    return (r.heartbeat_ms or DEFAULT_HEARTBEAT_MS) / 1000


def _check_goal(r: sessions_pb2.SaveGoalRequest, problems: Violations) -> None:
    problems.check(bool(r.goal.text.strip()), "goal.text", "must not be blank")
    _check_json(r.goal.data, "goal.data", problems)


def _check_phase(r: sessions_pb2.SetPhaseRequest, problems: Violations) -> None:
    _check_json(r.phase.data, "phase.data", problems)


def _check_write_checkpoint(r: sessions_pb2.WriteCheckpointRequest, problems: Violations) -> None:
    checkpoint = r.checkpoint
    _require_id(checkpoint.interrupt_id, "checkpoint.interrupt_id", problems)
    _require_id(checkpoint.turn_id, "checkpoint.turn_id", problems)
    kind = checkpoint.WhichOneof("request")
    problems.check(kind is not None, "checkpoint.request", "must be approval, user_input or client_tool")
    problems.check(
        len(checkpoint.payload) <= MAX_PAYLOAD_BYTES,
        "checkpoint.payload",
        f"must be at most {MAX_PAYLOAD_BYTES >> 20} MiB",
    )
    if kind is not None:
        problems.check(
            getattr(checkpoint, kind).interrupt_id in ("", checkpoint.interrupt_id),
            f"checkpoint.{kind}.interrupt_id",
            "must be empty or equal checkpoint.interrupt_id",
        )


def _check_decide(r: sessions_pb2.DecideCheckpointRequest, problems: Violations) -> None:
    _check_id(r.decision.decided_by, "decision.decided_by", problems)
    _check_json(r.decision.edited_arguments, "decision.edited_arguments", problems)
    problems.check(r.decision.ByteSize() <= MAX_DECISION_BYTES, "decision", "must be at most 1 MiB")


def _check_decision(kind: str, decision: sessions_pb2.CheckpointDecision) -> None:
    """The answer must fit what the turn asked for."""
    problems = Violations()
    if kind == "approval":
        problems.check(
            decision.approval in APPROVAL_DECISIONS,
            "decision.approval",
            f"must be APPROVAL_DECISION_APPROVE, _EDIT or _REJECT to answer an approval, not {decision.approval}",
        )
        problems.check(
            decision.approval != events_pb2.APPROVAL_DECISION_EDIT or decision.HasField("edited_arguments"),
            "decision.edited_arguments",
            "is required with APPROVAL_DECISION_EDIT",
        )
    elif kind == "user_input":
        problems.require(decision.text, "decision.text")
    elif kind == "client_tool":
        problems.check(decision.HasField("tool_result"), "decision.tool_result", "is required to answer a client tool")
    problems.raise_if_any()


def _check_answer_pause(r: sessions_pb2.AnswerPauseRequest, problems: Violations) -> PauseAnswer:
    decision = None
    kind = ""
    if r.HasField("decision"):
        problems.check(not r.abandon, "decision", "must be unset with abandon: a turn given up needs no answer")
        kind = answers.check(r.decision, problems, "decision")
        _check_id(r.decision.decided_by, "decision.decided_by", problems)
        _check_json(r.decision.edited_arguments, "decision.edited_arguments", problems)
        problems.check(r.decision.ByteSize() <= MAX_DECISION_BYTES, "decision", "must be at most 1 MiB")
        decision = _decision_bytes(r.decision)
    return PauseAnswer(r.interrupt_id, r.resume.attempt_id, float(r.ttl_seconds), kind, decision, r.abandon)


async def _answer_pause(
    store: SessionStore, r: sessions_pb2.AnswerPauseRequest, answer: PauseAnswer, context: Any
) -> PauseAnswered:
    try:
        try:
            return await store.answer_pause(r.tenant_id, r.session_id, answer)
        except CheckpointConflict as exc:
            # Decided differently by the bytes; the same answer from someone else is the same answer all the same.
            recorded = exc.recorded
            if recorded is None or not answers.same(sessions_pb2.CheckpointDecision.FromString(recorded), r.decision):
                raise
            return await store.answer_pause(r.tenant_id, r.session_id, replace(answer, kind="", decision=None))
    except LeaseHeld as exc:
        busy = status_of(exc)  # the answer is recorded; "resuming": follow the resume under way
        busy.metadata["resuming"] = "true" if exc.resuming else "false"
        raise busy from exc


def _answered_to_proto(answered: PauseAnswered) -> sessions_pb2.AnswerPauseResponse:
    return sessions_pb2.AnswerPauseResponse(
        checkpoint=checkpoint_to_proto(answered.checkpoint),
        lease_token=answered.token,
        start_seq=answered.start_seq,
        entries=_journal_to_proto(answered.journal).entries,
    )


# --------------------------------------------------------------------------- requests -> domain values


async def list_scoped(
    store: SessionStore,
    tenant_id: str,
    cursor: int | None,
    size: int,
    scope_filter: dict[str, str],
    where: search.SessionFilter | None = None,
) -> Page[SessionRecord]:
    """A page of the tenant's sessions whose scope holds `scope_filter`, read from the store's scope index,
    and that `where` matches (search.matches)."""
    if where:
        return await store.list_sessions(tenant_id, cursor, size, scope_filter or None, where)
    return await store.list_sessions(tenant_id, cursor, size, scope_filter or None)


def _new_session(r: sessions_pb2.CreateSessionRequest) -> NewSession:
    return NewSession(
        user_id=r.user_id,
        topic_id=r.topic_id,
        agent=r.agent,
        role_id=r.role_id,
        active_skill_ids=tuple(r.active_skill_ids),
        runtime_config=struct_to_dict(r.runtime_config),
        delegated_from=r.delegated_from,
        scope=dict(r.scope),
        labels=dict(r.labels),
        agent_version=r.agent_version,
    )


def _session_update(r: sessions_pb2.UpdateSessionRequest, labels: search.LabelUpdate | None) -> SessionUpdate:
    """Only the fields the mask names change."""
    paths = set(r.update_mask.paths)
    return SessionUpdate(
        labels=labels.replace if labels is not None else None,
        label_changes=labels.changes if labels is not None and labels.changes else None,
        role_id=r.role_id if "role_id" in paths else None,
        active_skill_ids=tuple(r.active_skill_ids) if "active_skill_ids" in paths else None,
        prompt_hash=r.prompt_hash if "prompt_hash" in paths else None,
        runtime_config=struct_to_dict(r.runtime_config) if "runtime_config" in paths else None,
        delegated_from=r.delegated_from if "delegated_from" in paths else None,
        delegation_turn_count=r.delegation_turn_count if "delegation_turn_count" in paths else None,
        active_agent=r.active_agent if "active_agent" in paths else None,
        agent=r.agent if "agent" in paths else None,
        agent_version=r.agent_version if "agent" in paths else None,
        plan=(r.plan.SerializeToString(deterministic=True) if r.HasField("plan") else b"") if "plan" in paths else None,
    )


def _new_checkpoint(checkpoint: sessions_pb2.Checkpoint) -> NewCheckpoint:
    """The checkpoint as stored: its request names the checkpoint's interrupt id."""
    kind = checkpoint.WhichOneof("request")
    assert kind is not None  # _check_write_checkpoint refused the request otherwise
    asked = getattr(checkpoint, kind)
    stored_request = type(asked)()
    stored_request.CopyFrom(asked)
    stored_request.interrupt_id = checkpoint.interrupt_id
    return NewCheckpoint(
        interrupt_id=checkpoint.interrupt_id,
        turn_id=checkpoint.turn_id,
        kind=kind,
        request=stored_request.SerializeToString(deterministic=True),
        payload=checkpoint.payload,
    )


# --------------------------------------------------------------------------- RPCs of more than one store call


async def _list_messages(
    store: SessionStore, r: sessions_pb2.ListMessagesRequest, size: int
) -> sessions_pb2.ListMessagesResponse:
    """The last n messages, or a page from an offset; either way no more than fits in one response."""
    next_offset: int | None = None
    if r.through_turn_id:
        offset = decode_page_token(r.page_token, "o") or 0
        page = await history.messages_through(store, r.tenant_id, r.session_id, r.through_turn_id, offset, size)
        payloads = _fit(page.items, MAX_PAGE_BYTES)
        next_offset = offset + len(payloads) if len(payloads) < len(page.items) else page.next_cursor
    elif r.last_n:
        last = await store.last_messages(r.tenant_id, r.session_id, r.last_n)
        payloads = _fit(last, MAX_PAGE_BYTES, newest=True)
    else:
        offset = decode_page_token(r.page_token, "o") or 0
        page = await store.list_messages(r.tenant_id, r.session_id, offset, size)
        payloads = _fit(page.items, MAX_PAGE_BYTES)
        trimmed = len(payloads) < len(page.items)
        next_offset = offset + len(payloads) if trimmed else page.next_cursor
    return sessions_pb2.ListMessagesResponse(
        messages=[messages_pb2.Message.FromString(p) for p in payloads],
        next_page_token=encode_page_token("o", next_offset),
    )


async def _decide(store: SessionStore, r: sessions_pb2.DecideCheckpointRequest) -> CheckpointRecord:
    # The kind of a checkpoint never changes, so checking the answer against it first is safe.
    pending = await store.get_checkpoint(r.tenant_id, r.session_id, r.interrupt_id)
    _check_decision(pending.kind, r.decision)
    return await store.decide_checkpoint(r.tenant_id, r.session_id, r.interrupt_id, _decision_bytes(r.decision))


# --------------------------------------------------------------------------- store results -> responses

WithState = TypeVar(
    "WithState",
    sessions_pb2.CreateSessionResponse,
    sessions_pb2.GetSessionResponse,
    sessions_pb2.LookupSessionResponse,
    sessions_pb2.UpdateSessionResponse,
)


def _with_state(response: WithState, record: SessionRecord) -> WithState:
    response.session.CopyFrom(session_to_proto(record))
    response.state.CopyFrom(state_to_proto(record))
    return response


def _lease_response(state: LeaseState) -> sessions_pb2.GetTurnLeaseResponse:
    response = sessions_pb2.GetTurnLeaseResponse(queued_turn_ids=list(state.queued_turn_ids))
    if state.lease is not None:
        response.lease.CopyFrom(
            sessions_pb2.TurnLease(
                turn_id=state.lease.turn_id,
                lease_token=state.lease.token,
                expire_time=_timestamp(state.lease.expires_at),
                interrupt_requested_by=state.lease.interrupt_requested_by,
                holder=state.lease.holder,
                takeovers=state.lease.takeovers,
                resume=_resume(state.lease.resume),
            )
        )
    return response


def _holder(r: sessions_pb2.AcquireTurnLeaseRequest) -> lease_holders.Holder:
    """Who asks for the lease: a turn, or a resume of it (typed, or as an older caller spells it in turn_id)."""
    if r.HasField("resume"):
        return lease_holders.Holder(r.turn_id, r.resume.attempt_id)
    return lease_holders.parse_holder(r.turn_id)


def _resume(attempt: str) -> sessions_pb2.LeaseResume | None:
    return sessions_pb2.LeaseResume(attempt_id=attempt) if attempt else None


def _claimed_to_proto(c: Claimed) -> sessions_pb2.ClaimedTurn:
    return sessions_pb2.ClaimedTurn(
        tenant_id=c.tenant_id,
        session_id=c.session_id,
        turn_id=c.turn_id,
        lease_token=c.token,
        takeovers=c.takeovers,
        last_seq=c.last_seq,
        previous_holder=c.previous_holder,
        interrupt_requested_by=c.interrupt_requested_by,
        resume=_resume(c.resume),
    )


async def _acquire(
    store: SessionStore, r: sessions_pb2.AcquireTurnLeaseRequest, parsed: tuple[float, NewEvents | None], context: Any
) -> tuple[LeaseGrant, Rehydration | None]:
    """The grant and, when asked and granted, the session as the turn starts from it (read after the grant)."""
    ttl, opening = parsed
    strategy, wait = _STRATEGIES[r.strategy], _max_wait(context)
    held = _holder(r)
    # A rollback rewinds the session after the grant: its rehydration is read after that, apart.
    rolls_back = strategy is Strategy.ROLLBACK
    with_grant = 0 if rolls_back else max(0, r.start_messages)
    grant = await leases.acquire(
        store,
        r.tenant_id,
        r.session_id,
        held.turn_id,
        ttl,
        strategy,
        wait,
        opening,
        resume=held.resume,
        rehydrate=with_grant,
    )
    if rolls_back and grant.interrupted_turn_id:
        await _roll_back(store, r, grant, held.turn_id)
    if r.start_messages <= 0 or grant.pending_interrupt_ids:
        return grant, None
    return grant, grant.rehydration or await store.rehydrate(r.tenant_id, r.session_id, r.start_messages)


async def _roll_back(
    store: SessionStore, r: sessions_pb2.AcquireTurnLeaseRequest, grant: LeaseGrant, turn_id: str
) -> None:
    """Drop the turn this one interrupted, under the new lease and before the turn's start is read, so the
    new turn never sees its messages; the void range ends where the grant's own events begin."""
    try:
        await history.rewind(
            store,
            r.tenant_id,
            r.session_id,
            grant.interrupted_turn_id,
            turn_id,
            reason=history.ROLLBACK,
            token=grant.token,
            logged_under=turn_id,
            void_through=grant.start_seq,
            missing_ok=True,
        )
    except BaseException:
        # The turn was not started: give the lease up so the session is not left held.
        with contextlib.suppress(SessionError):
            await store.release_lease(r.tenant_id, r.session_id, grant.token)
        raise


def _list_turns_response(page: history.TurnsPage) -> sessions_pb2.ListTurnsResponse:
    return sessions_pb2.ListTurnsResponse(turns=page.turns, next_page_token=encode_page_token("t", page.next_offset))


def _fork_request(r: sessions_pb2.ForkSessionRequest) -> history.ForkRequest:
    return history.ForkRequest(
        r.turn_id, r.before_turn, r.agent, dict(r.labels) or None, r.user_id, r.topic_id, r.agent_version
    )


def _grant_response(result: tuple[LeaseGrant, Rehydration | None]) -> sessions_pb2.AcquireTurnLeaseResponse:
    grant, begun = result
    response = sessions_pb2.AcquireTurnLeaseResponse(
        lease_token=grant.token,
        interrupted_turn_id=grant.interrupted_turn_id,
        expire_time=_timestamp(grant.expires_at),
        waited_seconds=grant.waited_s,
        pending_interrupt_ids=grant.pending_interrupt_ids,
        start_seq=grant.start_seq,
        last_seq=grant.last_seq,
    )
    if begun is not None:
        start = response.start
        start.session.CopyFrom(session_to_proto(begun.session))
        start.state.CopyFrom(state_to_proto(begun.session))
        loaded = _fit(begun.last_messages, MAX_PAGE_BYTES, newest=True)
        covered = 0
        if begun.summary is not None:
            start.summary.CopyFrom(summary_to_proto(begun.summary))
            covered = begun.summary.covered_message_count
        first = begun.session.message_count - len(loaded)  # the messages the summary covers stay out
        start.messages.extend(messages_pb2.Message.FromString(p) for p in loaded[max(0, covered - first) :])
    return response


def _rehydration_response(payload: Rehydration) -> sessions_pb2.GetRehydrationPayloadResponse:
    response = sessions_pb2.GetRehydrationPayloadResponse(
        session=session_to_proto(payload.session),
        state=state_to_proto(payload.session),
        last_messages=[
            messages_pb2.Message.FromString(p) for p in _fit(payload.last_messages, MAX_PAGE_BYTES, newest=True)
        ],
    )
    if payload.summary is not None:
        response.summary.CopyFrom(summary_to_proto(payload.summary))
    if payload.goal is not None:
        response.goal.CopyFrom(goal_to_proto(payload.goal))
    if payload.phase is not None:
        response.phase.CopyFrom(phase_to_proto(payload.phase))
    return response


# --------------------------------------------------------------------------- RPC -> store call

Req = TypeVar("Req", bound=Message)
Parsed = TypeVar("Parsed")
Result = TypeVar("Result")


@dataclass(frozen=True)
class Rpc:
    """One RPC over the store (build it with `rpc`, which type-checks the parts against each other).

    `check` records every problem of the request and returns what it worked out on the way
    (a page size, a TTL, the messages as stored); nothing is called while a problem stands.
    `call(store, request, parsed, context)` makes the store call; `answer` builds the
    response from its result. A domain error on the way becomes its status (STATUSES).
    """

    request: type[Message]
    check: Callable[[Any, Violations], Any]
    call: Callable[[SessionStore, Any, Any, Any], Awaitable[Any]]
    answer: Callable[[Any], Message]

    async def handle(self, store: SessionStore, request: Message, context: Any) -> Message:
        try:
            problems = Violations()
            parsed = self.check(request, problems)
            problems.raise_if_any()
            return self.answer(await self.call(store, request, parsed, context))
        except SessionError as exc:
            raise status_of(exc) from exc


def rpc(
    request: type[Req],
    check: Callable[[Req, Violations], Parsed],
    call: Callable[[SessionStore, Req, Parsed, Any], Awaitable[Result]],
    answer: Callable[[Result], Message],
) -> Rpc:
    return Rpc(request, check, call, answer)


RPCS: dict[str, Rpc] = {
    # sessions
    "CreateSession": rpc(
        sessions_pb2.CreateSessionRequest,
        _check_create,
        lambda store, r, _, __: store.create(r.tenant_id, _new_session(r), r.reuse_existing),
        lambda made: _with_state(sessions_pb2.CreateSessionResponse(reused=made[1]), made[0]),
    ),
    "GetSession": rpc(
        sessions_pb2.GetSessionRequest,
        _rules_only,
        lambda store, r, _, __: store.get(r.tenant_id, r.session_id),
        lambda record: _with_state(sessions_pb2.GetSessionResponse(), record),
    ),
    "LookupSession": rpc(
        sessions_pb2.LookupSessionRequest,
        _check_lookup,
        lambda store, r, _, __: store.lookup(r.tenant_id, r.user_id, r.topic_id, dict(r.scope)),
        lambda record: _with_state(sessions_pb2.LookupSessionResponse(), record),
    ),
    "ListSessions": rpc(
        sessions_pb2.ListSessionsRequest,
        _check_list_sessions,
        lambda store, r, parsed, _: list_scoped(
            store, r.tenant_id, decode_page_token(r.page_token, "c"), parsed[0], dict(r.scope_filter), parsed[1]
        ),
        lambda page: sessions_pb2.ListSessionsResponse(
            sessions=[session_to_proto(s) for s in page.items],
            next_page_token=encode_page_token("c", page.next_cursor),
        ),
    ),
    "UpdateSession": rpc(
        sessions_pb2.UpdateSessionRequest,
        _check_update,
        lambda store, r, labels, _: store.update(r.tenant_id, r.session_id, _session_update(r, labels), r.lease_token),
        lambda record: _with_state(sessions_pb2.UpdateSessionResponse(), record),
    ),
    "DeleteSession": rpc(
        sessions_pb2.DeleteSessionRequest,
        _rules_only,
        lambda store, r, _, __: store.delete(r.tenant_id, r.session_id),
        lambda deleted: sessions_pb2.DeleteSessionResponse(deleted=deleted),
    ),
    "CloseAllSessions": rpc(
        sessions_pb2.CloseAllSessionsRequest,
        _rules_only,
        lambda store, r, _, __: store.close_all(r.tenant_id, r.user_id),
        lambda closed: sessions_pb2.CloseAllSessionsResponse(closed_count=closed),
    ),
    # messages
    "AppendMessages": rpc(
        sessions_pb2.AppendMessagesRequest,
        _stored_messages,
        lambda store, r, payloads, _: store.append_messages(
            r.tenant_id, r.session_id, payloads, r.lease_token, r.request_id
        ),
        lambda result: sessions_pb2.AppendMessagesResponse(
            message_count=result.message_count, deduplicated=result.deduplicated
        ),
    ),
    "ListMessages": rpc(
        sessions_pb2.ListMessagesRequest,
        _check_list_messages,
        lambda store, r, size, _: _list_messages(store, r, size),
        lambda response: response,
    ),
    # the turn lease
    "AcquireTurnLease": rpc(sessions_pb2.AcquireTurnLeaseRequest, _check_acquire, _acquire, _grant_response),
    "ReleaseTurnLease": rpc(
        sessions_pb2.ReleaseTurnLeaseRequest,
        _rules_only,
        lambda store, r, _, __: store.release_lease(r.tenant_id, r.session_id, r.lease_token),
        lambda released: sessions_pb2.ReleaseTurnLeaseResponse(released=released),
    ),
    "RenewTurnLease": rpc(
        sessions_pb2.RenewTurnLeaseRequest,
        _check_renew,
        lambda store, r, ttl, _: store.renew_lease(
            r.tenant_id, r.session_id, r.lease_token, ttl, r.holder, r.hand_over
        ),
        lambda info: sessions_pb2.RenewTurnLeaseResponse(
            expire_time=_timestamp(info.expires_at), interrupt_requested_by=info.interrupt_requested_by
        ),
    ),
    "GetTurnLease": rpc(
        sessions_pb2.GetTurnLeaseRequest,
        _rules_only,
        lambda store, r, _, __: store.lease_state(r.tenant_id, r.session_id),
        _lease_response,
    ),
    # summary, goals, phase
    "UpdateSummary": rpc(
        sessions_pb2.UpdateSummaryRequest,
        _rules_only,
        lambda store, r, _, __: store.update_summary(
            r.tenant_id, r.session_id, r.text, r.covered_message_count, r.lease_token
        ),
        lambda summary: sessions_pb2.UpdateSummaryResponse(summary=summary_to_proto(summary)),
    ),
    "SaveGoal": rpc(
        sessions_pb2.SaveGoalRequest,
        _check_goal,
        lambda store, r, _, __: store.save_goal(
            r.tenant_id,
            r.session_id,
            r.goal.goal_id,
            r.goal.text,
            _GOAL_STATUS[r.goal.status],
            struct_to_dict(r.goal.data),
            r.lease_token,
        ),
        lambda goal: sessions_pb2.SaveGoalResponse(goal=goal_to_proto(goal)),
    ),
    "ListGoals": rpc(
        sessions_pb2.ListGoalsRequest,
        _rules_only,
        lambda store, r, _, __: store.list_goals(r.tenant_id, r.session_id),
        lambda goals: sessions_pb2.ListGoalsResponse(goals=[goal_to_proto(g) for g in goals]),
    ),
    "SetPhase": rpc(
        sessions_pb2.SetPhaseRequest,
        _check_phase,
        lambda store, r, _, __: store.set_phase(
            r.tenant_id, r.session_id, r.phase.phase, struct_to_dict(r.phase.data), r.lease_token
        ),
        lambda phase: sessions_pb2.SetPhaseResponse(phase=phase_to_proto(phase)),
    ),
    # checkpoints of paused turns
    "WriteCheckpoint": rpc(
        sessions_pb2.WriteCheckpointRequest,
        _check_write_checkpoint,
        lambda store, r, _, __: store.write_checkpoint(
            r.tenant_id, r.session_id, _new_checkpoint(r.checkpoint), r.lease_token
        ),
        lambda written: sessions_pb2.WriteCheckpointResponse(checkpoint=checkpoint_to_proto(written)),
    ),
    "GetCheckpoint": rpc(
        sessions_pb2.GetCheckpointRequest,
        _rules_only,
        lambda store, r, _, __: store.get_checkpoint(r.tenant_id, r.session_id, r.interrupt_id),
        lambda found: sessions_pb2.GetCheckpointResponse(checkpoint=checkpoint_to_proto(found)),
    ),
    "ListCheckpoints": rpc(
        sessions_pb2.ListCheckpointsRequest,
        _rules_only,
        lambda store, r, _, __: store.list_checkpoints(r.tenant_id, r.session_id),
        lambda found: sessions_pb2.ListCheckpointsResponse(checkpoints=[checkpoint_to_proto(c) for c in found]),
    ),
    "DecideCheckpoint": rpc(
        sessions_pb2.DecideCheckpointRequest,
        _check_decide,
        lambda store, r, _, __: _decide(store, r),
        lambda decided: sessions_pb2.DecideCheckpointResponse(checkpoint=checkpoint_to_proto(decided)),
    ),
    "ConsumeCheckpoint": rpc(
        sessions_pb2.ConsumeCheckpointRequest,
        _rules_only,
        lambda store, r, _, __: store.consume_checkpoint(
            r.tenant_id, r.session_id, r.interrupt_id, r.lease_token, r.allow_undecided
        ),
        lambda consumed: sessions_pb2.ConsumeCheckpointResponse(checkpoint=checkpoint_to_proto(consumed)),
    ),
    "AnswerPause": rpc(sessions_pb2.AnswerPauseRequest, _check_answer_pause, _answer_pause, _answered_to_proto),
    # the event log and the turns' journals
    "AppendEvents": rpc(
        sessions_pb2.AppendEventsRequest,
        _check_append,
        lambda store, r, new, _: store.append_events(r.tenant_id, r.session_id, new),
        _appended_to_proto,
    ),
    "GetEventLogState": rpc(
        sessions_pb2.GetEventLogStateRequest,
        _rules_only,
        lambda store, r, _, __: store.log_state(r.tenant_id, r.session_id),
        lambda state: sessions_pb2.GetEventLogStateResponse(
            first_seq=state.first_seq, last_seq=state.last_seq, ends_with_turn_end=state.ends_with_turn_end
        ),
    ),
    "GetJournal": rpc(
        sessions_pb2.GetJournalRequest,
        _rules_only,
        lambda store, r, _, __: store.journal(r.tenant_id, r.session_id, r.turn_id),
        _journal_to_proto,
    ),
    "RenewTurnLeases": rpc(
        sessions_pb2.RenewTurnLeasesRequest,
        _check_renew_many,
        lambda store, _, renewals, __: store.renew_leases(renewals),
        lambda renewed: sessions_pb2.RenewTurnLeasesResponse(leases=[_renewed_to_proto(r) for r in renewed]),
    ),
    "ClaimOrphanedTurns": rpc(
        sessions_pb2.ClaimOrphanedTurnsRequest,
        _check_claim,
        lambda store, r, parsed, _: store.claim_orphans(r.holder, parsed[0], parsed[1]),
        lambda claimed: sessions_pb2.ClaimOrphanedTurnsResponse(
            turns=[_claimed_to_proto(c) for c in claimed], none_open=claimed.none_open
        ),
    ),
    "InterruptTurn": rpc(
        sessions_pb2.InterruptTurnRequest,
        _rules_only,
        lambda store, r, _, __: store.interrupt_turn(r.tenant_id, r.session_id, r.turn_id, r.requested_by or "cancel"),
        _interrupted_to_proto,
    ),
    # time travel (services/sessions/history.py)
    "ListTurns": rpc(
        sessions_pb2.ListTurnsRequest,
        _check_list_turns,
        lambda store, r, size, _: history.list_turns(
            store, r.tenant_id, r.session_id, decode_page_token(r.page_token, "t") or 0, size, r.include_steps
        ),
        _list_turns_response,
    ),
    "ForkSession": rpc(
        sessions_pb2.ForkSessionRequest,
        _check_fork,
        lambda store, r, _, __: history.fork(store, r.tenant_id, r.session_id, _fork_request(r)),
        lambda made: sessions_pb2.ForkSessionResponse(session=session_to_proto(made[0]), message_count=made[1]),
    ),
    "RewindSession": rpc(
        sessions_pb2.RewindSessionRequest,
        _rules_only,
        lambda store, r, _, __: history.rewind(store, r.tenant_id, r.session_id, r.turn_id, r.requested_by),
        lambda done: sessions_pb2.RewindSessionResponse(session=session_to_proto(done[0]), event=done[1]),
    ),
    # rehydration
    "GetRehydrationPayload": rpc(
        sessions_pb2.GetRehydrationPayloadRequest,
        _rules_only,
        lambda store, r, _, __: store.rehydrate(r.tenant_id, r.session_id, r.last_n or DEFAULT_REHYDRATION_MESSAGES),
        _rehydration_response,
    ),
}


class SessionsServicer(sessions_pb2_grpc.SessionsServiceServicer):
    """Answers each unary RPC of SessionsService from its row of RPCS (`_answer`: the checks, the store
    call and the domain error's status, in one place), and the streams with methods of their own."""

    def __init__(self, store: SessionStore):
        self.store = store
        # Set when the replica drains: the long-lived streams answer what they took and end
        # UNAVAILABLE, so their callers reopen them on another replica instead of holding the stop.
        self.draining = asyncio.Event()
        self.held_looks = 0  # ClaimOrphanedTurns calls waiting for a turn to open

    async def drain(self) -> None:
        self.draining.set()

    async def _answer(self, name: str, request: Message, context: Any) -> Message:
        return await RPCS[name].handle(self.store, request, context)

    # sessions

    async def CreateSession(self, request: sessions_pb2.CreateSessionRequest, context: Any) -> Message:
        return await self._answer("CreateSession", request, context)

    async def GetSession(self, request: sessions_pb2.GetSessionRequest, context: Any) -> Message:
        return await self._answer("GetSession", request, context)

    async def LookupSession(self, request: sessions_pb2.LookupSessionRequest, context: Any) -> Message:
        return await self._answer("LookupSession", request, context)

    async def ListSessions(self, request: sessions_pb2.ListSessionsRequest, context: Any) -> Message:
        return await self._answer("ListSessions", request, context)

    async def UpdateSession(self, request: sessions_pb2.UpdateSessionRequest, context: Any) -> Message:
        return await self._answer("UpdateSession", request, context)

    async def DeleteSession(self, request: sessions_pb2.DeleteSessionRequest, context: Any) -> Message:
        return await self._answer("DeleteSession", request, context)

    async def CloseAllSessions(self, request: sessions_pb2.CloseAllSessionsRequest, context: Any) -> Message:
        return await self._answer("CloseAllSessions", request, context)

    # messages

    async def AppendMessages(self, request: sessions_pb2.AppendMessagesRequest, context: Any) -> Message:
        return await self._answer("AppendMessages", request, context)

    async def ListMessages(self, request: sessions_pb2.ListMessagesRequest, context: Any) -> Message:
        return await self._answer("ListMessages", request, context)

    # the turn lease

    async def AcquireTurnLease(self, request: sessions_pb2.AcquireTurnLeaseRequest, context: Any) -> Message:
        return await self._answer("AcquireTurnLease", request, context)

    async def ReleaseTurnLease(self, request: sessions_pb2.ReleaseTurnLeaseRequest, context: Any) -> Message:
        return await self._answer("ReleaseTurnLease", request, context)

    async def RenewTurnLease(self, request: sessions_pb2.RenewTurnLeaseRequest, context: Any) -> Message:
        return await self._answer("RenewTurnLease", request, context)

    async def GetTurnLease(self, request: sessions_pb2.GetTurnLeaseRequest, context: Any) -> Message:
        return await self._answer("GetTurnLease", request, context)

    # summary, goals, phase

    async def UpdateSummary(self, request: sessions_pb2.UpdateSummaryRequest, context: Any) -> Message:
        return await self._answer("UpdateSummary", request, context)

    async def SaveGoal(self, request: sessions_pb2.SaveGoalRequest, context: Any) -> Message:
        return await self._answer("SaveGoal", request, context)

    async def ListGoals(self, request: sessions_pb2.ListGoalsRequest, context: Any) -> Message:
        return await self._answer("ListGoals", request, context)

    async def SetPhase(self, request: sessions_pb2.SetPhaseRequest, context: Any) -> Message:
        return await self._answer("SetPhase", request, context)

    # checkpoints of paused turns

    async def WriteCheckpoint(self, request: sessions_pb2.WriteCheckpointRequest, context: Any) -> Message:
        return await self._answer("WriteCheckpoint", request, context)

    async def GetCheckpoint(self, request: sessions_pb2.GetCheckpointRequest, context: Any) -> Message:
        return await self._answer("GetCheckpoint", request, context)

    async def ListCheckpoints(self, request: sessions_pb2.ListCheckpointsRequest, context: Any) -> Message:
        return await self._answer("ListCheckpoints", request, context)

    async def DecideCheckpoint(self, request: sessions_pb2.DecideCheckpointRequest, context: Any) -> Message:
        return await self._answer("DecideCheckpoint", request, context)

    async def ConsumeCheckpoint(self, request: sessions_pb2.ConsumeCheckpointRequest, context: Any) -> Message:
        return await self._answer("ConsumeCheckpoint", request, context)

    async def AnswerPause(self, request: sessions_pb2.AnswerPauseRequest, context: Any) -> Message:
        return await self._answer("AnswerPause", request, context)

    # the event log and the turns' journals

    async def AppendEvents(self, request: sessions_pb2.AppendEventsRequest, context: Any) -> Message:
        return await self._answer("AppendEvents", request, context)

    async def GetEventLogState(self, request: sessions_pb2.GetEventLogStateRequest, context: Any) -> Message:
        return await self._answer("GetEventLogState", request, context)

    async def GetJournal(self, request: sessions_pb2.GetJournalRequest, context: Any) -> Message:
        return await self._answer("GetJournal", request, context)

    async def RenewTurnLeases(self, request: sessions_pb2.RenewTurnLeasesRequest, context: Any) -> Message:
        return await self._answer("RenewTurnLeases", request, context)

    async def ClaimOrphanedTurns(self, request: sessions_pb2.ClaimOrphanedTurnsRequest, context: Any) -> Message:
        opened = self.store.turns_opened()  # before the look: a turn opening during it ends the wait
        reply = await self._answer("ClaimOrphanedTurns", request, context)
        none_open = isinstance(reply, sessions_pb2.ClaimOrphanedTurnsResponse) and reply.none_open
        if none_open and request.wait_seconds > 0 and opened is not None and not self.draining.is_set():
            # Nothing open: the answer is the same later, so it waits for work (or the drain) to give it.
            self.held_looks += 1
            try:
                await first_of(self.store.until_turn_opens(opened, request.wait_seconds), self.draining.wait())
            finally:
                self.held_looks -= 1
        return reply

    async def InterruptTurn(self, request: sessions_pb2.InterruptTurnRequest, context: Any) -> Message:
        return await self._answer("InterruptTurn", request, context)

    # time travel

    async def ListTurns(self, request: sessions_pb2.ListTurnsRequest, context: Any) -> Message:
        return await self._answer("ListTurns", request, context)

    async def ForkSession(self, request: sessions_pb2.ForkSessionRequest, context: Any) -> Message:
        return await self._answer("ForkSession", request, context)

    async def RewindSession(self, request: sessions_pb2.RewindSessionRequest, context: Any) -> Message:
        return await self._answer("RewindSession", request, context)

    # rehydration

    async def GetRehydrationPayload(self, request: sessions_pb2.GetRehydrationPayloadRequest, context: Any) -> Message:
        return await self._answer("GetRehydrationPayload", request, context)

    # the streams

    async def AppendEventsStream(
        self, requests: AsyncIterator[sessions_pb2.AppendEventsStreamRequest], context: Any
    ) -> AsyncIterator[sessions_pb2.AppendEventsStreamResponse]:
        async def append(request: sessions_pb2.AppendEventsRequest) -> Message:
            check_rules(request)  # the stream's appends skip the kit's interceptor: each fails on its own
            return await self._answer("AppendEvents", request, context)

        async for result in serve_appends(requests, append, self.draining):
            yield result

    async def WatchEvents(
        self, requests: AsyncIterator[sessions_pb2.WatchEventsRequest], context: Any
    ) -> AsyncIterator[Any]:
        async for response in watch_events(self.store, requests, self.draining, status_of):
            yield response

    async def ReadEvents(self, request: sessions_pb2.ReadEventsRequest, context: Any) -> AsyncIterator[Any]:
        problems = Violations()
        heartbeat_s = _check_read(request, problems)
        problems.raise_if_any()
        reading = self.store.read_events(
            request.tenant_id, request.session_id, request.after_seq, request.follow, heartbeat_s
        )
        try:
            async for batch in reading:
                if batch is None:
                    yield _EMPTY
                else:  # events are field 1 here as in the log's encoding: its bytes are this response
                    yield batch.wire or sessions_pb2.ReadEventsResponse(events=batch)
        except SessionError as exc:
            raise status_of(exc) from exc


_EMPTY = sessions_pb2.ReadEventsResponse()
# RPCs answered by a method of their own, not a row of RPCS.
STREAMS = frozenset({"ReadEvents", "AppendEventsStream", "WatchEvents"})
