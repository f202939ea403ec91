"""A session's event log in memory and its readers: seq order, retention, replay-then-tail reads.

The sessions service writes every session's log (SessionsService.AppendEvents and
AppendEventsStream, under the turn's lease): in its memory (services/sessions/store.py, a
`SessionLog` per session) or on Redis Streams (services/sessions/lua/append_events.lua). Readers
follow it with `tail`: the memory store's ReadEvents and WatchEvents, and each gateway's
mirror of the sessions it serves (gateway/remote_event_log.py from one WatchEvents stream,
services/lib/redis_event_log.py from Redis).

Appends never wait for readers, so a slow subscriber cannot slow the turn or the other
subscribers. A live reader that falls more than `max_lag` events behind is cut off with
RESOURCE_EXHAUSTED and resumes from its cursor (one that stops reading altogether is
ended by its stream's writer, gateway/delivery.py); a cursor older than retention is
OUT_OF_RANGE. Checking the log and starting to wait happen without an await in between,
so there is no gap and no duplicate at the replay/tail seam. A deleted session's log is
closed: its readers end with NOT_FOUND (SESSION_NOT_FOUND).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cogmesh.common.v1 import errors_pb2, events_pb2
from services.kit.errors import InvalidArgument, NotFound, OutOfRange, ResourceExhausted

TERMINAL = ("final", "error")
# The most events one AppendEvents may carry (the sessions service refuses more; a turn's writer splits).
MAX_EVENTS_PER_APPEND = 10_000
# What a turn's writer puts in one append, events and journal entries together: under gRPC's
# default 4 MiB message limit with room for the turn's end (its messages).
MAX_APPEND_BYTES = 3 << 20


class Batch(list[events_pb2.RuntimeEvent]):
    """Events in seq order; `wire`, when set, is their encoding as `repeated RuntimeEvent events = 1`.

    Every gateway response that streams events (SubscribeResponse, SendMessageResponse...)
    has them as field 1, so `wire` is that response's exact wire form: a stream writes it
    as is, and a session's events are serialized once, not once per subscriber.
    """

    wire: bytes = b""


def wire_entry(event: events_pb2.RuntimeEvent) -> bytes:
    """`event` encoded as one entry of a field-1 `repeated RuntimeEvent` (tag, length, bytes)."""
    return field_one(event.SerializeToString())


def field_one(payload: bytes) -> bytes:
    """An encoded message as one entry of a field-1 repeated message field (tag, length, bytes)."""
    size, prefix = len(payload), bytearray(b"\x0a")
    while size > 0x7F:
        prefix.append(size & 0x7F | 0x80)
        size >>= 7
    prefix.append(size)
    return bytes(prefix) + payload


def is_terminal(event: events_pb2.RuntimeEvent) -> bool:
    return event.WhichOneof("payload") in TERMINAL


def leaves_idle(event: events_pb2.RuntimeEvent) -> bool:
    """Whether a log ending with this event has no turn running: a turn's end, or a rewind (RewindSession runs
    only while no turn does; a ROLLBACK turn's own rewind comes after its opening event, with it running)."""
    return is_terminal(event) or (event.HasField("rewound") and event.rewound.reason == "rewind")


def is_paused(event: events_pb2.RuntimeEvent) -> bool:
    return event.HasField("status") and event.status.state == events_pb2.TURN_STATE_PAUSED


def ends_stream(event: events_pb2.RuntimeEvent) -> bool:
    """The last event of a turn's stream: final, error, or the pause that waits for an answer."""
    return is_terminal(event) or is_paused(event)


def session_gone(session_id: str) -> NotFound:
    return NotFound(
        f"session {session_id!r} was deleted",
        reason=errors_pb2.ERROR_REASON_SESSION_NOT_FOUND,
        metadata={"session_id": session_id},
    )


class EventLogReader(Protocol):
    """What a gateway does with a session's log: read it from a cursor and know where it stands."""

    async def last_seq(self, session_id: str) -> int: ...
    async def ends_with_turn_end(self, session_id: str) -> bool: ...
    async def drop(self, session_id: str) -> None: ...
    def read(
        self, session_id: str, after_seq: int, heartbeat_s: float, log_end: int | None = None
    ) -> AsyncIterator[Batch | None]:
        """`log_end`: the log's last seq as the caller just learned it (a lease grant's), so it is not asked."""
        ...

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
    # Every batch some reader still holds, by (cursor, last seq): readers spread over a long replay
    # (a loaded machine spreads them) share one per cursor instead of one each.
    _batches: weakref.WeakValueDictionary[tuple[int, int], Batch] | None = None

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
        if self._batches is None:
            self._batches = weakref.WeakValueDictionary()
        batch = self._batches.get((cursor, last))
        if batch is None:
            start = cursor - self.first_seq + 1
            stop = start + last - cursor
            batch = Batch(self.events[start:stop])
            batch.wire = b"".join(self.wire[start:stop])
            self._batches[cursor, last] = batch
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
    session_id: str,
    log: SessionLog,
    cursor: int,
    heartbeat_s: float,
    max_lag: int,
    max_batch: int,
    live: bool = False,
    replay_until: int = 0,
) -> AsyncIterator[Batch | None]:
    """Yield what `log` holds after `cursor`, then follow it; None after `heartbeat_s` idle.

    The reader is replaying, not live, until it has caught up with the log once, and while
    its cursor is before `replay_until` (the log's end when it came, for a log still filling).
    """
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
                # Caught up once (now or while waiting below): from here on the reader is live.
                live = live or cursor >= max(log.published_seq, replay_until)
                yield batch
                continue
            live = cursor >= replay_until
            changed = log.changed
            try:
                async with asyncio.timeout(heartbeat_s):  # no task per wait, unlike wait_for (Python 3.11)
                    await changed.wait()
            except TimeoutError:
                yield None
    finally:
        log.readers -= 1
