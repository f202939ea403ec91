"""The per-session event log: seq stamping, retention, replay-then-tail reads.

Two stores share one contract (`EventLog`): `MemoryEventLog`, the embedded default,
and `RedisEventLog` (gateway/redis_event_log.py), which every gateway replica shares.

Appends never wait for readers, so a slow subscriber cannot slow the turn or the
other subscribers. A live reader that falls more than `max_lag` events behind is
cut off with RESOURCE_EXHAUSTED and resumes from its cursor (one that stops reading
altogether is ended by its stream's writer, gateway/delivery.py); a cursor older
than retention is OUT_OF_RANGE.

A turn being driven is marked open in the log (`append(..., opened=...)`, renewed
with `keep_turn`) until its end or pause is appended; `expired_turns` and `reap` let
any replica end a turn whose gateway died (gateway/reaper.py). A turn's end is logged
before the session's next turn starts: opening a turn while the session's mark is
held by another turn whose mark has lapsed (its driver stopped renewing it: a dead
gateway) first appends that turn's `lost_turn_event`, with the new events, at once.
A mark that has not lapsed is set aside instead, because a live driver frees the
session's lease just before it logs its end (gateway/interrupts.py): that end, or the
reaper once the mark lapses, closes it. Checking the log and starting to wait happen
without an await in between, so there is no gap and no duplicate at the replay/tail seam.

`drop` deletes a session's log for good: an append for it afterwards raises NotFound
(SESSION_NOT_FOUND) instead of starting the log again, so a turn still running stops,
and its readers end with the same error. `append(..., batch_id=...)` makes a retried
append a no-op when its first try did land (RedisEventLog; the memory log never fails
halfway).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cogmesh.common.v1 import errors_pb2, events_pb2
from services.kit.errors import InvalidArgument, NotFound, OutOfRange, ResourceExhausted
from services.kit.protos import now

TERMINAL = ("final", "error")


class Batch(list[events_pb2.RuntimeEvent]):
    """Events in seq order; `wire`, when set, is their encoding as `repeated RuntimeEvent events = 1`.

    Every gateway response that streams events (SubscribeResponse, SendMessageResponse...)
    has them as field 1, so `wire` is that response's exact wire form: a stream writes it
    as is, and a session's events are serialized once, not once per subscriber.
    """

    wire: bytes = b""


def wire_entry(event: events_pb2.RuntimeEvent) -> bytes:
    """`event` encoded as one entry of a field-1 `repeated RuntimeEvent` (tag, length, bytes)."""
    payload = event.SerializeToString()
    size, prefix = len(payload), bytearray(b"\x0a")
    while size > 0x7F:
        prefix.append(size & 0x7F | 0x80)
        size >>= 7
    prefix.append(size)
    return bytes(prefix) + payload


def is_terminal(event: events_pb2.RuntimeEvent) -> bool:
    return event.WhichOneof("payload") in TERMINAL


def is_paused(event: events_pb2.RuntimeEvent) -> bool:
    return event.HasField("status") and event.status.state == events_pb2.TURN_STATE_PAUSED


def ends_stream(event: events_pb2.RuntimeEvent) -> bool:
    """The last event of a turn's stream: final, error, or the pause that waits for an answer."""
    return is_terminal(event) or is_paused(event)


LAPSE_MARGIN_S = 1.0  # how much sooner than its lease a turn's mark lapses (at most a tenth of the ttl)


@dataclass(frozen=True)
class OpenTurn:
    """A turn some gateway drives, under a lease of `ttl_s` that its driver renews just before the mark.

    The mark lapses `mark_ttl_s` after its last renewal: a little before the lease, so the
    session's next turn, which waits for the lease, finds the mark of a dead driver lapsed
    and logs that turn's end first (the margin covers the moment between the two renewals).
    """

    session_id: str
    turn_id: str
    tenant_id: str
    ttl_s: float = 30.0

    @property
    def owner(self) -> str:
        return f"{self.turn_id}/{self.tenant_id}"

    @property
    def mark_ttl_s(self) -> float:
        return self.ttl_s - min(LAPSE_MARGIN_S, self.ttl_s / 10)


def lost_turn_event(turn: OpenTurn) -> events_pb2.RuntimeEvent:
    """The end of a turn whose driver stopped without logging one: a retryable UNAVAILABLE error.

    Logged by the reaper (gateway/reaper.py) and by an append that opens the session's
    next turn, whichever comes first; the log makes sure only one of them lands.
    """
    message = (
        f"gateway lost: the gateway replica driving turn {turn.turn_id} stopped before the turn ended "
        "and its lease expired; send the message again"
    )
    error = events_pb2.TurnError(kind=events_pb2.ERROR_KIND_UNAVAILABLE, message=message, retryable=True)
    return events_pb2.RuntimeEvent(turn_id=turn.turn_id, error=error)


def closed_turn(events: Sequence[events_pb2.RuntimeEvent]) -> str:
    """The turn whose end (or pause) these events carry, or ""."""
    return next((e.turn_id for e in events if ends_stream(e)), "")


def session_gone(session_id: str) -> NotFound:
    return NotFound(
        f"session {session_id!r} was deleted",
        reason=errors_pb2.ERROR_REASON_SESSION_NOT_FOUND,
        metadata={"session_id": session_id},
    )


class EventLog(Protocol):
    async def append(
        self,
        session_id: str,
        events: Sequence[events_pb2.RuntimeEvent],
        opened: OpenTurn | None = None,
        batch_id: str = "",
    ) -> None: ...
    async def keep_turn(self, turn: OpenTurn) -> None: ...
    async def expired_turns(self, limit: int = 100) -> list[OpenTurn]: ...
    async def reap(self, turn: OpenTurn, event: events_pb2.RuntimeEvent) -> bool: ...
    async def last_seq(self, session_id: str) -> int: ...
    async def ends_with_turn_end(self, session_id: str) -> bool: ...
    async def drop(self, session_id: str) -> None: ...
    def read(self, session_id: str, after_seq: int, heartbeat_s: float) -> AsyncIterator[Batch | None]: ...
    async def close(self) -> None: ...


@dataclass
class SessionLog:
    """Events of one session held in memory, from `first_seq` to `last_seq`, contiguous.

    Readers see events up to `published_seq`. Per-message cost dominates Python gRPC
    streaming, so a session's readers together get at most `rate` messages a second:
    token deltas that follow a wake-up within `readers / rate` seconds are published
    together at the end of that window (one reader: 0.2 ms at the default 5,000/s; a
    hundred: 20 ms). Any other event (a status, a tool call, an approval, the end), and
    the first delta after a quiet spell, publishes at once with whatever is held.
    """

    retention: int
    events: list[events_pb2.RuntimeEvent] = field(default_factory=list)
    wire: list[bytes] = field(default_factory=list)  # wire_entry of each event, encoded once on add
    last_seq: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False
    rate: float = 0.0  # messages per second to all readers together; 0: publish every event at once
    published_seq: int = -1  # -1: everything held (last_seq)
    readers: int = 0  # live tails of this log
    _published_at: float = float("-inf")
    _due: asyncio.TimerHandle | None = None
    _batch: Batch | None = None  # the last batch read: the next reader at the same cursor reuses it

    def __post_init__(self) -> None:
        if self.published_seq < 0:
            self.published_seq = self.last_seq

    @property
    def first_seq(self) -> int:
        return self.events[0].seq if self.events else self.last_seq + 1

    def add(self, events: Sequence[events_pb2.RuntimeEvent]) -> None:
        """Add events already stamped with their seq (the next ones); publish them now or at the window's end."""
        self.events.extend(events)
        self.wire.extend(wire_entry(e) for e in events)
        self.last_seq = self.events[-1].seq if self.events else self.last_seq
        # Trim in chunks so retention costs O(1) amortized per event.
        if len(self.events) > self.retention + self.retention // 4:
            del self.events[: len(self.events) - self.retention]
            del self.wire[: len(self.wire) - self.retention]
        if not self.rate or any(e.WhichOneof("payload") != "assistant_delta" for e in events):
            self.publish()
        elif self._due is None:
            loop = asyncio.get_running_loop()
            due = self._published_at + self.readers / self.rate
            if loop.time() >= due:
                self.publish()
            else:
                self._due = loop.call_at(due, self.publish)

    def prepend(self, events: Sequence[events_pb2.RuntimeEvent]) -> None:
        """Add older events, the ones right before `first_seq`, already published (a replay's backfill)."""
        self.events[:0] = events
        self.wire[:0] = [wire_entry(e) for e in events]

    def forget_before(self, seq: int) -> None:
        """Drop the events older than `seq` (keeping the retained ones after it)."""
        drop = min(len(self.events), seq - self.first_seq)
        if drop > 0:
            del self.events[:drop]
            del self.wire[:drop]
            self._batch = None

    def batch(self, cursor: int, max_batch: int) -> Batch:
        """The published events after `cursor`, at most `max_batch`; readers at one cursor share one Batch."""
        last = min(cursor + max_batch, self.published_seq)
        shared = self._batch
        if shared is not None and shared[0].seq == cursor + 1 and shared[-1].seq == last:
            return shared
        start = cursor - self.first_seq + 1
        stop = start + last - cursor
        batch = Batch(self.events[start:stop])
        batch.wire = b"".join(self.wire[start:stop])
        self._batch = batch
        return batch

    def publish(self) -> None:
        """Make everything held visible to readers and wake them."""
        if self._due is not None:
            self._due.cancel()
            self._due = None
        if self.rate:
            self._published_at = asyncio.get_running_loop().time()
        self.published_seq = self.last_seq
        self.changed.set()
        self.changed = asyncio.Event()

    def close(self) -> None:
        self.closed = True
        self.publish()


def check_cursor(session_id: str, after_seq: int, first_seq: int, last_seq: int) -> None:
    if after_seq > last_seq:
        raise InvalidArgument([("after_seq", f"is ahead of the session's last event (seq {last_seq})")])
    if after_seq < first_seq - 1:
        raise OutOfRange(
            f"cursor {after_seq} is older than the retained events (oldest is seq {first_seq}); "
            "re-read the session state and subscribe from a newer cursor",
            reason=errors_pb2.ERROR_REASON_CURSOR_EXPIRED,
            metadata={"oldest_seq": str(first_seq), "session_id": session_id},
        )


async def tail(
    session_id: str, log: SessionLog, cursor: int, heartbeat_s: float, max_lag: int, max_batch: int, live: bool = False
) -> AsyncIterator[Batch | None]:
    """Yield what `log` holds after `cursor`, then follow it; None after `heartbeat_s` idle."""
    log.readers += 1  # sizes the batching window
    try:
        while True:
            if log.closed:
                raise session_gone(session_id)
            if cursor < log.published_seq:
                # Replaying retained history has no lag limit; a live reader that cannot keep up is cut off.
                if (live and log.published_seq - cursor > max_lag) or cursor < log.first_seq - 1:
                    raise ResourceExhausted(
                        f"subscriber fell more than {max_lag} events behind; resume from seq {cursor}",
                        reason=errors_pb2.ERROR_REASON_SUBSCRIBER_TOO_SLOW,
                        metadata={"resume_after_seq": str(cursor)},
                    )
                batch = log.batch(cursor, max_batch)
                cursor = batch[-1].seq
                yield batch
                continue
            live = True
            changed = log.changed
            try:
                async with asyncio.timeout(heartbeat_s):  # no task per wait, unlike wait_for (Python 3.11)
                    await changed.wait()
            except TimeoutError:
                yield None
    finally:
        log.readers -= 1


DROPPED_KEPT = 100_000  # dropped session ids a memory log remembers (a few MB at most)


@dataclass
class _Mark:
    turn: OpenTurn
    expires: float  # time.monotonic()


class MemoryEventLog:
    def __init__(
        self,
        retention: int = 10_000,
        max_lag: int = 5_000,
        max_batch: int = 512,
        fanout_rate: float = 0.0,
        dropped_kept: int = DROPPED_KEPT,
    ):
        self.retention, self.max_lag, self.max_batch, self.fanout_rate = retention, max_lag, max_batch, fanout_rate
        self._logs: dict[str, SessionLog] = {}
        # Open turns by session id; a mark set aside by the session's next turn, by "session/turn".
        self._marks: dict[str, _Mark] = {}
        self._dropped: dict[str, None] = {}  # insertion-ordered; the oldest are forgotten past `dropped_kept`
        self._dropped_kept = dropped_kept

    def _log(self, session_id: str) -> SessionLog:
        if session_id in self._dropped:
            raise session_gone(session_id)
        log = self._logs.get(session_id)
        if log is None:
            log = self._logs[session_id] = SessionLog(self.retention, rate=self.fanout_rate)
        return log

    async def last_seq(self, session_id: str) -> int:
        log = self._logs.get(session_id)
        return log.last_seq if log is not None else 0

    async def ends_with_turn_end(self, session_id: str) -> bool:
        """True when the log is empty or its last event ended a turn."""
        log = self._logs.get(session_id)
        return log is None or not log.events or is_terminal(log.events[-1])

    async def append(
        self,
        session_id: str,
        events: Sequence[events_pb2.RuntimeEvent],
        opened: OpenTurn | None = None,
        batch_id: str = "",
    ) -> None:
        """Stamp each event with the session's next seq (and a time if unset), then publish.

        `batch_id` is ignored: an append here either happens whole or not at all.
        """
        if not events:
            return
        log = self._log(session_id)
        logged = list(events)
        if opened is not None:
            lost = self._open(opened)
            if lost is not None:
                logged.insert(0, lost_turn_event(lost))
        self._stamp(session_id, log, logged)
        log.add(logged)
        closed = closed_turn(events)
        if closed:
            self._close(session_id, closed)

    def _stamp(self, session_id: str, log: SessionLog, events: Sequence[events_pb2.RuntimeEvent]) -> None:
        seq = log.last_seq
        for event in events:
            seq += 1
            event.seq = seq
            event.session_id = session_id
            if not event.HasField("create_time"):
                event.create_time.CopyFrom(now())

    def _open(self, turn: OpenTurn) -> OpenTurn | None:
        """Mark `turn` open; returns the turn that held the session's mark and must be ended first, if any."""
        held = self._marks.get(turn.session_id)
        clock = time.monotonic()
        lost = None
        if held is not None and held.turn.owner != turn.owner:
            if held.expires > clock:  # its live driver may be about to log its end: keep its mark aside
                self._marks[f"{turn.session_id}/{held.turn.turn_id}"] = held
            else:
                lost = held.turn
        self._marks[turn.session_id] = _Mark(turn, clock + turn.mark_ttl_s)
        return lost

    def _mark_key(self, turn: OpenTurn) -> str | None:
        for key in (turn.session_id, f"{turn.session_id}/{turn.turn_id}"):
            mark = self._marks.get(key)
            if mark is not None and mark.turn.owner == turn.owner:
                return key
        return None

    def _close(self, session_id: str, turn_id: str) -> None:
        held = self._marks.get(session_id)
        if held is not None and held.turn.turn_id == turn_id:
            del self._marks[session_id]
        self._marks.pop(f"{session_id}/{turn_id}", None)

    async def keep_turn(self, turn: OpenTurn) -> None:
        key = self._mark_key(turn)
        if key is not None:
            self._marks[key].expires = time.monotonic() + turn.mark_ttl_s

    async def expired_turns(self, limit: int = 100) -> list[OpenTurn]:
        clock = time.monotonic()
        return [mark.turn for mark in self._marks.values() if mark.expires <= clock][:limit]

    async def reap(self, turn: OpenTurn, event: events_pb2.RuntimeEvent) -> bool:
        """Log `event` as the end of `turn` if its mark is still there and has lapsed; True if it did."""
        key = self._mark_key(turn)
        if key is None or self._marks[key].expires > time.monotonic():
            return False
        del self._marks[key]
        if turn.session_id in self._dropped:  # nothing to end: the session is gone
            return False
        log = self._log(turn.session_id)
        event.turn_id = turn.turn_id
        self._stamp(turn.session_id, log, [event])
        log.add([event])
        return True

    async def drop(self, session_id: str) -> None:
        self._dropped.pop(session_id, None)
        self._dropped[session_id] = None
        while len(self._dropped) > self._dropped_kept:
            del self._dropped[next(iter(self._dropped))]
        self._marks.pop(session_id, None)  # one set aside is removed when the reaper finds it
        log = self._logs.pop(session_id, None)
        if log is not None:
            log.close()

    async def read(self, session_id: str, after_seq: int, heartbeat_s: float) -> AsyncIterator[Batch | None]:
        log = self._log(session_id)
        check_cursor(session_id, after_seq, log.first_seq, log.last_seq)
        async for batch in tail(session_id, log, after_seq, heartbeat_s, self.max_lag, self.max_batch):
            yield batch

    async def close(self) -> None:
        for log in self._logs.values():
            log.close()
