"""The event log of the embedded default, read from the sessions service (SessionsService.ReadEvents).

The log lives in the sessions process, where runtimes append to it, so a turn's
events do not depend on this gateway. Every session this replica watches has one
stream from sessions feeding a local mirror (a `SessionLog`), and every local reader
tails the mirror: a hundred subscribers of one session cost one upstream stream,
and the fan-out stays in memory. A reader whose cursor is older than what the mirror
holds replays that part straight from sessions first.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from cogmesh.sessions.v1 import sessions_pb2
from services.kit.clients import Clients
from services.kit.errors import CogmeshError, from_dependency
from services.kit.event_log import Batch, SessionLog, session_gone, tail
from services.kit.logging import log

UPSTREAM_HEARTBEAT_MS = 15_000
# The upstream stream is away, or this mirror fell behind (cut off): pick up again from its cursor.
_RECONNECT = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
)
RETRY_S = 0.2


@dataclass
class _Mirror:
    log: SessionLog
    readers: int = 0
    task: asyncio.Task[None] | None = None
    failure: CogmeshError | None = None


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
        self.tenant_of = tenant_of  # the tenant of the RPC asking (the log is read as that tenant)
        self.retention, self.max_lag, self.max_batch, self.fanout_rate = retention, max_lag, max_batch, fanout_rate
        self._mirrors: dict[tuple[str, str], _Mirror] = {}  # (tenant, session) -> its mirror

    async def state(self, session_id: str) -> sessions_pb2.GetEventLogStateResponse:
        try:
            reply: sessions_pb2.GetEventLogStateResponse = await self.clients.sessions.GetEventLogState(
                sessions_pb2.GetEventLogStateRequest(tenant_id=self.tenant_of(), session_id=session_id)
            )
            return reply
        except grpc.aio.AioRpcError as exc:
            raise from_dependency(exc, "sessions") from exc

    async def last_seq(self, session_id: str) -> int:
        return int((await self.state(session_id)).last_seq)

    async def ends_with_turn_end(self, session_id: str) -> bool:
        return bool((await self.state(session_id)).ends_with_turn_end)

    async def drop(self, session_id: str) -> None:
        """Deleting the session in sessions drops its log: the mirror's upstream ends NOT_FOUND."""

    async def read(self, session_id: str, after_seq: int, heartbeat_s: float) -> AsyncIterator[Batch | None]:
        tenant = self.tenant_of()
        fresh = (tenant, session_id) not in self._mirrors
        # A new mirror fills from the reader's cursor: up to the log's end that is history, not lag.
        replay_until = await self.last_seq(session_id) if fresh else 0
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
        stream = self.clients.sessions.ReadEvents(request)
        try:
            async for response in stream:
                batch = Batch(e for e in response.events if e.seq <= stop)
                if batch:
                    yield batch
                if not batch or batch[-1].seq >= stop:
                    return
        except grpc.aio.AioRpcError as exc:
            raise from_dependency(exc, "sessions") from exc
        finally:
            stream.cancel()

    async def _attach(self, session_id: str, tenant: str, after_seq: int) -> _Mirror:
        mirror = self._mirrors.get((tenant, session_id))
        if mirror is None or mirror.log.closed:
            # A new mirror starts at its first reader's cursor: the upstream stream replays from there.
            mirror = _Mirror(SessionLog(self.retention, last_seq=after_seq, rate=self.fanout_rate))
            self._mirrors[(tenant, session_id)] = mirror
            # The mirror serves every reader of the session, so it belongs to none of their traces.
            mirror.task = asyncio.create_task(
                self._follow(session_id, tenant, mirror, after_seq),
                name=f"log:{session_id}",
                context=contextvars.Context(),
            )
        mirror.readers += 1
        return mirror

    def _detach(self, key: tuple[str, str], mirror: _Mirror) -> None:
        mirror.readers -= 1
        if mirror.readers == 0:
            if self._mirrors.get(key) is mirror:
                del self._mirrors[key]
            if mirror.task is not None:
                mirror.task.cancel()

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
                async for response in self.clients.sessions.ReadEvents(request):
                    if response.events:
                        mirror.log.add(list(response.events))
                        cursor = mirror.log.last_seq
                return
            except grpc.aio.AioRpcError as exc:
                retry = (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                )
                if exc.code() in retry:
                    log.warning("event log stream from sessions broke; reconnecting", error=exc.details())
                    await asyncio.sleep(RETRY_S)
                    continue
                mirror.failure = (
                    session_gone(session_id)
                    if exc.code() == grpc.StatusCode.NOT_FOUND
                    else from_dependency(exc, "sessions")
                )
                mirror.log.close()
                return

    async def close(self) -> None:
        mirrors = list(self._mirrors.values())
        self._mirrors.clear()
        for mirror in mirrors:
            mirror.log.close()
            if mirror.task is not None:
                mirror.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await mirror.task
