"""SessionsService over a SessionStore: validation, paging tokens, proto <-> domain mapping.

Domain errors become statuses in one place (`_status_error`): a foreign tenant's
session is NOT_FOUND like a missing one, a busy session FAILED_PRECONDITION naming
the running turn, an unreachable store UNAVAILABLE with retryable=true.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf import struct_pb2, timestamp_pb2

from cogmesh.common.v1 import errors_pb2, events_pb2, messages_pb2, resources_pb2
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
from services.kit.protos import APPROVAL_DECISIONS, dict_to_struct, now, struct_to_dict
from services.sessions import leases
from services.sessions.model import Checkpoint as CheckpointRecord
from services.sessions.model import (
    CheckpointConflict,
    CheckpointExists,
    CheckpointNotFound,
    Goal,
    GoalStatus,
    InvalidValue,
    LeaseHeld,
    LimitExceeded,
    NewCheckpoint,
    NewSession,
    Phase,
    SessionError,
    SessionNotFound,
    SessionRecord,
    SessionUpdate,
    StaleLease,
    StoreUnavailable,
    Strategy,
    Summary,
)
from services.sessions.store import SessionStore

MAX_PAGE = 1000
MAX_ID = 256
MAX_MESSAGE_BYTES = 1 << 20
MAX_MESSAGES_PER_APPEND = 1000
MAX_PAGE_BYTES = 3 << 20  # stay well under gRPC's 4 MiB message limit
MAX_JSON_BYTES = 64 << 10
MAX_SUMMARY_BYTES = 256 << 10
MAX_GOAL_TEXT = 16 << 10
MAX_SKILLS = 100
MAX_PAYLOAD_BYTES = 3 << 20
DEFAULT_LEASE_TTL_S = 300
DEFAULT_REHYDRATION_MESSAGES = 10
MAX_LEASE_WAIT_S = 600.0  # an ENQUEUE without a deadline still gives up eventually

_STRATEGIES = {
    sessions_pb2.MULTITASK_STRATEGY_UNSPECIFIED: Strategy.REJECT,
    sessions_pb2.MULTITASK_STRATEGY_REJECT: Strategy.REJECT,
    sessions_pb2.MULTITASK_STRATEGY_ENQUEUE: Strategy.ENQUEUE,
    sessions_pb2.MULTITASK_STRATEGY_INTERRUPT: Strategy.INTERRUPT,
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
_UPDATE_PATHS = (
    "role_id",
    "active_skill_ids",
    "prompt_hash",
    "runtime_config",
    "delegated_from",
    "delegation_turn_count",
)


class AlreadyExists(CogmeshError):
    code = grpc.StatusCode.ALREADY_EXISTS


# --------------------------------------------------------------------------- errors


def _status_error(exc: SessionError) -> CogmeshError:
    if isinstance(exc, SessionNotFound):
        return NotFound(
            str(exc), reason=errors_pb2.ERROR_REASON_SESSION_NOT_FOUND, metadata={"session_id": exc.session_id}
        )
    if isinstance(exc, LeaseHeld):
        return FailedPrecondition(
            str(exc),
            reason=errors_pb2.ERROR_REASON_TURN_IN_PROGRESS,
            metadata={"session_id": exc.session_id, "turn_id": exc.turn_id, "waited_seconds": f"{exc.waited_s:.3f}"},
        )
    if isinstance(exc, StaleLease):
        return FailedPrecondition(
            str(exc),
            reason=errors_pb2.ERROR_REASON_TURN_NOT_FOUND,
            metadata={"session_id": exc.session_id, "lease_token": str(exc.token)},
        )
    if isinstance(exc, CheckpointNotFound):
        # A paused turn that does not exist (or was already resumed).
        return NotFound(
            str(exc),
            reason=errors_pb2.ERROR_REASON_TURN_NOT_FOUND,
            metadata={"session_id": exc.session_id, "interrupt_id": exc.interrupt_id},
        )
    if isinstance(exc, CheckpointExists):
        return AlreadyExists(str(exc), metadata={"session_id": exc.session_id, "interrupt_id": exc.interrupt_id})
    if isinstance(exc, CheckpointConflict):
        return FailedPrecondition(
            str(exc), metadata={"session_id": exc.session_id, "interrupt_id": exc.interrupt_id, "conflict": exc.why}
        )
    if isinstance(exc, InvalidValue):
        return InvalidArgument([(exc.field_name, str(exc))])
    if isinstance(exc, LimitExceeded):
        return ResourceExhausted(str(exc))
    if isinstance(exc, StoreUnavailable):
        return Unavailable(str(exc), metadata={"dependency": "session-store", "retryable": "true"})
    return CogmeshError(str(exc))


R = TypeVar("R")
Resp = TypeVar(
    "Resp",
    sessions_pb2.CreateSessionResponse,
    sessions_pb2.GetSessionResponse,
    sessions_pb2.LookupSessionResponse,
    sessions_pb2.UpdateSessionResponse,
)


def _mapped(method: Callable[[Any, Any, Any], Awaitable[R]]) -> Callable[[Any, Any, Any], Awaitable[R]]:
    """Turn the domain errors a handler raises into statuses."""

    @functools.wraps(method)
    async def handler(self: Any, request: Any, context: Any) -> R:
        try:
            return await method(self, request, context)
        except SessionError as exc:
            raise _status_error(exc) from exc

    return handler


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


def page_size(value: int, default: int, problems: Violations) -> int:
    problems.check(0 <= value <= MAX_PAGE, "page_size", f"must be between 0 and {MAX_PAGE}")
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


def _check_id(value: str, name: str, problems: Violations, required: bool = True) -> None:
    if required:
        problems.require(value, name)
    problems.check(len(value) <= MAX_ID, name, f"must be at most {MAX_ID} characters")


def _identify(request: Any, problems: Violations) -> None:
    _check_id(request.tenant_id, "tenant_id", problems)
    _check_id(request.session_id, "session_id", problems)


def _check_skills(skills: Sequence[str], name: str, problems: Violations) -> None:
    problems.check(len(skills) <= MAX_SKILLS, name, f"must hold at most {MAX_SKILLS} skills")
    for i, skill in enumerate(skills):
        problems.check(len(skill.strip()) > 0 and len(skill) <= MAX_ID, f"{name}[{i}]", "must be 1..256 characters")


def _check_json(value: struct_pb2.Struct, name: str, problems: Violations) -> None:
    problems.check(value.ByteSize() <= MAX_JSON_BYTES, name, f"must be at most {MAX_JSON_BYTES >> 10} KiB")


def _check_token(token: int, problems: Violations) -> None:
    problems.check(token > 0, "lease_token", "is required: write while holding the turn lease")


def _lease_ttl(value: int, problems: Violations) -> float:
    problems.check(0 <= value <= 86_400, "ttl_seconds", "must be between 0 and 86400")
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


class SessionsServicer(sessions_pb2_grpc.SessionsServiceServicer):
    def __init__(self, store: SessionStore):
        self.store = store

    @staticmethod
    def _with_state(response: Resp, record: SessionRecord) -> Resp:
        response.session.CopyFrom(session_to_proto(record))
        response.state.CopyFrom(state_to_proto(record))
        return response

    # ----------------------------------------------------------------- sessions

    @_mapped
    async def CreateSession(
        self, request: sessions_pb2.CreateSessionRequest, context: Any
    ) -> sessions_pb2.CreateSessionResponse:
        problems = Violations()
        _check_id(request.tenant_id, "tenant_id", problems)
        _check_id(request.agent, "agent", problems)
        for name in ("user_id", "topic_id", "role_id", "delegated_from"):
            _check_id(getattr(request, name), name, problems, required=False)
        _check_skills(request.active_skill_ids, "active_skill_ids", problems)
        _check_json(request.runtime_config, "runtime_config", problems)
        problems.check(
            not request.reuse_existing or bool(request.user_id or request.topic_id),
            "reuse_existing",
            "needs user_id or topic_id to find the existing session",
        )
        problems.raise_if_any()
        new = NewSession(
            user_id=request.user_id,
            topic_id=request.topic_id,
            agent=request.agent,
            role_id=request.role_id,
            active_skill_ids=tuple(request.active_skill_ids),
            runtime_config=struct_to_dict(request.runtime_config),
            delegated_from=request.delegated_from,
        )
        record, reused = await self.store.create(request.tenant_id, new, request.reuse_existing)
        return self._with_state(sessions_pb2.CreateSessionResponse(reused=reused), record)

    @_mapped
    async def GetSession(
        self, request: sessions_pb2.GetSessionRequest, context: Any
    ) -> sessions_pb2.GetSessionResponse:
        problems = Violations()
        _identify(request, problems)
        problems.raise_if_any()
        record = await self.store.get(request.tenant_id, request.session_id)
        return self._with_state(sessions_pb2.GetSessionResponse(), record)

    @_mapped
    async def LookupSession(
        self, request: sessions_pb2.LookupSessionRequest, context: Any
    ) -> sessions_pb2.LookupSessionResponse:
        problems = Violations()
        _check_id(request.tenant_id, "tenant_id", problems)
        _check_id(request.user_id, "user_id", problems, required=False)
        _check_id(request.topic_id, "topic_id", problems, required=False)
        problems.check(bool(request.user_id or request.topic_id), "user_id", "user_id or topic_id is required")
        problems.raise_if_any()
        record = await self.store.lookup(request.tenant_id, request.user_id, request.topic_id)
        return self._with_state(sessions_pb2.LookupSessionResponse(), record)

    @_mapped
    async def ListSessions(
        self, request: sessions_pb2.ListSessionsRequest, context: Any
    ) -> sessions_pb2.ListSessionsResponse:
        problems = Violations()
        _check_id(request.tenant_id, "tenant_id", problems)
        size = page_size(request.page_size, 50, problems)
        problems.raise_if_any()
        cursor = decode_page_token(request.page_token, "c")
        page = await self.store.list_sessions(request.tenant_id, cursor, size)
        return sessions_pb2.ListSessionsResponse(
            sessions=[session_to_proto(r) for r in page.items],
            next_page_token=encode_page_token("c", page.next_cursor),
        )

    @_mapped
    async def UpdateSession(
        self, request: sessions_pb2.UpdateSessionRequest, context: Any
    ) -> sessions_pb2.UpdateSessionResponse:
        problems = Violations()
        _identify(request, problems)
        paths = list(request.update_mask.paths)
        problems.check(bool(paths), "update_mask", f"must name at least one of {', '.join(_UPDATE_PATHS)}")
        for path in paths:
            problems.check(path in _UPDATE_PATHS, "update_mask", f"unknown path {path!r}")
        _check_id(request.role_id, "role_id", problems, required=False)
        _check_id(request.prompt_hash, "prompt_hash", problems, required=False)
        _check_id(request.delegated_from, "delegated_from", problems, required=False)
        _check_skills(request.active_skill_ids, "active_skill_ids", problems)
        _check_json(request.runtime_config, "runtime_config", problems)
        problems.check(request.delegation_turn_count >= 0, "delegation_turn_count", "must not be negative")
        problems.raise_if_any()
        update = SessionUpdate(
            role_id=request.role_id if "role_id" in paths else None,
            active_skill_ids=tuple(request.active_skill_ids) if "active_skill_ids" in paths else None,
            prompt_hash=request.prompt_hash if "prompt_hash" in paths else None,
            runtime_config=struct_to_dict(request.runtime_config) if "runtime_config" in paths else None,
            delegated_from=request.delegated_from if "delegated_from" in paths else None,
            delegation_turn_count=request.delegation_turn_count if "delegation_turn_count" in paths else None,
        )
        record = await self.store.update(request.tenant_id, request.session_id, update, request.lease_token)
        return self._with_state(sessions_pb2.UpdateSessionResponse(), record)

    @_mapped
    async def DeleteSession(
        self, request: sessions_pb2.DeleteSessionRequest, context: Any
    ) -> sessions_pb2.DeleteSessionResponse:
        problems = Violations()
        _identify(request, problems)
        problems.raise_if_any()
        return sessions_pb2.DeleteSessionResponse(
            deleted=await self.store.delete(request.tenant_id, request.session_id)
        )

    @_mapped
    async def CloseAllSessions(
        self, request: sessions_pb2.CloseAllSessionsRequest, context: Any
    ) -> sessions_pb2.CloseAllSessionsResponse:
        problems = Violations()
        _check_id(request.tenant_id, "tenant_id", problems)
        _check_id(request.user_id, "user_id", problems, required=False)
        problems.raise_if_any()
        closed = await self.store.close_all(request.tenant_id, request.user_id)
        return sessions_pb2.CloseAllSessionsResponse(closed_count=closed)

    # ----------------------------------------------------------------- messages

    @_mapped
    async def AppendMessages(
        self, request: sessions_pb2.AppendMessagesRequest, context: Any
    ) -> sessions_pb2.AppendMessagesResponse:
        problems = Violations()
        _identify(request, problems)
        problems.check(len(request.messages) > 0, "messages", "must not be empty")
        problems.check(
            len(request.messages) <= MAX_MESSAGES_PER_APPEND,
            "messages",
            f"must hold at most {MAX_MESSAGES_PER_APPEND} messages",
        )
        problems.check(request.lease_token > 0, "lease_token", "is required: append while holding the turn lease")
        problems.check(len(request.request_id) <= 128, "request_id", "must be at most 128 characters")
        stamp = now()
        payloads = []
        for i, message in enumerate(request.messages):
            problems.check(message.role != messages_pb2.ROLE_UNSPECIFIED, f"messages[{i}].role", "must be set")
            stored = messages_pb2.Message()
            stored.CopyFrom(message)
            stored.create_time.CopyFrom(stamp)
            payload = stored.SerializeToString()
            problems.check(len(payload) <= MAX_MESSAGE_BYTES, f"messages[{i}]", "must be at most 1 MiB")
            payloads.append(payload)
        problems.raise_if_any()
        result = await self.store.append_messages(
            request.tenant_id, request.session_id, payloads, request.lease_token, request.request_id
        )
        return sessions_pb2.AppendMessagesResponse(message_count=result.message_count, deduplicated=result.deduplicated)

    @_mapped
    async def ListMessages(
        self, request: sessions_pb2.ListMessagesRequest, context: Any
    ) -> sessions_pb2.ListMessagesResponse:
        problems = Violations()
        _identify(request, problems)
        size = page_size(request.page_size, 100, problems)
        problems.check(0 <= request.last_n <= MAX_PAGE, "last_n", f"must be between 0 and {MAX_PAGE}")
        problems.raise_if_any()
        next_offset: int | None = None
        if request.last_n:
            last = await self.store.last_messages(request.tenant_id, request.session_id, request.last_n)
            payloads = _fit(last, MAX_PAGE_BYTES, newest=True)
        else:
            offset = decode_page_token(request.page_token, "o") or 0
            page = await self.store.list_messages(request.tenant_id, request.session_id, offset, size)
            payloads = _fit(page.items, MAX_PAGE_BYTES)
            trimmed = len(payloads) < len(page.items)
            next_offset = offset + len(payloads) if trimmed else page.next_cursor
        return sessions_pb2.ListMessagesResponse(
            messages=[messages_pb2.Message.FromString(p) for p in payloads],
            next_page_token=encode_page_token("o", next_offset),
        )

    # ----------------------------------------------------------------- the turn lease

    @_mapped
    async def AcquireTurnLease(
        self, request: sessions_pb2.AcquireTurnLeaseRequest, context: Any
    ) -> sessions_pb2.AcquireTurnLeaseResponse:
        problems = Violations()
        _identify(request, problems)
        _check_id(request.turn_id, "turn_id", problems)
        ttl = _lease_ttl(request.ttl_seconds, problems)
        strategy = _STRATEGIES.get(request.strategy)
        problems.check(strategy is not None, "strategy", "must be REJECT, ENQUEUE or INTERRUPT")
        problems.raise_if_any()
        assert strategy is not None
        grant = await leases.acquire(
            self.store, request.tenant_id, request.session_id, request.turn_id, ttl, strategy, _max_wait(context)
        )
        return sessions_pb2.AcquireTurnLeaseResponse(
            lease_token=grant.token,
            interrupted_turn_id=grant.interrupted_turn_id,
            expire_time=_timestamp(grant.expires_at),
            waited_seconds=grant.waited_s,
            pending_interrupt_ids=grant.pending_interrupt_ids,
        )

    @_mapped
    async def ReleaseTurnLease(
        self, request: sessions_pb2.ReleaseTurnLeaseRequest, context: Any
    ) -> sessions_pb2.ReleaseTurnLeaseResponse:
        problems = Violations()
        _identify(request, problems)
        problems.check(request.lease_token > 0, "lease_token", "is required")
        problems.raise_if_any()
        released = await self.store.release_lease(request.tenant_id, request.session_id, request.lease_token)
        return sessions_pb2.ReleaseTurnLeaseResponse(released=released)

    @_mapped
    async def RenewTurnLease(
        self, request: sessions_pb2.RenewTurnLeaseRequest, context: Any
    ) -> sessions_pb2.RenewTurnLeaseResponse:
        problems = Violations()
        _identify(request, problems)
        problems.check(request.lease_token > 0, "lease_token", "is required")
        ttl = _lease_ttl(request.ttl_seconds, problems)
        problems.raise_if_any()
        info = await self.store.renew_lease(request.tenant_id, request.session_id, request.lease_token, ttl)
        return sessions_pb2.RenewTurnLeaseResponse(
            expire_time=_timestamp(info.expires_at), interrupt_requested_by=info.interrupt_requested_by
        )

    @_mapped
    async def GetTurnLease(
        self, request: sessions_pb2.GetTurnLeaseRequest, context: Any
    ) -> sessions_pb2.GetTurnLeaseResponse:
        problems = Violations()
        _identify(request, problems)
        problems.raise_if_any()
        state = await self.store.lease_state(request.tenant_id, request.session_id)
        response = sessions_pb2.GetTurnLeaseResponse(queued_turn_ids=list(state.queued_turn_ids))
        if state.lease is not None:
            response.lease.CopyFrom(
                sessions_pb2.TurnLease(
                    turn_id=state.lease.turn_id,
                    lease_token=state.lease.token,
                    expire_time=_timestamp(state.lease.expires_at),
                    interrupt_requested_by=state.lease.interrupt_requested_by,
                )
            )
        return response

    # ----------------------------------------------------------------- summary, goals, phase

    @_mapped
    async def UpdateSummary(
        self, request: sessions_pb2.UpdateSummaryRequest, context: Any
    ) -> sessions_pb2.UpdateSummaryResponse:
        problems = Violations()
        _identify(request, problems)
        problems.check(
            len(request.text.encode()) <= MAX_SUMMARY_BYTES, "text", f"must be at most {MAX_SUMMARY_BYTES >> 10} KiB"
        )
        problems.check(request.covered_message_count >= 0, "covered_message_count", "must not be negative")
        problems.raise_if_any()
        summary = await self.store.update_summary(
            request.tenant_id, request.session_id, request.text, request.covered_message_count, request.lease_token
        )
        return sessions_pb2.UpdateSummaryResponse(summary=summary_to_proto(summary))

    @_mapped
    async def SaveGoal(self, request: sessions_pb2.SaveGoalRequest, context: Any) -> sessions_pb2.SaveGoalResponse:
        problems = Violations()
        _identify(request, problems)
        goal = request.goal
        problems.check(request.HasField("goal"), "goal", "is required")
        problems.require(goal.text, "goal.text")
        problems.check(len(goal.text.encode()) <= MAX_GOAL_TEXT, "goal.text", "must be at most 16 KiB")
        _check_id(goal.goal_id, "goal.goal_id", problems, required=False)
        status = _GOAL_STATUS.get(goal.status)
        problems.check(status is not None, "goal.status", "must be ACTIVE, COMPLETED or ABANDONED")
        _check_json(goal.data, "goal.data", problems)
        problems.raise_if_any()
        assert status is not None
        saved = await self.store.save_goal(
            request.tenant_id,
            request.session_id,
            goal.goal_id,
            goal.text,
            status,
            struct_to_dict(goal.data),
            request.lease_token,
        )
        return sessions_pb2.SaveGoalResponse(goal=goal_to_proto(saved))

    @_mapped
    async def ListGoals(self, request: sessions_pb2.ListGoalsRequest, context: Any) -> sessions_pb2.ListGoalsResponse:
        problems = Violations()
        _identify(request, problems)
        problems.raise_if_any()
        goals = await self.store.list_goals(request.tenant_id, request.session_id)
        return sessions_pb2.ListGoalsResponse(goals=[goal_to_proto(g) for g in goals])

    @_mapped
    async def SetPhase(self, request: sessions_pb2.SetPhaseRequest, context: Any) -> sessions_pb2.SetPhaseResponse:
        problems = Violations()
        _identify(request, problems)
        problems.check(request.HasField("phase"), "phase", "is required")
        _check_id(request.phase.phase, "phase.phase", problems)
        _check_json(request.phase.data, "phase.data", problems)
        problems.raise_if_any()
        phase = await self.store.set_phase(
            request.tenant_id,
            request.session_id,
            request.phase.phase,
            struct_to_dict(request.phase.data),
            request.lease_token,
        )
        return sessions_pb2.SetPhaseResponse(phase=phase_to_proto(phase))

    # ----------------------------------------------------------------- checkpoints

    @_mapped
    async def WriteCheckpoint(
        self, request: sessions_pb2.WriteCheckpointRequest, context: Any
    ) -> sessions_pb2.WriteCheckpointResponse:
        problems = Violations()
        _identify(request, problems)
        _check_token(request.lease_token, problems)
        checkpoint = request.checkpoint
        problems.check(request.HasField("checkpoint"), "checkpoint", "is required")
        _check_id(checkpoint.interrupt_id, "checkpoint.interrupt_id", problems)
        _check_id(checkpoint.turn_id, "checkpoint.turn_id", problems)
        kind = checkpoint.WhichOneof("request")
        problems.check(kind is not None, "checkpoint.request", "must be approval, user_input or client_tool")
        problems.check(
            len(checkpoint.payload) <= MAX_PAYLOAD_BYTES,
            "checkpoint.payload",
            f"must be at most {MAX_PAYLOAD_BYTES >> 20} MiB",
        )
        request_message: Any = getattr(checkpoint, kind) if kind else None
        if request_message is not None:
            quoted = request_message.interrupt_id
            problems.check(
                quoted in ("", checkpoint.interrupt_id),
                f"checkpoint.{kind}.interrupt_id",
                "must be empty or equal checkpoint.interrupt_id",
            )
        problems.raise_if_any()
        assert kind is not None
        stored_request = type(request_message)()
        stored_request.CopyFrom(request_message)
        stored_request.interrupt_id = checkpoint.interrupt_id
        new = NewCheckpoint(
            interrupt_id=checkpoint.interrupt_id,
            turn_id=checkpoint.turn_id,
            kind=kind,
            request=stored_request.SerializeToString(deterministic=True),
            payload=checkpoint.payload,
        )
        written = await self.store.write_checkpoint(request.tenant_id, request.session_id, new, request.lease_token)
        return sessions_pb2.WriteCheckpointResponse(checkpoint=checkpoint_to_proto(written))

    @_mapped
    async def GetCheckpoint(
        self, request: sessions_pb2.GetCheckpointRequest, context: Any
    ) -> sessions_pb2.GetCheckpointResponse:
        problems = Violations()
        _identify(request, problems)
        _check_id(request.interrupt_id, "interrupt_id", problems)
        problems.raise_if_any()
        found = await self.store.get_checkpoint(request.tenant_id, request.session_id, request.interrupt_id)
        return sessions_pb2.GetCheckpointResponse(checkpoint=checkpoint_to_proto(found))

    @_mapped
    async def ListCheckpoints(
        self, request: sessions_pb2.ListCheckpointsRequest, context: Any
    ) -> sessions_pb2.ListCheckpointsResponse:
        problems = Violations()
        _identify(request, problems)
        problems.raise_if_any()
        found = await self.store.list_checkpoints(request.tenant_id, request.session_id)
        return sessions_pb2.ListCheckpointsResponse(checkpoints=[checkpoint_to_proto(c) for c in found])

    @_mapped
    async def DecideCheckpoint(
        self, request: sessions_pb2.DecideCheckpointRequest, context: Any
    ) -> sessions_pb2.DecideCheckpointResponse:
        problems = Violations()
        _identify(request, problems)
        _check_id(request.interrupt_id, "interrupt_id", problems)
        problems.check(request.HasField("decision"), "decision", "is required")
        _check_id(request.decision.decided_by, "decision.decided_by", problems, required=False)
        _check_json(request.decision.edited_arguments, "decision.edited_arguments", problems)
        problems.check(request.decision.ByteSize() <= MAX_MESSAGE_BYTES, "decision", "must be at most 1 MiB")
        problems.raise_if_any()
        # The kind of a checkpoint never changes, so checking the answer against it first is safe.
        pending = await self.store.get_checkpoint(request.tenant_id, request.session_id, request.interrupt_id)
        _check_decision(pending.kind, request.decision)
        decided = await self.store.decide_checkpoint(
            request.tenant_id, request.session_id, request.interrupt_id, _decision_bytes(request.decision)
        )
        return sessions_pb2.DecideCheckpointResponse(checkpoint=checkpoint_to_proto(decided))

    @_mapped
    async def ConsumeCheckpoint(
        self, request: sessions_pb2.ConsumeCheckpointRequest, context: Any
    ) -> sessions_pb2.ConsumeCheckpointResponse:
        problems = Violations()
        _identify(request, problems)
        _check_id(request.interrupt_id, "interrupt_id", problems)
        _check_token(request.lease_token, problems)
        problems.raise_if_any()
        consumed = await self.store.consume_checkpoint(
            request.tenant_id, request.session_id, request.interrupt_id, request.lease_token, request.allow_undecided
        )
        return sessions_pb2.ConsumeCheckpointResponse(checkpoint=checkpoint_to_proto(consumed))

    # ----------------------------------------------------------------- rehydration

    @_mapped
    async def GetRehydrationPayload(
        self, request: sessions_pb2.GetRehydrationPayloadRequest, context: Any
    ) -> sessions_pb2.GetRehydrationPayloadResponse:
        problems = Violations()
        _identify(request, problems)
        problems.check(0 <= request.last_n <= MAX_PAGE, "last_n", f"must be between 0 and {MAX_PAGE}")
        problems.raise_if_any()
        payload = await self.store.rehydrate(
            request.tenant_id, request.session_id, request.last_n or DEFAULT_REHYDRATION_MESSAGES
        )
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
