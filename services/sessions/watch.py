"""SessionsService.WatchEvents: the event logs of many sessions followed over one stream.

A gateway replica keeps one stream open and adds each session it serves (with the seq
it holds), instead of a ReadEvents stream per session. Each added session is followed
by the store's own follow read, exactly as ReadEvents follows it, so order, seq and the
replay/tail seam are the store's. Every session's batches meet in one bounded queue
that the stream writes in arrival order: a session's events stay contiguous in seq,
and a consumer that reads slowly holds every session's reader back (HTTP/2 flow
control reaches them through the queue) instead of growing a buffer here.

A session that can no longer be followed (deleted, cursor expired, a bad add) gets its
status once and leaves the watch; the others go on. A draining replica ends the stream
UNAVAILABLE, so the gateway reopens it on another replica at the seqs it holds. The
first response, sent once the first request is taken, is an empty one (a heartbeat).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from cogmesh.sessions.v1 import sessions_pb2
from services.kit.errors import CogmeshError, ResourceExhausted, Unavailable
from services.kit.logging import log
from services.kit.validation import check as check_rules
from services.lib.event_log import Batch
from services.sessions.model import SessionError
from services.sessions.store import SessionStore

DEFAULT_HEARTBEAT_MS = 15_000  # heartbeat_ms is 0..600000 by the request's rules
# Encoded responses waiting for the stream; past it every session's reader waits its turn.
MAX_QUEUED = 64
# The stream sends its own heartbeats; a session's read needs none.
READ_IDLE_S = 3600.0
_HEARTBEAT = sessions_pb2.WatchEventsResponse()


@dataclass(eq=False)
class _Watched:
    """One session of the watch and the task following it."""

    tenant_id: str
    session_id: str
    after_seq: int
    task: asyncio.Task[None] | None = None
    removed: bool = False  # its batches still queued are dropped, not sent

    @property
    def key(self) -> tuple[str, str]:
        return self.tenant_id, self.session_id

    def response(self, batch: Batch) -> bytes:
        """The batch as a WatchEventsResponse: its events' stored encoding (field 1), then the session's fields."""
        tagged = sessions_pb2.WatchEventsResponse(tenant_id=self.tenant_id, session_id=self.session_id)
        if batch.wire:  # protobuf concatenates: no event is encoded again
            return batch.wire + tagged.SerializeToString()
        tagged.events.extend(batch)
        return tagged.SerializeToString()

    def failure(self, error: CogmeshError) -> bytes:
        return sessions_pb2.WatchEventsResponse(
            tenant_id=self.tenant_id, session_id=self.session_id, error=error.to_status().SerializeToString()
        ).SerializeToString()


class _Watch:
    """The sessions of one stream, their readers, and the queue they write to."""

    def __init__(self, store: SessionStore, status_of: Callable[[SessionError], CogmeshError]) -> None:
        self.store, self.status_of = store, status_of
        self.out: asyncio.Queue[tuple[_Watched, bytes] | None] = asyncio.Queue(MAX_QUEUED)
        self.watched: dict[tuple[str, str], _Watched] = {}
        self.requests_ended = False
        self.stopped = False
        self.error: BaseException | None = None  # what the stream ends with; None: OK

    def stop(self, error: BaseException | None = None) -> None:
        if self.stopped:
            return
        self.stopped, self.error = True, error
        with contextlib.suppress(asyncio.QueueFull):  # a full queue wakes the writer anyway
            self.out.put_nowait(None)

    def change(self, request: sessions_pb2.WatchEventsRequest) -> None:
        which = request.WhichOneof("change")
        if which == "add":
            self.add(request.add)
        elif which == "remove":
            self.remove(request.remove)

    def add(self, session: sessions_pb2.WatchedSession) -> None:
        key = (session.tenant_id, session.session_id)
        if key in self.watched:
            return  # already followed: an add moves nothing
        watched = self.watched[key] = _Watched(session.tenant_id, session.session_id, session.after_seq)
        watched.task = asyncio.create_task(self._follow(watched), name=f"watch:{session.session_id}")

    def remove(self, session: sessions_pb2.WatchedSession) -> None:
        watched = self.watched.pop((session.tenant_id, session.session_id), None)
        if watched is not None:
            watched.removed = True
            if watched.task is not None:
                watched.task.cancel()
        self._end_if_idle()

    def _end_if_idle(self) -> None:
        """The caller closed its side and no session is left: nothing more can come."""
        if self.requests_ended and not self.watched:
            self.stop()

    async def _follow(self, watched: _Watched) -> None:
        try:
            error = await self._read(watched)
            await self.out.put((watched, watched.failure(error)))
        finally:
            if self.watched.get(watched.key) is watched:
                del self.watched[watched.key]
                self._end_if_idle()

    async def _read(self, watched: _Watched) -> CogmeshError:
        """Queue the session's batches after its cursor until its read fails; returns why it failed."""
        cursor = watched.after_seq
        try:
            # WatchedSession's rules (the kit's interceptor leaves an add alone): a bad one ends its own watch only.
            check_rules(sessions_pb2.WatchedSession(tenant_id=watched.tenant_id, session_id=watched.session_id), "add.")
            while True:
                try:
                    reading = self.store.read_events(watched.tenant_id, watched.session_id, cursor, True, READ_IDLE_S)
                    async for batch in reading:
                        if batch:
                            await self.out.put((watched, watched.response(batch)))
                            cursor = batch[-1].seq
                    # A follow read ends only by failing; were one to end, the caller adds the session again.
                    return Unavailable("the session's event log read ended; add it again")
                except ResourceExhausted:
                    # This stream fell behind the session's live events (its consumer reads slowly):
                    # read on from the cursor, as the gateway reconnected a ReadEvents.
                    continue
        except SessionError as exc:
            return self.status_of(exc)
        except CogmeshError as exc:
            return exc
        except Exception as exc:  # noqa: BLE001 - one session's bug must not end every session's watch
            log.error("unhandled error", method="WatchEvents", session_id=watched.session_id, exc_info=exc)
            return CogmeshError("internal error following the session's events; see server logs")

    async def read_requests(self, requests: AsyncIterator[sessions_pb2.WatchEventsRequest]) -> None:
        try:
            async for request in requests:
                self.change(request)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - the stream ends with it (an abort for bad bytes)
            self.stop(exc)
            return
        self.requests_ended = True
        self._end_if_idle()

    def close(self) -> None:
        for watched in self.watched.values():
            if watched.task is not None:
                watched.task.cancel()
        self.watched.clear()


def _heartbeat_s(first: sessions_pb2.WatchEventsRequest) -> float:
    return (first.heartbeat_ms or DEFAULT_HEARTBEAT_MS) / 1000


async def watch_events(
    store: SessionStore,
    requests: AsyncIterator[sessions_pb2.WatchEventsRequest],
    draining: asyncio.Event,
    status_of: Callable[[SessionError], CogmeshError],
) -> AsyncIterator[Any]:
    """Follow the sessions `requests` add until they are removed; heartbeats after the first request's
    heartbeat_ms idle; UNAVAILABLE once `draining` is set."""
    shutting_down = Unavailable(
        "this sessions replica is shutting down: watch on a new stream",
        metadata={"dependency": "sessions", "retryable": "true"},
    )
    if draining.is_set():
        raise shutting_down
    first = await anext(aiter(requests), None)
    if first is None:
        return
    heartbeat_s = _heartbeat_s(first)
    # An empty response once the stream is taken: the caller writes its adds after it, so a stream
    # that ends at once (an older replica's UNIMPLEMENTED) does not end under a write (grpc reports
    # that as INTERNAL, hiding the status).
    yield _HEARTBEAT
    watch = _Watch(store, status_of)
    watch.change(first)
    reader = asyncio.create_task(watch.read_requests(requests), name="watch:requests")
    drain = asyncio.create_task(draining.wait(), name="watch:drain")

    def drained(waited: asyncio.Task[Any]) -> None:
        if not waited.cancelled():
            watch.stop(shutting_down)

    drain.add_done_callback(drained)
    try:
        while not watch.stopped:
            if watch.out.empty():
                try:
                    async with asyncio.timeout(heartbeat_s):
                        item = await watch.out.get()
                except TimeoutError:
                    yield _HEARTBEAT
                    continue
            else:
                item = watch.out.get_nowait()
            if item is None or watch.stopped:
                continue
            watched, response = item
            if not watched.removed:
                yield response
        if watch.error is not None:
            raise watch.error
    finally:
        drain.cancel()
        reader.cancel()
        watch.close()
