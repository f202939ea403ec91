"""A running turn's way to the session's event log and its journal: SessionsService.AppendEvents.

One writer per turn sends, in order, everything the turn produces: its events and the
journal entries of its steps, fenced by the turn's lease, so the turn does not depend
on whoever started it: watchers read the log. Appends are as few as latency allows:
an assistant delta that comes less than `flush_s` after the last append waits for the
next one (the first delta after a quiet spell, and every other event but a step's usage,
go at once), so a streaming reply costs an append per window instead of one per token. The
window counts from the end of the last append: on a slow store appends do not go back to
back with a delta or two each. A long reply's
window widens, doubling every few appends up to `flush_max_s`: its first words reach the
watchers as fast as ever, and each second of a long stream costs a few appends, not ten.

A step is recorded before the next one starts. When a side effect follows (a tool
call, an approved call, a subagent's step) `record` returns only once the entry is
stored; otherwise it returns at once and the entry goes with the next append (an
event's, a stored record's or the turn's end), in order, never alone: redoing a model
step after a crash needs nothing it would have saved, so it is not worth an append
while the next model call has yet to answer.

Each append carries an id of its own, so one resent after its reply was lost is not
stored twice. A sessions service that is away is waited for up to `outage_s`; after
that, or when the lease was taken over (the turn runs elsewhere) or the session was
deleted, the turn stops without writing anything more (`TurnLost`): its lease then
lapses and another replica, or this one, takes the turn over once sessions is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit import tasks
from services.kit.logging import log
from services.kit.metrics import TurnMeter
from services.lib import journal_kinds
from services.lib.event_log import MAX_APPEND_BYTES, MAX_EVENTS_PER_APPEND
from services.runtime.journal import ANSWER, PAUSE, REQUEST, TAKEOVER, encode_state

# A turn's end event stays well under the log's 1 MiB per event: what a long reply would push over is left
# out of it (the deltas carry the text, the session's messages the messages), and the event says so.
END_EVENT_BYTES = 512 << 10
# Steps after which something with an effect outside the turn runs: their record must be stored first.
DURABLE = frozenset(
    {journal_kinds.DECIDE, journal_kinds.TOOL, journal_kinds.DELEGATION, PAUSE, ANSWER, REQUEST, TAKEOVER}
)
_RETRY_FIRST_S, _RETRY_MAX_S = 0.05, 1.0


WIDEN_EVERY = 4  # a reply's appends per delta window before the window doubles


class TurnLost(Exception):
    """The turn may not write any more: its lease was taken over, its session deleted, or sessions stayed away."""

    def __init__(self, why: str, retryable: bool, refused: bool = False) -> None:
        super().__init__(why)
        self.retryable = retryable  # True when another replica will go on with the turn later
        self.refused = refused  # the log refused what the turn wrote (a size limit): the turn must end


class HandedOver(Exception):
    """The replica is shutting down: the turn stopped at a recorded step, for another replica to go on from."""


def fit_end_event(event: events_pb2.RuntimeEvent) -> None:
    """Leave out of a final (or error) event what would make it over END_EVENT_BYTES."""
    if event.ByteSize() <= END_EVENT_BYTES:
        return
    if event.HasField("final"):
        final = event.final
        if final.new_messages:
            del final.new_messages[:]
            final.messages_omitted = True
        if event.ByteSize() > END_EVENT_BYTES:
            final.text, final.text_omitted = "", True
    elif event.HasField("error"):  # the partial text is in the deltas and the stored messages
        error = event.error
        error.partial_text = error.partial_text[: END_EVENT_BYTES // 8] + "…"


# Events no watcher waits on: they ride with the next append (a step's usage is followed by its tool
# calls, the next step's events or the turn's end, each of which goes at once).
RIDERS = frozenset({"usage"})


class TurnLog:
    def __init__(
        self,
        sessions: Any,
        tenant_id: str,
        session_id: str,
        turn_id: str,
        lease_token: int,
        *,
        call_timeout_s: float,
        flush_s: float = 0.05,
        flush_max_s: float | None = None,
        outage_s: float = 10.0,
        previous_state: dict[str, Any] | None = None,
        on_lost: Callable[[TurnLost], None] | None = None,
        meter: TurnMeter | None = None,
        record_steps: bool = True,
        adopt_grace_s: float = 0.0,
        holder: str = "",
    ) -> None:
        self.sessions = sessions
        self.tenant_id, self.session_id, self.turn_id, self.lease_token = tenant_id, session_id, turn_id, lease_token
        self.call_timeout_s, self.flush_s, self.outage_s = call_timeout_s, flush_s, outage_s
        self.flush_max_s = max(flush_s, flush_max_s if flush_max_s is not None else flush_s)
        self.on_lost = on_lost
        self.meter = meter
        self.record_steps = record_steps
        self.adopt_grace_s = adopt_grace_s
        self.holder = holder  # this replica's address: the next append records it as the lease's holder
        self._announce = bool(holder)
        # The lease names this replica as the holder (an append that said so, or a renewal, went through):
        # only then can a claimer of its lapsed lease know to ask it for the turn back.
        self.named = False
        self._adopted = asyncio.Event()
        self.last_seq = 0
        self.message_count = 0
        self.handing_over = False  # set on shutdown: the turn stops once its next step is stored
        self.failure: TurnLost | None = None
        self._state = previous_state  # the last state recorded, for the next entry's delta
        self._events: list[events_pb2.RuntimeEvent] = []
        self._entries: list[sessions_pb2.JournalEntry] = []
        self._end: dict[str, Any] = {}  # release_lease, pause, messages of the last append
        self._queued = self._written = 0
        self._appends = 0
        self._wake, self._urgent, self._progress = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._last_write = float("-inf")
        self._sending = False  # an append is out: a delta queued meanwhile waits for the window after it
        self._cut_short = False  # the last append left queued items over its caps: the next goes at once
        self._in_reply = False  # the last event queued was a delta: the model's reply is streaming
        self._reply_writes = 0  # appends since the streaming reply began: its window widens with them
        self._consume = ""  # the interrupt whose checkpoint the next append takes (a resume's first)
        self._writer = asyncio.create_task(self._write_all())

    # ------------------------------------------------------------------ what the turn hands over

    def emit(self, event: events_pb2.RuntimeEvent) -> None:
        """Queue an event; it goes out with the next append (a delta may wait up to `flush_s` for company).

        One that goes at once sets `urgent` until the writer takes it: the caller should then let the
        loop turn (a model that streams faster than the loop turns would otherwise hold it back).
        """
        if self.failure is not None:
            return
        event.turn_id = self.turn_id
        self._events.append(event)
        self._queued += 1
        kind = event.WhichOneof("payload")
        if kind in RIDERS:
            return
        self._wake.set()
        # A reply's first delta goes at once (it is the first token a watcher waits for), as does
        # any other event; a delta within a streaming reply waits out the window since the last write
        # ended (one queued while an append is out waits for the window after it: on a slow store,
        # appends would otherwise go back to back, two deltas each).
        first_of_reply, self._in_reply = not self._in_reply, kind == "assistant_delta"
        if first_of_reply:
            self._reply_writes = 0
        if (
            first_of_reply
            or not self._in_reply
            or (not self._sending and asyncio.get_running_loop().time() - self._last_write >= self._window())
        ):
            self._urgent.set()

    @property
    def urgent(self) -> bool:
        """Something that goes at once waits for the writer (e.g. behind an append still out)."""
        return self._urgent.is_set()

    async def record(self, kind: journal_kinds.Kind, state: dict[str, Any]) -> None:
        """The loop's Journal: the state after step `kind`, stored before what follows it has effects."""
        if not self.record_steps and kind != PAUSE:  # COGMESH_JOURNAL_STEPS=false: a takeover starts over
            if self.handing_over:
                raise HandedOver()
            return
        payload = encode_state(state, self._state)
        self._state = state
        await self.record_raw(kind, payload)

    async def record_raw(self, kind: journal_kinds.Kind, payload: bytes) -> None:
        self._check()
        # Its step ended after the events queued so far: those that follow belong to the next steps.
        self._entries.append(journal_kinds.entry(kind, payload, position=len(self._events)))
        self._queued += 1
        if kind in DURABLE or self.handing_over:
            self._wake.set()
            self._urgent.set()
            await self._until(self._queued)
        if self.handing_over:
            raise HandedOver()

    def consume_with_next_append(self, interrupt_id: str) -> None:
        """The next append takes the paused turn's checkpoint in the same write (AppendEventsRequest.
        consume_interrupt_id), fenced by the lease: set before a resume records its answer."""
        self._consume = interrupt_id

    async def end(
        self,
        events: Sequence[events_pb2.RuntimeEvent],
        messages: Sequence[messages_pb2.Message] = (),
        pause: sessions_pb2.Checkpoint | None = None,
    ) -> int:
        """The turn's last append: its end (or pause), with its messages, freeing the lease in the same write."""
        for event in events:
            self.emit(event)
        self._check()
        self._end = {"release_lease": pause is None, "pause": pause, "messages": list(messages)}
        self._queued += 1
        self._wake.set()
        self._urgent.set()
        await self._until(self._queued)
        return self.last_seq

    async def close(self) -> None:
        if self.meter is not None:
            self.meter.end()
        await tasks.stop([self._writer], "closing a turn's log")

    def adopt(self, lease_token: int) -> None:
        """Go on under a new token: this replica claimed its own lapsed lease, or another handed it back."""
        self.lease_token = lease_token
        self.named = True  # it was asked for the turn back, or claimed it itself
        # Say who runs it (a sessions service of the previous version made the claimer the holder).
        self._announce = bool(self.holder)
        adopted, self._adopted = self._adopted, asyncio.Event()
        adopted.set()

    async def adopted_after(self, token: int) -> bool:
        """Whether the lease, found taken under `token`, comes back under a new one within `adopt_grace_s`.

        A lease that lapsed while this replica could not renew it (a store outage, load) is claimed by
        another replica, which first asks this one whether it still runs the turn (AdoptTurn): a write
        refused meanwhile waits for that answer rather than give the turn up."""
        if not self.named and self.lease_token == token:
            return False  # no claimer knows to ask this replica (e.g. it read its StartTurn too late)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.adopt_grace_s
        while self.lease_token == token:
            adopted = self._adopted
            try:
                async with asyncio.timeout_at(give_up):
                    await adopted.wait()
            except TimeoutError:
                return False
        return True

    # ------------------------------------------------------------------ the writer

    def _window(self) -> float:
        """How long a delta may wait for company: `flush_s`, doubled every WIDEN_EVERY appends of the reply."""
        widened: float = self.flush_s * 2 ** (self._reply_writes // WIDEN_EVERY)
        return min(self.flush_max_s, widened)

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    async def _until(self, count: int) -> None:
        while self._written < count:
            self._check()
            progress = self._progress
            await progress.wait()
        self._check()

    async def _write_all(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                await self._wake.wait()
                due = self._last_write + self._window()
                if not self._urgent.is_set() and loop.time() < due:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout_at(due):
                            await self._urgent.wait()
                self._wake.clear()
                self._urgent.clear()
                taken = self._take()
                if taken is None:
                    continue
                request, events, count = taken
                self._sending = True
                try:
                    await self._send(request)
                finally:
                    self._sending = False
                self._last_write = loop.time()
                self._reply_writes += self._in_reply
                self._written += count
                if self._cut_short:  # a backlog over one append's caps: go on at once
                    self._wake.set()
                    self._urgent.set()
                self._signal()
                if self.meter is not None:
                    self.meter.logged(events)
                if request.release_lease or request.HasField("pause"):
                    return
        except TurnLost as lost:
            self.failure = lost
            if lost.refused:
                await self._end_refused(lost)
        except Exception as exc:  # noqa: BLE001 - a bug here must not leave the turn waiting forever
            log.exception("the turn's log writer failed")
            self.failure = TurnLost(f"the turn's log writer failed: {exc}", retryable=True)
        if self.failure is not None:
            self._signal()
            if self.on_lost is not None:
                self.on_lost(self.failure)

    async def _end_refused(self, lost: TurnLost) -> None:
        """The log refused what the turn wrote: run again, on any replica, the turn would write the same.
        So it ends here, with an error saying why, and frees the session (its lease is still held)."""
        message = (
            f"the turn's output cannot be stored ({lost}): it is over a limit of the session's log "
            "(docs/durability.md, 'Sizes'); the turn ends here"
        )
        error = events_pb2.TurnError(kind=events_pb2.ERROR_KIND_INTERNAL, message=message, retryable=False)
        self._events, self._entries, self._end = [], [], {}
        request = self._append([events_pb2.RuntimeEvent(turn_id=self.turn_id, error=error)], [])
        request.append_id, request.release_lease = f"{self.turn_id}:{self.lease_token}:refused", True
        try:
            await self._send(request)
        except TurnLost as again:  # sessions away or the lease gone: a takeover ends it the same way
            log.warning("could not end a turn whose output was refused", why=str(again))
            return
        log.warning("turn ended: the event log refused its output", why=str(lost))

    def _signal(self) -> None:
        progress, self._progress = self._progress, asyncio.Event()
        progress.set()

    def _take(self) -> tuple[sessions_pb2.AppendEventsRequest, list[events_pb2.RuntimeEvent], int] | None:
        """The next append: what is queued, up to the caps of one append (a backlog, say while sessions
        was slow, goes in several). Returns it, its events and how many queued items it carries."""
        if not self._events and not self._entries and not self._end:
            return None
        cut = self._cut()
        last = cut == len(self._events)  # the entries after the cut and the end wait for the rest
        self._cut_short = not last
        events, self._events = self._events[:cut], self._events[cut:]
        entries = [entry for entry in self._entries if last or entry.position <= cut]
        self._entries = self._entries[len(entries) :]
        for entry in self._entries:
            entry.position -= cut
        request = self._append(events, entries)
        count = len(events) + len(entries)
        if self._end and last:
            request.release_lease = self._end["release_lease"]
            if self._end["pause"] is not None:
                request.pause.CopyFrom(self._end["pause"])
            request.messages.extend(self._end["messages"])
            self._end, count = {}, count + 1
        return request, events, count

    def _append(
        self, events: list[events_pb2.RuntimeEvent], entries: list[sessions_pb2.JournalEntry]
    ) -> sessions_pb2.AppendEventsRequest:
        """An append under the turn's lease, with an id of its own (a resend of it is not stored twice)."""
        self._appends += 1
        holder, self._announce = (self.holder if self._announce else ""), False
        consume, self._consume = self._consume, ""
        return sessions_pb2.AppendEventsRequest(
            tenant_id=self.tenant_id,
            session_id=self.session_id,
            turn_id=self.turn_id,
            lease_token=self.lease_token,
            events=events,
            entries=entries,
            append_id=f"{self.turn_id}:{self.lease_token}:{self._appends}",
            holder=holder,
            consume_interrupt_id=consume,
        )

    def _cut(self) -> int:
        """How many queued events the next append takes: at most MAX_EVENTS_PER_APPEND, and (from the
        second on) only while they and the journal entries among them fit in MAX_APPEND_BYTES."""
        events, entries = self._events, self._entries
        limit, k = min(len(events), MAX_EVENTS_PER_APPEND), 0
        size = 0
        while k < len(entries) and entries[k].position == 0:
            size, k = size + entries[k].ByteSize(), k + 1
        for i in range(limit):
            weight = events[i].ByteSize()  # with the entries recorded right after it, which go with it
            while k < len(entries) and entries[k].position == i + 1:
                weight, k = weight + entries[k].ByteSize(), k + 1
            if i and size + weight > MAX_APPEND_BYTES:
                return i
            size += weight
        return limit

    async def _send(self, request: sessions_pb2.AppendEventsRequest) -> None:
        """Append once, resending the same append (same id) while sessions is away, up to `outage_s`."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.outage_s
        pause, failures = _RETRY_FIRST_S, 0
        while True:
            try:
                reply = await self.sessions.AppendEvents(
                    request, timeout=self.call_timeout_s, wait_for_ready=failures > 0
                )
                if failures:
                    log.info("event log back; the turn goes on", failed_appends=failures)
                self.last_seq = reply.last_seq
                self.message_count = reply.message_count
                self.named = self.named or bool(request.holder)
                return
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                if code == grpc.StatusCode.FAILED_PRECONDITION and request.lease_token != self.lease_token:
                    request.lease_token = self.lease_token  # this replica re-claimed the lease meanwhile
                    continue
                if code == grpc.StatusCode.FAILED_PRECONDITION:
                    if await self.adopted_after(request.lease_token):
                        request.lease_token = self.lease_token  # the claimer handed the turn back (AdoptTurn)
                        continue
                    raise TurnLost(f"the turn's lease was taken over: {exc.details()}", retryable=False) from exc
                if code == grpc.StatusCode.NOT_FOUND:
                    raise TurnLost(f"the session was deleted: {exc.details()}", retryable=False) from exc
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    why = f"the event log refused an append: {code.name}: {exc.details()}"
                    # Too large or malformed: written again anywhere, it would be refused the same way.
                    refused = code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED)
                    raise TurnLost(why, retryable=False, refused=refused) from exc
                failures += 1
                if loop.time() + pause >= give_up:
                    raise TurnLost(
                        f"the event log (sessions) stayed unavailable for {self.outage_s:g}s: {exc.details()}",
                        retryable=True,
                    ) from exc
                if failures == 1:
                    log.warning("event log unavailable; holding the turn's events", error=exc.details())
            await asyncio.sleep(pause * (0.5 + random.random() / 2))
            pause = min(pause * 2, _RETRY_MAX_S)
