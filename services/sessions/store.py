"""Session state behind one contract; the in-memory store is the embedded default.

`SessionStore` is the contract every store implements (tests/contract runs one suite
against each). Each method is atomic: a Redis store runs each as one Lua script, the
memory store never awaits inside one. Turn leases carry a fencing token that
strictly increases per session, so a stale holder cannot write; waiting for a lease
(ENQUEUE, INTERRUPT) is built on `try_acquire` by services/sessions/leases.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from services.kit.protos import now as proto_now
from services.lib import scope as scopes
from services.lib import session_search as search
from services.lib.answers import misfit
from services.lib.event_log import Batch, SessionLog, check_cursor, leaves_idle, tail
from services.sessions.model import (
    CONSUMED_TTL_S,
    ENQUEUE_BASE,
    INTERRUPT_BASE,
    JOURNALS_KEPT,
    MAX_GOALS,
    MAX_PENDING_CHECKPOINTS,
    REMEMBERED_APPENDS,
    WAITER_TTL_S,
    Acquired,
    Appended,
    AppendResult,
    Checkpoint,
    CheckpointConflict,
    CheckpointExists,
    CheckpointNotFound,
    Claimed,
    Goal,
    GoalStatus,
    HistoryChanged,
    InvalidValue,
    JournalRecord,
    JsonObject,
    LeaseHeld,
    LeaseInfo,
    LeaseState,
    LimitExceeded,
    LogState,
    NewCheckpoint,
    NewEvents,
    NewSession,
    Orphans,
    Page,
    PauseAnswer,
    PauseAnswered,
    Phase,
    Queued,
    Rehydration,
    Renewal,
    Renewed,
    Rewind,
    SessionEffects,
    SessionNotFound,
    SessionRecord,
    SessionUpdate,
    StaleLease,
    Strategy,
    Summary,
    active_goal,
    effects_of,
)

# Re-exported: callers import the domain errors and records from here too.
__all__ = [
    "Acquired",
    "LeaseHeld",
    "MemorySessionStore",
    "Page",
    "Queued",
    "SessionNotFound",
    "SessionRecord",
    "SessionStore",
    "StaleLease",
]


class SessionStore(Protocol):
    # sessions
    async def create(self, tenant_id: str, new: NewSession, reuse_existing: bool = False) -> tuple[SessionRecord, bool]:
        """Create a session (or, with reuse_existing, return the live one for the key); returns (record, reused)."""
        ...

    async def get(self, tenant_id: str, session_id: str) -> SessionRecord: ...
    async def lookup(
        self, tenant_id: str, user_id: str, topic_id: str, scope: Mapping[str, str] | None = None
    ) -> SessionRecord: ...
    async def list_sessions(
        self,
        tenant_id: str,
        cursor: int | None,
        limit: int,
        scope_filter: Mapping[str, str] | None = None,
        where: search.SessionFilter | None = None,
    ) -> Page[SessionRecord]:
        """Newest first; `cursor` is the previous page's next_cursor. With `scope_filter`, only sessions whose
        scope holds every entry, read from an index of that scope: a page costs what an unfiltered one does.
        With `where`, only sessions it matches (search.matches); a store may then read a bounded stretch of
        the index per call, and so answer fewer than `limit` sessions (even none) with a next_cursor."""
        ...

    async def update(self, tenant_id: str, session_id: str, update: SessionUpdate, token: int) -> SessionRecord:
        """Apply the update; a non-zero token must hold the lease. Labels beyond search.MAX_LABELS after it
        are InvalidValue("labels"), and nothing changes."""
        ...

    async def delete(self, tenant_id: str, session_id: str) -> bool: ...
    async def close_all(self, tenant_id: str, user_id: str) -> int: ...

    # messages
    async def append_messages(
        self, tenant_id: str, session_id: str, payloads: Sequence[bytes], token: int, request_id: str = ""
    ) -> AppendResult: ...
    async def list_messages(self, tenant_id: str, session_id: str, offset: int, limit: int) -> Page[bytes]: ...
    async def last_messages(self, tenant_id: str, session_id: str, n: int) -> list[bytes]: ...

    # the turn lease
    async def try_acquire(
        self,
        tenant_id: str,
        session_id: str,
        turn_id: str,
        ttl_s: float,
        strategy: Strategy,
        opening: NewEvents | None = None,
        resume: str = "",
        rehydrate: int = 0,
    ) -> Acquired | Queued:
        """Take the lease if free and no earlier waiter is due; REJECT raises LeaseHeld, the others queue.

        With `opening` (the turn's accepted event and request), the grant also logs them and marks the
        turn open, unless a paused turn still waits for an answer. With `resume` (an attempt id), the
        lease is taken to resume turn_id, a paused turn: the holder is (turn_id, resume), so a second
        attempt is refused rather than handed the same token. With `rehydrate` > 0, a grant that finds no
        paused turn waiting may carry `rehydrate(..., rehydrate)` as read right after it (in the same write,
        where the store can); the caller reads it apart when it is None.
        """
        ...

    async def leave_queue(self, tenant_id: str, session_id: str, turn_id: str) -> None: ...
    async def wait_for_change(self, session_id: str, timeout_s: float) -> None:
        """Sleep until the session's lease may have changed hands, or for timeout_s."""
        ...

    async def renew_lease(
        self, tenant_id: str, session_id: str, token: int, ttl_s: float, holder: str = "", hand_over: bool = False
    ) -> LeaseInfo:
        """Extend the held lease (record who runs the turn); `hand_over` expires it at once, the turn still open."""
        ...

    async def release_lease(self, tenant_id: str, session_id: str, token: int) -> bool: ...
    async def lease_state(self, tenant_id: str, session_id: str) -> LeaseState: ...

    # memory of the conversation
    async def update_summary(self, tenant_id: str, session_id: str, text: str, covered: int, token: int) -> Summary: ...
    async def save_goal(
        self,
        tenant_id: str,
        session_id: str,
        goal_id: str,
        text: str,
        status: GoalStatus,
        data: JsonObject,
        token: int,
    ) -> Goal: ...
    async def list_goals(self, tenant_id: str, session_id: str) -> list[Goal]: ...
    async def set_phase(self, tenant_id: str, session_id: str, phase: str, data: JsonObject, token: int) -> Phase: ...

    # checkpoints of paused turns
    async def write_checkpoint(self, tenant_id: str, session_id: str, new: NewCheckpoint, token: int) -> Checkpoint: ...
    async def get_checkpoint(self, tenant_id: str, session_id: str, interrupt_id: str) -> Checkpoint: ...
    async def list_checkpoints(self, tenant_id: str, session_id: str) -> list[Checkpoint]: ...
    async def decide_checkpoint(
        self, tenant_id: str, session_id: str, interrupt_id: str, decision: bytes
    ) -> Checkpoint: ...
    async def consume_checkpoint(
        self, tenant_id: str, session_id: str, interrupt_id: str, token: int, allow_undecided: bool
    ) -> Checkpoint: ...
    async def answer_pause(self, tenant_id: str, session_id: str, answer: PauseAnswer) -> PauseAnswered:
        """Record the answer and take the lease to resume the paused turn, in one step; returns the decided
        checkpoint, the lease and the turn's journal.

        The first answer wins: the same one again (equal bytes) is accepted, another is CheckpointConflict
        (carrying the one recorded); one of the wrong kind is InvalidValue; an unknown or consumed interrupt
        CheckpointNotFound. A lease held by anyone else is LeaseHeld (`resuming` when the holder resumes this
        very turn), the answer recorded all the same; a retry of the same attempt gets the same grant.
        """
        ...

    async def rehydrate(self, tenant_id: str, session_id: str, last_n: int) -> Rehydration: ...

    # the event log and the turns' journals
    async def append_events(self, tenant_id: str, session_id: str, new: NewEvents) -> Appended:
        """Log events and journal entries under the turn's lease; end or pause the turn in the same write,
        and take the checkpoint `consume_interrupt_id` names (as consume_checkpoint would, undecided too)."""
        ...

    def read_events(
        self, tenant_id: str, session_id: str, after_seq: int, follow: bool, heartbeat_s: float
    ) -> AsyncIterator[Batch | None]:
        """The events after `after_seq`, then (follow) new ones as they come, None after `heartbeat_s` idle."""
        ...

    async def log_state(self, tenant_id: str, session_id: str) -> LogState: ...
    async def journal(self, tenant_id: str, session_id: str, turn_id: str) -> list[JournalRecord]: ...
    async def renew_leases(self, renewals: Sequence[Renewal]) -> list[Renewed]: ...
    async def claim_orphans(self, holder: str, limit: int, ttl_s: float) -> Orphans:
        """Turns whose lease expired while they were open, each now held by `holder` under a new token."""
        ...

    def turns_opened(self) -> int | None:
        """How many turns have opened here so far, for `until_turn_opens`; None when a turn can open unseen by
        this process (a store that replicas share), so there is nothing to wait on."""
        ...

    async def until_turn_opens(self, opened: int, timeout_s: float) -> None:
        """Return once more than `opened` turns have opened, or after `timeout_s`."""
        ...

    async def interrupt_turn(self, tenant_id: str, session_id: str, turn_id: str, by: str) -> LeaseInfo | None: ...

    # time travel (services/sessions/history.py composes these)
    async def turn_seqs(self, tenant_id: str, session_id: str, turn_ids: Sequence[str]) -> dict[str, int]:
        """The seq of each named turn's first logged event, for those the log recorded one (a turn that logged
        nothing, or that a rewind dropped, is left out; one the retention trimmed is still there)."""
        ...

    async def rewind(self, tenant_id: str, session_id: str, rewind: Rewind) -> tuple[SessionRecord, int]:
        """Drop the messages from `rewind.keep` on, the summary when it covers more than stays, the dropped
        turns' first seqs, and log `rewind.event`, in one atomic step; returns the session and the event's seq.
        LeaseHeld while a turn holds the lease (but for `rewind.token`'s holder), waits in the queue or is paused
        (an unconsumed checkpoint); HistoryChanged when the message count or the log's head moved since the read;
        StaleLease when `rewind.token` no longer holds the lease. The journals stay (an audit of what ran)."""
        ...

    async def close(self) -> None: ...


# --------------------------------------------------------------------------- memory


@dataclass
class _Lease:
    turn_id: str
    token: int
    expires_at: float
    interrupt_by: str = ""
    # An open turn was accepted and has not ended or paused: its lease does not simply run out,
    # it waits, held, for another runtime replica to take the turn over (claim_orphans).
    open: bool = False
    holder: str = ""
    takeovers: int = 0
    start_seq: int = 0  # where the events logged with the grant start and end (a retried acquire)
    last_seq: int = 0
    resume: str = ""  # a resume of turn_id holds it: its attempt id

    def info(self) -> LeaseInfo:
        return LeaseInfo(
            self.turn_id, self.token, self.expires_at, self.interrupt_by, self.holder, self.takeovers, self.resume
        )


@dataclass
class _Entry:
    record: SessionRecord
    seq: int
    messages: list[bytes] = field(default_factory=list)
    lease: _Lease | None = None
    last_token: int = 0
    queue: dict[str, tuple[float, float]] = field(default_factory=dict)  # turn_id -> (score, heartbeat expiry)
    appends: dict[str, int] = field(default_factory=dict)  # recent request_id -> message count after it
    summary: Summary | None = None
    goals: dict[str, Goal] = field(default_factory=dict)
    phase: Phase | None = None
    checkpoints: dict[str, Checkpoint] = field(default_factory=dict)
    consumed: dict[str, tuple[int, float, Checkpoint]] = field(default_factory=dict)  # id -> (token, until, ckpt)
    log: SessionLog | None = None  # the session's event log, from its first event
    log_appends: dict[str, int] = field(default_factory=dict)  # recent append_id -> last seq after it
    journals: dict[str, list[JournalRecord]] = field(default_factory=dict)  # turn id -> entries, oldest turn first
    turn_first: dict[str, int] = field(default_factory=dict)  # turn id -> seq of its first event (ListTurns)
    delegated_turn: str = ""  # the last turn counted in the record's delegated_turns


def _key(tenant_id: str, user_id: str, topic_id: str, scope: Mapping[str, str]) -> tuple[object, ...] | None:
    """The application's identity of a conversation; anonymous sessions have none."""
    return (tenant_id, user_id, topic_id, scopes.identity(scope)) if user_id or topic_id else None


class MemorySessionStore:
    """Process-local store. No method awaits while it changes state, so each is atomic on the event loop."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        session_ttl_s: float = 0.0,
        waiter_ttl_s: float = WAITER_TTL_S,
        event_retention: int = 10_000,
        subscriber_max_lag: int = 5_000,
        fanout_messages_per_s: float = 0.0,
        max_batch: int = 512,
    ):
        self._clock = clock
        self._ttl = session_ttl_s
        self._waiter_ttl = waiter_ttl_s
        self._retention, self._max_lag, self._fanout_rate = event_retention, subscriber_max_lag, fanout_messages_per_s
        self._max_batch = max_batch
        self._open: set[str] = set()  # sessions whose lease belongs to an open turn
        self._turns_opened = 0
        self._turn_opened = asyncio.Event()  # set and replaced each time a turn opens
        self._entries: dict[str, _Entry] = {}
        self._by_key: dict[tuple[object, ...], str] = {}
        # (tenant, scope key, value) -> its sessions, oldest first (as _entries): what a scope filter reads.
        self._by_scope: dict[tuple[str, str, str], dict[str, _Entry]] = {}
        self._seq = 0
        self._queue_seq = 0
        self._changed: dict[str, asyncio.Event] = {}
        self._next_sweep = 0.0

    # ----------------------------------------------------------------- helpers

    def _expired(self, entry: _Entry, now: float) -> bool:
        return 0 < entry.record.expires_at <= now

    def _evict(self, session_id: str) -> None:
        entry = self._entries.pop(session_id)
        self._open.discard(session_id)
        if entry.log is not None:
            entry.log.close()  # its readers end with NOT_FOUND
        r = entry.record
        key = _key(r.tenant_id, r.user_id, r.topic_id, r.scope)
        if key is not None and self._by_key.get(key) == session_id:
            del self._by_key[key]
        for pair in r.scope.items():
            indexed = self._by_scope.get((r.tenant_id, *pair))
            if indexed is not None:
                indexed.pop(session_id, None)
                if not indexed:
                    del self._by_scope[(r.tenant_id, *pair)]
        self._notify(session_id)

    def _sweep(self, now: float) -> None:
        """Drop idle sessions at most once a second; single lookups evict lazily anyway."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + 1.0
        for session_id in [s for s, e in self._entries.items() if self._expired(e, now)]:
            self._evict(session_id)

    def _entry(self, tenant_id: str, session_id: str) -> _Entry:
        entry = self._entries.get(session_id)
        # Another tenant's session is reported exactly like a missing one.
        if entry is None or entry.record.tenant_id != tenant_id:
            raise SessionNotFound(session_id)
        if self._expired(entry, self._clock()):
            self._evict(session_id)
            raise SessionNotFound(session_id)
        return entry

    def _live_lease(self, entry: _Entry) -> _Lease | None:
        lease = entry.lease
        if lease is not None and lease.expires_at <= self._clock() and not lease.open:
            entry.lease = None  # a crashed holder's lease simply runs out (an open turn's waits for a takeover)
        return entry.lease

    def _free(self, entry: _Entry) -> None:
        entry.lease = None
        self._open.discard(entry.record.session_id)
        self._notify(entry.record.session_id)

    def _fence(self, entry: _Entry, token: int) -> None:
        """A non-zero token must be the live lease's."""
        if token:
            lease = self._live_lease(entry)
            if lease is None or lease.token != token:
                raise StaleLease(entry.record.session_id, token)

    def _touch(self, entry: _Entry) -> None:
        """A write is activity: it pushes eviction back (never before a live lease ends)."""
        now = self._clock()
        expires = 0.0
        if self._ttl > 0:
            lease = self._live_lease(entry)
            expires = max(now + self._ttl, lease.expires_at if lease else 0.0)
        entry.record = replace(entry.record, updated_at=now, expires_at=expires)

    def _view(self, entry: _Entry) -> SessionRecord:
        lease = self._live_lease(entry)
        pending = tuple(i for i, c in entry.checkpoints.items() if c.decision is None)
        return replace(
            entry.record,
            message_count=len(entry.messages),
            active_turn_id=lease.turn_id if lease else "",
            pending_interrupt_ids=pending,
        )

    def _notify(self, session_id: str) -> None:
        event = self._changed.pop(session_id, None)
        if event is not None:
            event.set()

    # ----------------------------------------------------------------- sessions

    async def create(self, tenant_id: str, new: NewSession, reuse_existing: bool = False) -> tuple[SessionRecord, bool]:
        now = self._clock()
        self._sweep(now)
        key = _key(tenant_id, new.user_id, new.topic_id, new.scope)
        if reuse_existing and key is not None and key in self._by_key:
            try:
                return self._view(self._entry(tenant_id, self._by_key[key])), True
            except SessionNotFound:
                pass
        self._seq += 1
        record = SessionRecord(
            session_id=uuid.uuid4().hex,
            tenant_id=tenant_id,
            user_id=new.user_id,
            topic_id=new.topic_id,
            agent=new.agent,
            role_id=new.role_id,
            active_skill_ids=tuple(new.active_skill_ids),
            created_at=now,
            updated_at=now,
            runtime_config=dict(new.runtime_config),
            delegated_from=new.delegated_from,
            scope=dict(new.scope),
            labels=dict(new.labels),
            forked_from=new.forked_from,
            agent_version=new.agent_version,
        )
        entry = _Entry(record, self._seq)
        self._touch(entry)
        self._entries[record.session_id] = entry
        for pair in record.scope.items():
            self._by_scope.setdefault((tenant_id, *pair), {})[record.session_id] = entry
        if key is not None:
            self._by_key[key] = record.session_id  # the newest session answers for the key
        return self._view(entry), False

    async def get(self, tenant_id: str, session_id: str) -> SessionRecord:
        return self._view(self._entry(tenant_id, session_id))

    async def lookup(
        self, tenant_id: str, user_id: str, topic_id: str, scope: Mapping[str, str] | None = None
    ) -> SessionRecord:
        key = _key(tenant_id, user_id, topic_id, scope or {})
        session_id = self._by_key.get(key) if key is not None else None
        if session_id is None:
            raise SessionNotFound(f"{user_id}/{topic_id}")
        return self._view(self._entry(tenant_id, session_id))

    async def list_sessions(
        self,
        tenant_id: str,
        cursor: int | None,
        limit: int,
        scope_filter: Mapping[str, str] | None = None,
        where: search.SessionFilter | None = None,
    ) -> Page[SessionRecord]:
        now = self._clock()
        self._sweep(now)
        entries: dict[str, _Entry] = self._entries
        if scope_filter:  # the smallest of the filter's scope indexes, the other entries checked on each session
            entries = min((self._by_scope.get((tenant_id, *pair), {}) for pair in scope_filter.items()), key=len)
        items: list[SessionRecord] = []
        last_seq = 0
        for entry in reversed(entries.values()):
            if entry.record.tenant_id != tenant_id or (cursor is not None and entry.seq >= cursor):
                continue
            if scope_filter and not scopes.holds(entry.record.scope, scope_filter):
                continue
            if self._expired(entry, now):
                continue
            view = self._view(entry)
            if where and not search.matches(view.facts(), where):
                continue
            if len(items) == limit:
                return Page(items, last_seq)  # the next page starts below the last seq shown
            items.append(view)
            last_seq = entry.seq
        return Page(items, None)

    async def update(self, tenant_id: str, session_id: str, update: SessionUpdate, token: int) -> SessionRecord:
        entry = self._entry(tenant_id, session_id)
        self._fence(entry, token)
        changes = update.changes()
        if "runtime_config" in changes:
            changes["runtime_config"] = dict(changes["runtime_config"])
        if update.labels is not None or update.label_changes:
            changes["labels"] = update.relabel(entry.record.labels)
            if len(changes["labels"]) > search.MAX_LABELS:
                raise InvalidValue("labels", search.too_many_labels(session_id, len(changes["labels"])))
        entry.record = replace(entry.record, **changes)
        self._touch(entry)
        return self._view(entry)

    async def delete(self, tenant_id: str, session_id: str) -> bool:
        try:
            self._entry(tenant_id, session_id)
        except SessionNotFound:
            return False
        self._evict(session_id)
        return True

    async def close_all(self, tenant_id: str, user_id: str) -> int:
        doomed = [
            s
            for s, e in self._entries.items()
            if e.record.tenant_id == tenant_id and (not user_id or e.record.user_id == user_id)
        ]
        now = self._clock()
        live = sum(1 for s in doomed if not self._expired(self._entries[s], now))
        for session_id in doomed:
            self._evict(session_id)
        return live

    # ----------------------------------------------------------------- messages

    async def append_messages(
        self, tenant_id: str, session_id: str, payloads: Sequence[bytes], token: int, request_id: str = ""
    ) -> AppendResult:
        entry = self._entry(tenant_id, session_id)
        lease = self._live_lease(entry)
        if lease is None or lease.token != token:
            raise StaleLease(session_id, token)
        if request_id in entry.appends:
            return AppendResult(entry.appends[request_id], deduplicated=True)
        entry.messages.extend(payloads)
        if request_id:
            entry.appends[request_id] = len(entry.messages)
            if len(entry.appends) > REMEMBERED_APPENDS:
                del entry.appends[next(iter(entry.appends))]  # dicts keep insertion order: the oldest goes
        self._touch(entry)
        return AppendResult(len(entry.messages))

    async def list_messages(self, tenant_id: str, session_id: str, offset: int, limit: int) -> Page[bytes]:
        messages = self._entry(tenant_id, session_id).messages
        return Page(messages[offset : offset + limit], offset + limit if offset + limit < len(messages) else None)

    async def last_messages(self, tenant_id: str, session_id: str, n: int) -> list[bytes]:
        messages = self._entry(tenant_id, session_id).messages
        return messages[-n:] if n > 0 else []

    # ----------------------------------------------------------------- the turn lease

    def _queue_head(self, entry: _Entry) -> str:
        now = self._clock()
        for turn_id in [t for t, (_, alive) in entry.queue.items() if alive <= now]:
            del entry.queue[turn_id]  # its replica stopped polling: it is gone
        if not entry.queue:
            return ""
        return min(entry.queue.items(), key=lambda item: item[1][0])[0]

    async def try_acquire(
        self,
        tenant_id: str,
        session_id: str,
        turn_id: str,
        ttl_s: float,
        strategy: Strategy,
        opening: NewEvents | None = None,
        resume: str = "",
        rehydrate: int = 0,
    ) -> Acquired | Queued:
        entry = self._entry(tenant_id, session_id)
        now = self._clock()
        lease = self._live_lease(entry)
        pending = tuple(i for i, c in entry.checkpoints.items() if c.decision is None)
        same = lease is not None and (lease.turn_id, lease.resume) == (turn_id, resume)
        if lease is not None and same and not lease.takeovers:  # a retried acquire: the same lease
            return Acquired(lease.token, lease.expires_at, pending, lease.start_seq, lease.last_seq)
        head = self._queue_head(entry)
        if lease is None and head in ("", turn_id):
            entry.queue.pop(turn_id, None)
            entry.last_token += 1
            lease = entry.lease = _Lease(turn_id, entry.last_token, now + ttl_s, resume=resume)
            lease.start_seq = entry.log.last_seq if entry.log is not None else 0
            if opening is not None and not pending:
                lease.last_seq = self._log_events(entry, opening)  # 0 stays: nothing was logged
                self._opened(entry, lease)
            self._touch(entry)
            rehydration = None
            if rehydrate > 0 and not pending:
                rehydration = await self.rehydrate(tenant_id, session_id, rehydrate)
            return Acquired(lease.token, lease.expires_at, pending, lease.start_seq, lease.last_seq, rehydration)
        if strategy is Strategy.REJECT:
            raise LeaseHeld(session_id, lease.turn_id if lease else head)
        if turn_id in entry.queue:
            score = entry.queue[turn_id][0]
        else:
            self._queue_seq += 1
            score = (INTERRUPT_BASE if strategy.interrupts else ENQUEUE_BASE) + self._queue_seq
        entry.queue[turn_id] = (score, now + self._waiter_ttl)
        if strategy.interrupts and lease is not None and not lease.interrupt_by:
            lease.interrupt_by = turn_id
        return Queued(lease.turn_id, lease.expires_at) if lease else Queued("")

    async def leave_queue(self, tenant_id: str, session_id: str, turn_id: str) -> None:
        try:
            entry = self._entry(tenant_id, session_id)
        except SessionNotFound:
            return
        entry.queue.pop(turn_id, None)
        if entry.lease is not None and entry.lease.interrupt_by == turn_id:
            entry.lease.interrupt_by = ""
        self._notify(session_id)

    async def wait_for_change(self, session_id: str, timeout_s: float) -> None:
        event = self._changed.setdefault(session_id, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)

    async def renew_lease(
        self, tenant_id: str, session_id: str, token: int, ttl_s: float, holder: str = "", hand_over: bool = False
    ) -> LeaseInfo:
        entry = self._entry(tenant_id, session_id)
        self._fence(entry, token or -1)
        lease = entry.lease
        assert lease is not None
        lease.expires_at = self._clock() if hand_over else self._clock() + ttl_s
        lease.holder = "" if hand_over else holder or lease.holder
        self._touch(entry)
        return lease.info()

    async def release_lease(self, tenant_id: str, session_id: str, token: int) -> bool:
        entry = self._entry(tenant_id, session_id)
        held = self._live_lease(entry)
        if held is None or held.token != token:
            return False
        self._free(entry)
        self._touch(entry)
        return True

    async def lease_state(self, tenant_id: str, session_id: str) -> LeaseState:
        entry = self._entry(tenant_id, session_id)
        lease = self._live_lease(entry)
        self._queue_head(entry)  # prune the dead
        queued = tuple(t for t, _ in sorted(entry.queue.items(), key=lambda item: item[1][0]))
        return LeaseState(lease.info() if lease else None, queued)

    # ----------------------------------------------------------------- summary, goals, phase

    async def update_summary(self, tenant_id: str, session_id: str, text: str, covered: int, token: int) -> Summary:
        entry = self._entry(tenant_id, session_id)
        self._fence(entry, token)
        if covered > len(entry.messages):
            raise InvalidValue(
                "covered_message_count", f"covers {covered} messages but the session has {len(entry.messages)}"
            )
        entry.summary = Summary(text, covered, self._clock())
        self._touch(entry)
        return entry.summary

    async def save_goal(
        self,
        tenant_id: str,
        session_id: str,
        goal_id: str,
        text: str,
        status: GoalStatus,
        data: JsonObject,
        token: int,
    ) -> Goal:
        entry = self._entry(tenant_id, session_id)
        self._fence(entry, token)
        now = self._clock()
        goal_id = goal_id or uuid.uuid4().hex
        old = entry.goals.get(goal_id)
        if old is None and len(entry.goals) >= MAX_GOALS:
            raise LimitExceeded(f"session {session_id!r} already has {MAX_GOALS} goals")
        goal = Goal(goal_id, text, status, dict(data), old.created_at if old else now, now)
        entry.goals[goal_id] = goal
        self._touch(entry)
        return goal

    async def list_goals(self, tenant_id: str, session_id: str) -> list[Goal]:
        return sorted(self._entry(tenant_id, session_id).goals.values(), key=lambda g: (g.created_at, g.goal_id))

    async def set_phase(self, tenant_id: str, session_id: str, phase: str, data: JsonObject, token: int) -> Phase:
        entry = self._entry(tenant_id, session_id)
        self._fence(entry, token)
        entry.phase = Phase(phase, dict(data), self._clock())
        self._touch(entry)
        return entry.phase

    # ----------------------------------------------------------------- checkpoints

    async def write_checkpoint(self, tenant_id: str, session_id: str, new: NewCheckpoint, token: int) -> Checkpoint:
        entry = self._entry(tenant_id, session_id)
        self._fence(entry, token or -1)
        old = entry.checkpoints.get(new.interrupt_id)
        if old is not None:
            if (old.turn_id, old.kind, old.request, old.payload) == (new.turn_id, new.kind, new.request, new.payload):
                return old  # a retried write
            raise CheckpointExists(session_id, new.interrupt_id)
        if sum(1 for c in entry.checkpoints.values() if c.decision is None) >= MAX_PENDING_CHECKPOINTS:
            raise LimitExceeded(f"session {session_id!r} already has {MAX_PENDING_CHECKPOINTS} pending checkpoints")
        checkpoint = Checkpoint(new.interrupt_id, new.turn_id, new.kind, new.request, new.payload, token, self._clock())
        entry.checkpoints[new.interrupt_id] = checkpoint
        self._touch(entry)
        return checkpoint

    def _checkpoint(self, entry: _Entry, interrupt_id: str) -> Checkpoint:
        checkpoint = entry.checkpoints.get(interrupt_id)
        if checkpoint is None:
            raise CheckpointNotFound(entry.record.session_id, interrupt_id)
        return checkpoint

    async def get_checkpoint(self, tenant_id: str, session_id: str, interrupt_id: str) -> Checkpoint:
        return self._checkpoint(self._entry(tenant_id, session_id), interrupt_id)

    async def list_checkpoints(self, tenant_id: str, session_id: str) -> list[Checkpoint]:
        return list(self._entry(tenant_id, session_id).checkpoints.values())

    async def decide_checkpoint(
        self, tenant_id: str, session_id: str, interrupt_id: str, decision: bytes
    ) -> Checkpoint:
        entry = self._entry(tenant_id, session_id)
        checkpoint = self._checkpoint(entry, interrupt_id)
        if checkpoint.decision is not None:
            if checkpoint.decision == decision:
                return checkpoint  # the same answer twice
            raise CheckpointConflict(session_id, interrupt_id, "was already decided differently")
        checkpoint = replace(checkpoint, decision=decision, decided_at=self._clock())
        entry.checkpoints[interrupt_id] = checkpoint
        self._touch(entry)
        return checkpoint

    async def consume_checkpoint(
        self, tenant_id: str, session_id: str, interrupt_id: str, token: int, allow_undecided: bool
    ) -> Checkpoint:
        entry = self._entry(tenant_id, session_id)
        self._fence(entry, token or -1)
        now = self._clock()
        entry.consumed = {i: c for i, c in entry.consumed.items() if c[1] > now}
        done = entry.consumed.get(interrupt_id)
        if done is not None and done[0] == token:
            return done[2]  # a retried consume by the same turn
        checkpoint = self._checkpoint(entry, interrupt_id)
        if checkpoint.decision is None and not allow_undecided:
            raise CheckpointConflict(session_id, interrupt_id, "has no decision yet")
        del entry.checkpoints[interrupt_id]
        entry.consumed[interrupt_id] = (token, now + CONSUMED_TTL_S, checkpoint)
        self._touch(entry)
        return checkpoint

    async def answer_pause(self, tenant_id: str, session_id: str, answer: PauseAnswer) -> PauseAnswered:
        entry = self._entry(tenant_id, session_id)
        checkpoint = self._checkpoint(entry, answer.interrupt_id)
        recorded = False
        if answer.decision is not None:
            if checkpoint.kind != answer.kind:
                raise InvalidValue("decision", misfit(answer.interrupt_id, checkpoint.kind, answer.kind))
            if checkpoint.decision is None:
                checkpoint = replace(checkpoint, decision=answer.decision, decided_at=self._clock())
                entry.checkpoints[answer.interrupt_id] = checkpoint
                recorded = True
            elif checkpoint.decision != answer.decision:
                why = "was already decided differently"
                raise CheckpointConflict(session_id, answer.interrupt_id, why, checkpoint.decision)
        elif checkpoint.decision is None and not answer.abandon:
            raise CheckpointConflict(session_id, answer.interrupt_id, "has no decision yet")
        turn_id = checkpoint.turn_id
        lease = self._live_lease(entry)
        if lease is None or (lease.turn_id, lease.resume) != (turn_id, answer.resume) or lease.takeovers:
            head = self._queue_head(entry)
            if lease is not None or head:
                if recorded:
                    self._touch(entry)
                resuming = lease is not None and lease.turn_id == turn_id and bool(lease.resume)
                raise LeaseHeld(session_id, lease.turn_id if lease else head, resuming=resuming)
            entry.last_token += 1
            lease = entry.lease = _Lease(turn_id, entry.last_token, self._clock() + answer.ttl_s, resume=answer.resume)
            lease.start_seq = entry.log.last_seq if entry.log is not None else 0
            self._touch(entry)
        # else: a retried call of this attempt: the same grant
        return PauseAnswered(checkpoint, lease.token, lease.start_seq, list(entry.journals.get(turn_id, ())))

    async def rehydrate(self, tenant_id: str, session_id: str, last_n: int) -> Rehydration:
        entry = self._entry(tenant_id, session_id)
        return Rehydration(
            session=self._view(entry),
            summary=entry.summary,
            last_messages=entry.messages[-last_n:] if last_n > 0 else [],
            goal=active_goal(list(entry.goals.values())),
            phase=entry.phase,
        )

    # ----------------------------------------------------------------- the event log and journals

    def _session_log(self, entry: _Entry) -> SessionLog:
        if entry.log is None:
            entry.log = SessionLog(self._retention, rate=self._fanout_rate)
        return entry.log

    def _opened(self, entry: _Entry, lease: _Lease) -> None:
        lease.open = True
        self._open.add(entry.record.session_id)
        self._turns_opened += 1
        self._turn_opened.set()
        self._turn_opened = asyncio.Event()

    def _log_events(self, entry: _Entry, new: NewEvents) -> int:
        """Stamp and log the events, record the journal entries where their steps ended; returns the last seq."""
        log = self._session_log(entry)
        session_id = entry.record.session_id
        first = log.last_seq + 1
        if new.events:
            stamp = proto_now()
            for offset, event in enumerate(new.events):
                event.seq, event.session_id, event.turn_id = first + offset, session_id, new.turn_id
                if not event.HasField("create_time"):
                    event.create_time.CopyFrom(stamp)
            log.add(new.events)
            if new.turn_id:
                entry.turn_first.setdefault(new.turn_id, first)
            self._apply(entry, new.turn_id, effects_of(new.events))
        if new.journal:
            recorded = self._clock()
            journal = entry.journals.pop(new.turn_id, [])
            journal.extend(
                JournalRecord(kind, state, first - 1 + min(position, len(new.events)), recorded)
                for kind, state, position in new.journal
            )
            entry.journals[new.turn_id] = journal  # the most recently written turn goes last
            self._forget_journals(entry)
        return log.last_seq

    @staticmethod
    def _apply(entry: _Entry, turn_id: str, effects: SessionEffects) -> None:
        """What the logged events change in the session (model.effects_of), in the same step as the log."""
        if not effects:
            return
        record = entry.record
        if effects.active_agent is not None:
            record = replace(record, active_agent=effects.active_agent)
        if effects.plan is not None:
            record = replace(record, plan=effects.plan)
        if effects.outcome is not None:
            record = replace(record, outcome=effects.outcome)
        if effects.delegated and entry.delegated_turn != turn_id:  # once per turn, however often it delegates
            entry.delegated_turn = turn_id
            record = replace(record, delegated_turns=record.delegated_turns + 1)
        entry.record = record

    def _forget_journals(self, entry: _Entry) -> None:
        """Keep the journals of the last few turns, and always an open or paused turn's."""
        keep = {c.turn_id for c in entry.checkpoints.values()}
        if entry.lease is not None:
            keep.add(entry.lease.turn_id)
        ended = [t for t in entry.journals if t not in keep]
        for turn_id in ended[: max(0, len(ended) - JOURNALS_KEPT)]:
            del entry.journals[turn_id]

    async def append_events(self, tenant_id: str, session_id: str, new: NewEvents) -> Appended:
        entry = self._entry(tenant_id, session_id)
        if new.append_id and new.append_id in entry.log_appends:  # a retried append that did land
            return Appended(entry.log_appends[new.append_id], len(entry.messages), duplicate=True)
        lease = self._live_lease(entry)
        if lease is None or lease.token != new.token:
            raise StaleLease(session_id, new.token)
        consumed = self._to_consume(entry, new)
        if new.pause is not None:
            if new.pause.interrupt_id in entry.checkpoints:
                raise CheckpointExists(session_id, new.pause.interrupt_id)
            if sum(1 for c in entry.checkpoints.values() if c.decision is None) >= MAX_PENDING_CHECKPOINTS:
                raise LimitExceeded(f"session {session_id!r} already has {MAX_PENDING_CHECKPOINTS} pending checkpoints")
        last_seq = self._log_events(entry, new)
        entry.messages.extend(new.messages)
        if consumed is not None:
            del entry.checkpoints[consumed.interrupt_id]
            entry.consumed[consumed.interrupt_id] = (new.token, self._clock() + CONSUMED_TTL_S, consumed)
        if new.pause is not None:
            p = new.pause
            entry.checkpoints[p.interrupt_id] = Checkpoint(
                p.interrupt_id, p.turn_id, p.kind, p.request, p.payload, new.token, self._clock()
            )
        if new.release or new.pause is not None:
            self._free(entry)
        else:
            self._opened(entry, lease)
            lease.holder = new.holder or lease.holder
        if new.append_id:
            entry.log_appends[new.append_id] = last_seq
            if len(entry.log_appends) > REMEMBERED_APPENDS:
                del entry.log_appends[next(iter(entry.log_appends))]
        self._touch(entry)
        return Appended(last_seq, len(entry.messages))

    def _to_consume(self, entry: _Entry, new: NewEvents) -> Checkpoint | None:
        """The checkpoint the append takes (None: none, or this lease took it already); checked before any write."""
        interrupt_id = new.consume_interrupt_id
        if not interrupt_id:
            return None
        now = self._clock()
        entry.consumed = {i: c for i, c in entry.consumed.items() if c[1] > now}
        done = entry.consumed.get(interrupt_id)
        if done is not None and done[0] == new.token:
            return None
        checkpoint = self._checkpoint(entry, interrupt_id)
        if checkpoint.turn_id != new.turn_id:
            why = f"interrupt {interrupt_id!r} paused turn {checkpoint.turn_id!r}, not turn {new.turn_id!r}"
            raise InvalidValue("consume_interrupt_id", why)
        return checkpoint

    async def read_events(
        self, tenant_id: str, session_id: str, after_seq: int, follow: bool, heartbeat_s: float
    ) -> AsyncIterator[Batch | None]:
        log = self._session_log(self._entry(tenant_id, session_id))
        check_cursor(session_id, after_seq, log.first_seq, log.last_seq)
        if not follow:
            while after_seq < log.published_seq:
                replayed = log.batch(after_seq, self._max_batch)
                after_seq = replayed[-1].seq
                yield replayed
            return
        async for batch in tail(session_id, log, after_seq, heartbeat_s, self._max_lag, self._max_batch):
            yield batch

    async def log_state(self, tenant_id: str, session_id: str) -> LogState:
        log = self._entry(tenant_id, session_id).log
        if log is None:
            return LogState(1, 0, True)
        ended = not log.events or leaves_idle(log.events[-1])
        return LogState(log.first_seq, log.last_seq, ended)

    async def journal(self, tenant_id: str, session_id: str, turn_id: str) -> list[JournalRecord]:
        return list(self._entry(tenant_id, session_id).journals.get(turn_id, ()))

    async def renew_leases(self, renewals: Sequence[Renewal]) -> list[Renewed]:
        out = []
        for r in renewals:
            try:
                info = await self.renew_lease(r.tenant_id, r.session_id, r.token, r.ttl_s, r.holder, r.hand_over)
            except (SessionNotFound, StaleLease):
                out.append(Renewed(r.session_id, r.token, held=False))
                continue
            out.append(Renewed(r.session_id, r.token, True, info.interrupt_requested_by, info.expires_at))
        return out

    async def claim_orphans(self, holder: str, limit: int, ttl_s: float) -> Orphans:
        now = self._clock()
        claimed = Orphans()
        for session_id in list(self._open):
            if len(claimed) >= limit:
                break
            entry = self._entries.get(session_id)
            lease = entry.lease if entry is not None else None
            if entry is None or lease is None or not lease.open or self._expired(entry, now):
                self._open.discard(session_id)  # an expired session's turn went with it
                continue
            if lease.expires_at > now:
                continue
            entry.last_token += 1
            # The holder stays the replica that last ran the turn (claim.lua says why).
            previous = lease.holder
            lease.token, lease.expires_at = entry.last_token, now + ttl_s
            lease.takeovers += 1
            self._touch(entry)
            last_seq = entry.log.last_seq if entry.log is not None else 0
            record = entry.record
            claimed.append(
                Claimed(
                    record.tenant_id,
                    session_id,
                    lease.turn_id,
                    lease.token,
                    lease.takeovers,
                    last_seq,
                    previous,
                    lease.interrupt_by,
                    lease.resume,
                )
            )
        claimed.none_open = not self._open
        return claimed

    def turns_opened(self) -> int | None:
        return self._turns_opened

    async def until_turn_opens(self, opened: int, timeout_s: float) -> None:
        if self._turns_opened == opened:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._turn_opened.wait(), timeout_s)

    async def interrupt_turn(self, tenant_id: str, session_id: str, turn_id: str, by: str) -> LeaseInfo | None:
        entry = self._entry(tenant_id, session_id)
        lease = self._live_lease(entry)
        if lease is None or (turn_id and lease.turn_id != turn_id):
            return None
        lease.interrupt_by = lease.interrupt_by or by
        return lease.info()

    # ----------------------------------------------------------------- time travel

    async def turn_seqs(self, tenant_id: str, session_id: str, turn_ids: Sequence[str]) -> dict[str, int]:
        first = self._entry(tenant_id, session_id).turn_first
        return {t: first[t] for t in turn_ids if t in first}

    async def rewind(self, tenant_id: str, session_id: str, rewind: Rewind) -> tuple[SessionRecord, int]:
        entry = self._entry(tenant_id, session_id)
        lease = self._live_lease(entry)
        if rewind.token:
            if lease is None or lease.token != rewind.token:
                raise StaleLease(session_id, rewind.token)
        else:
            busy = lease.turn_id if lease is not None else self._queue_head(entry)
            if not busy and entry.checkpoints:  # a paused turn: its checkpoint is not consumed yet
                busy = next(iter(entry.checkpoints.values())).turn_id
            if busy:
                raise LeaseHeld(session_id, busy)
        head = entry.log.last_seq if entry.log is not None else 0
        if len(entry.messages) != rewind.expected_messages or head != rewind.expected_head:
            raise HistoryChanged(session_id)
        del entry.messages[rewind.keep :]
        if entry.summary is not None and entry.summary.covered_message_count > rewind.keep:
            entry.summary = None
        for turn_id in rewind.dropped_turn_ids:
            entry.turn_first.pop(turn_id, None)
        entry.record = replace(entry.record, outcome="")  # how a dropped turn ended no longer says anything
        seq = self._log_events(entry, NewEvents(rewind.turn_id, rewind.token, [rewind.event]))
        self._touch(entry)
        self._notify(session_id)
        return self._view(entry), seq

    async def close(self) -> None:
        for session_id in list(self._changed):
            self._notify(session_id)
