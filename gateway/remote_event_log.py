"""The event log of the embedded default, read from the sessions service (SessionsService.WatchEvents).

The log lives in the sessions process, where runtimes append to it, so a turn's
events do not depend on this gateway. Every session this replica watches has a local
mirror (a `SessionLog`) fed from sessions, and every local reader tails the mirror: a
hundred subscribers of one session cost one upstream feed, and the fan-out stays in
memory. A reader whose cursor is older than what the mirror holds replays that part
straight from sessions first (ReadEvents).

Every mirror is fed over one WatchEvents stream per gateway, opened on first use: a
mirror is added at its cursor and removed when its last reader leaves. A stream that
breaks (sessions restarting or draining, a connection cut) is reopened after a
jittered backoff and every mirror added again at the seq it holds, so no mirror sees
an event twice or misses one. Against a sessions service without WatchEvents
(UNIMPLEMENTED) each mirror follows its own ReadEvents stream instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit.clients import Clients
from services.kit.dependencies import Exchange, SessionsClient
from services.kit.errors import CogmeshError, DependencyError, from_dependency_status
from services.kit.logging import log
from services.lib.event_log import Batch, SessionLog, session_gone, tail

UPSTREAM_HEARTBEAT_MS = 15_000
# The upstream stream is away, or this mirror fell behind (cut off): pick up again from its cursor.
_RECONNECT = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
)
# The watch stream ends for all of them at once: reopen it (CANCELLED too: this side cancels only when it closes).
_REOPEN = _RECONNECT | {grpc.StatusCode.CANCELLED}
RETRY_S = 0.2
MAX_RETRY_S = 2.0


@dataclass(eq=False)
class _Mirror:
    log: SessionLog
    readers: int = 0
    task: asyncio.Task[None] | None = None  # its own ReadEvents stream (a sessions service without WatchEvents)
    failure: CogmeshError | None = None
    retry_s: float = RETRY_S  # the pause before adding it again after a retryable failure of its watch


def _jittered(delay_s: float) -> float:
    return delay_s * random.uniform(0.5, 1.0)  # spreads reconnects: not a secret


def _add(key: tuple[str, str], after_seq: int) -> sessions_pb2.WatchEventsRequest:
    return sessions_pb2.WatchEventsRequest(
        add=sessions_pb2.WatchedSession(tenant_id=key[0], session_id=key[1], after_seq=after_seq)
    )


def _remove(key: tuple[str, str]) -> sessions_pb2.WatchEventsRequest:
    return sessions_pb2.WatchEventsRequest(remove=sessions_pb2.WatchedSession(tenant_id=key[0], session_id=key[1]))


async def _send(
    call: Exchange[sessions_pb2.WatchEventsRequest, sessions_pb2.WatchEventsResponse],
    requests: asyncio.Queue[sessions_pb2.WatchEventsRequest | None],
) -> None:
    """Write the adds and removes queued for a watch stream, until None."""
    try:
        while (request := await requests.get()) is not None:
            await call.write(request)
    except (DependencyError, asyncio.InvalidStateError, grpc.aio.UsageError):
        return  # the stream ended: its reader says why


def _broke(error: DependencyError) -> bool:
    """The watch stream ended for reasons of its own, not of what it carries: open it again."""
    # grpc reports a stream that ended while a request was being written (a replica draining as
    # a mirror is added) as this INTERNAL instead of the stream's status.
    return error.status_code in _REOPEN or (
        error.status_code == grpc.StatusCode.INTERNAL and error.status_message == "Internal error from Core"
    )


def _continuing(log: SessionLog, events: Sequence[events_pb2.RuntimeEvent]) -> Sequence[events_pb2.RuntimeEvent]:
    """The events of a contiguous batch that come after what `log` holds, if they continue it.

    A batch sent before sessions took a remove may arrive after the add that followed it
    (a mirror made again at another cursor): its repeats are dropped, and a batch that
    would leave a gap is not this mirror's (the new add sends those events in order).
    """
    start = log.last_seq + 1
    if not events or events[0].seq > start or events[-1].seq < start:
        return ()
    return events[start - events[0].seq :]


def _batch(response: sessions_pb2.ReadEventsResponse, raw: bytes) -> Batch:
    """The response's events, with its bytes as their wire form (events are field 1 there and in every
    gateway response, so these bytes are a ready SubscribeResponse)."""
    batch = Batch(response.events)
    batch.wire = raw
    return batch


class RemoteEventLog:
    def __init__(
        self, clients: Clients, tenant_of: Any, retention: int, max_lag: int, max_batch: int, fanout_rate: float
    ) -> None:
        self.clients = clients
        self.sessions = SessionsClient.of(clients)
        self.tenant_of = tenant_of  # the tenant of the RPC asking (the log is read as that tenant)
        self.retention, self.max_lag, self.max_batch, self.fanout_rate = retention, max_lag, max_batch, fanout_rate
        self._mirrors: dict[tuple[str, str], _Mirror] = {}  # (tenant, session) -> its mirror
        self._watching: asyncio.Task[None] | None = None  # keeps the WatchEvents stream open while mirrors live
        self._requests: asyncio.Queue[sessions_pb2.WatchEventsRequest | None] | None = None  # the open stream's
        self.per_session = False  # sessions has no WatchEvents: each mirror reads its own ReadEvents stream
        self.streams_opened = 0

    async def state(self, session_id: str) -> sessions_pb2.GetEventLogStateResponse:
        return await self.sessions.GetEventLogState(
            sessions_pb2.GetEventLogStateRequest(tenant_id=self.tenant_of(), session_id=session_id)
        )

    async def last_seq(self, session_id: str) -> int:
        return int((await self.state(session_id)).last_seq)

    async def ends_with_turn_end(self, session_id: str) -> bool:
        return bool((await self.state(session_id)).ends_with_turn_end)

    async def drop(self, session_id: str) -> None:
        """Deleting the session in sessions drops its log: the mirror's upstream ends NOT_FOUND."""

    async def read(
        self, session_id: str, after_seq: int, heartbeat_s: float, log_end: int | None = None
    ) -> AsyncIterator[Batch | None]:
        tenant = self.tenant_of()
        fresh = (tenant, session_id) not in self._mirrors
        # A new mirror fills from the reader's cursor: up to the log's end that is history, not lag.
        replay_until = 0
        if fresh:
            replay_until = log_end if log_end is not None else await self.last_seq(session_id)
        mirror = await self._attach(session_id, tenant, after_seq)
        key = (tenant, session_id)
        try:
            if mirror.failure is not None:
                raise mirror.failure
            # A cursor past the mirror's end waits for it (the mirror trails the log by a moment);
            # callers check a cursor against the log's real end (`last_seq`) first.
            cursor = after_seq
            if cursor < mirror.log.first_seq - 1:  # older than the mirror: replay that part from sessions
                async for batch in self._replay(tenant, session_id, cursor, mirror.log.first_seq - 1):
                    cursor = batch[-1].seq
                    yield batch
            try:
                async for item in tail(
                    session_id, mirror.log, cursor, heartbeat_s, self.max_lag, self.max_batch, replay_until=replay_until
                ):
                    yield item
            except CogmeshError:
                if mirror.failure is not None:  # the mirror closed because its upstream failed: say why
                    raise mirror.failure from None
                raise
        finally:
            self._detach(key, mirror)

    async def _replay(self, tenant: str, session_id: str, cursor: int, stop: int) -> AsyncIterator[Batch]:
        request = sessions_pb2.ReadEventsRequest(tenant_id=tenant, session_id=session_id, after_seq=cursor)
        stream = self.sessions.ReadEvents(request)
        try:
            async for response in stream:
                batch = Batch(e for e in response.events if e.seq <= stop)
                if batch:
                    yield batch
                if not batch or batch[-1].seq >= stop:
                    return
        finally:
            stream.cancel()

    async def _attach(self, session_id: str, tenant: str, after_seq: int) -> _Mirror:
        mirror = self._mirrors.get((tenant, session_id))
        if mirror is None or mirror.log.closed:
            # A new mirror starts at its first reader's cursor: the upstream stream replays from there.
            mirror = _Mirror(SessionLog(self.retention, last_seq=after_seq, rate=self.fanout_rate))
            self._mirrors[(tenant, session_id)] = mirror
            self._feed((tenant, session_id), mirror)
        mirror.readers += 1
        return mirror

    def _feed(self, key: tuple[str, str], mirror: _Mirror) -> None:
        """Have sessions send the mirror the events after its cursor."""
        # The feed serves every reader of the session, so it belongs to none of their traces (nor deadlines).
        if self.per_session:
            mirror.task = asyncio.create_task(
                self._follow(key[1], key[0], mirror, mirror.log.last_seq),
                name=f"log:{key[1]}",
                context=contextvars.Context(),
            )
        elif self._requests is not None:
            self._requests.put_nowait(_add(key, mirror.log.last_seq))
        elif self._watching is None:
            self._watching = asyncio.create_task(self._watch(), name="log-watch", context=contextvars.Context())
        # else the stream is being reopened: it adds every live mirror as it opens

    def _detach(self, key: tuple[str, str], mirror: _Mirror) -> None:
        mirror.readers -= 1
        if mirror.readers == 0:
            if self._mirrors.get(key) is mirror:
                del self._mirrors[key]
                if self._requests is not None and not mirror.log.closed:
                    self._requests.put_nowait(_remove(key))
            if mirror.task is not None:
                mirror.task.cancel()

    def _live(self) -> list[tuple[tuple[str, str], _Mirror]]:
        return [(key, mirror) for key, mirror in self._mirrors.items() if not mirror.log.closed]

    async def _watch(self) -> None:
        """Keep this gateway's WatchEvents stream open while it has mirrors to feed; reopen it when it breaks."""
        delay = RETRY_S
        try:
            while live := self._live():
                requests: asyncio.Queue[sessions_pb2.WatchEventsRequest | None] = asyncio.Queue()
                for key, mirror in live:
                    requests.put_nowait(_add(key, mirror.log.last_seq))
                self._requests = requests
                self.streams_opened += 1
                call = self.sessions.WatchEvents()
                writer: asyncio.Task[None] | None = None
                try:
                    # The replica answers the first request with an empty response; the adds are written
                    # after it, so an older replica's UNIMPLEMENTED is not hidden (see _broke).
                    with contextlib.suppress(asyncio.InvalidStateError, grpc.aio.UsageError):  # read() says why
                        await call.write(sessions_pb2.WatchEventsRequest(heartbeat_ms=UPSTREAM_HEARTBEAT_MS))
                    while (response := await call.read()) is not None:
                        if writer is None:
                            writer = asyncio.create_task(_send(call, requests), name="log-watch-requests")
                        else:
                            delay = RETRY_S
                        self._route(response)
                    log.warning("event log watch from sessions ended; reopening")
                except DependencyError as exc:
                    if exc.status_code == grpc.StatusCode.UNIMPLEMENTED:
                        log.info("sessions has no WatchEvents: each session's log is read on a stream of its own")
                        self._read_per_session()
                        return
                    if _broke(exc):
                        log.warning("event log watch from sessions broke; reopening", error=exc.status_message)
                    else:
                        self._fail_all(exc)
                finally:
                    self._requests = None
                    if writer is not None:
                        writer.cancel()
                    call.cancel()
                if not self._live():
                    return
                await asyncio.sleep(_jittered(delay))
                delay = min(delay * 2, MAX_RETRY_S)
        finally:
            self._watching = None

    def _route(self, response: sessions_pb2.WatchEventsResponse) -> None:
        """Hand a watch response to its session's mirror (a heartbeat names no session: no mirror)."""
        key = (response.tenant_id, response.session_id)
        mirror = self._mirrors.get(key)
        if mirror is None or mirror.log.closed:
            return  # no longer watched here: its remove crossed this response
        if response.error:
            self._watch_failed(key, mirror, response.error)
            return
        events = _continuing(mirror.log, response.events)
        if events:
            mirror.log.add(events)
            mirror.retry_s = RETRY_S

    def _watch_failed(self, key: tuple[str, str], mirror: _Mirror, status: bytes) -> None:
        """A session left the watch with `status`: add it again later if that may pass, else close its mirror."""
        error = from_dependency_status(status, "sessions")
        if error.status_code in _RECONNECT:
            log.warning(
                "event log watch of a session broke; adding it again", session_id=key[1], error=error.status_message
            )
            asyncio.get_running_loop().call_later(_jittered(mirror.retry_s), self._add_again, key, mirror)
            mirror.retry_s = min(mirror.retry_s * 2, MAX_RETRY_S)
            return
        gone = error.status_code == grpc.StatusCode.NOT_FOUND
        mirror.failure = session_gone(key[1]) if gone else error
        mirror.log.close()

    def _add_again(self, key: tuple[str, str], mirror: _Mirror) -> None:
        # A stream reopened meanwhile added it already (adding it twice moves nothing).
        if self._mirrors.get(key) is mirror and not mirror.log.closed and self._requests is not None:
            self._requests.put_nowait(_add(key, mirror.log.last_seq))

    def _fail_all(self, error: CogmeshError) -> None:
        for _, mirror in self._live():
            mirror.failure = error
            mirror.log.close()

    def _read_per_session(self) -> None:
        self.per_session = True
        for key, mirror in self._live():
            if mirror.task is None:
                self._feed(key, mirror)

    async def _follow(self, session_id: str, tenant: str, mirror: _Mirror, cursor: int) -> None:
        """Keep the mirror filled from the session's log after `cursor`, reconnecting as needed."""
        while True:
            try:
                request = sessions_pb2.ReadEventsRequest(
                    tenant_id=tenant,
                    session_id=session_id,
                    after_seq=cursor,
                    follow=True,
                    heartbeat_ms=UPSTREAM_HEARTBEAT_MS,
                )
                async for response in self.sessions.ReadEvents(request):
                    if response.events:
                        mirror.log.add(list(response.events))
                        cursor = mirror.log.last_seq
                return
            except DependencyError as exc:
                if exc.status_code in _RECONNECT:
                    log.warning("event log stream from sessions broke; reconnecting", error=exc.status_message)
                    await asyncio.sleep(RETRY_S)
                    continue
                mirror.failure = session_gone(session_id) if exc.status_code == grpc.StatusCode.NOT_FOUND else exc
                mirror.log.close()
                return

    async def close(self) -> None:
        watching = self._watching
        if watching is not None:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        mirrors = list(self._mirrors.values())
        self._mirrors.clear()
        for mirror in mirrors:
            mirror.log.close()
            if mirror.task is not None:
                mirror.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await mirror.task
