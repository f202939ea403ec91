"""Turns as background tasks: a turn runs to its end whether or not the client that
started it keeps listening, and every event it produces lands in the event log.

`TurnRunner` holds what every turn needs (the lease kept alive, cancel, shutdown);
`TurnDriver` (gateway/interrupts.py) starts, drives and resumes turns on top of it."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc

from cogmesh.common.v1 import events_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway import auth
from gateway.cancel_relay import CancelRelay
from gateway.event_log import EventLog, OpenTurn
from gateway.reaper import Reaper
from services.kit.clients import Clients, call
from services.kit.config import Settings
from services.kit.errors import CogmeshError, Unavailable
from services.kit.logging import log

_ERROR_KINDS = {
    grpc.StatusCode.UNAVAILABLE: events_pb2.ERROR_KIND_UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: events_pb2.ERROR_KIND_DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED: events_pb2.ERROR_KIND_CANCELLED,
    grpc.StatusCode.INVALID_ARGUMENT: events_pb2.ERROR_KIND_INVALID_REQUEST,
    grpc.StatusCode.NOT_FOUND: events_pb2.ERROR_KIND_INVALID_REQUEST,
    grpc.StatusCode.FAILED_PRECONDITION: events_pb2.ERROR_KIND_INVALID_REQUEST,
    grpc.StatusCode.RESOURCE_EXHAUSTED: events_pb2.ERROR_KIND_RATE_LIMITED,
}
_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}


def error_event(turn_id: str, kind: int, message: str, retryable: bool) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(
        turn_id=turn_id,
        error=events_pb2.TurnError(kind=kind, message=message, retryable=retryable),  # type: ignore[arg-type]
    )


class EventLogLost(Exception):
    """The event log stayed unreachable longer than a turn may wait for it."""


LEASE_TTL_S = Settings.model_fields["turn_lease_ttl_s"].default  # the default; settings.turn_lease_ttl_s rules


class TurnRunner:
    def __init__(self, settings: Settings, clients: Clients, events: EventLog):
        self.settings, self.clients, self.events = settings, clients, events
        self._running: dict[str, tuple[str, asyncio.Task[None]]] = {}  # session_id -> (turn_id, task)
        self.relay: CancelRelay | None = None  # set when replicas share Redis
        self.lease_ttl_s = settings.turn_lease_ttl_s
        # Ends turns whose gateway replica died (only a shared log outlives its gateway).
        self.reaper = Reaper(events, clients, settings.reaper_interval_s)
        self.reaper.start()
        self._releasing: set[asyncio.Task[Any]] = set()  # releases still retrying after their turn ended

    def open_turn(self, tenant_id: str, session_id: str, turn_id: str) -> OpenTurn:
        return OpenTurn(session_id, turn_id, tenant_id, self.lease_ttl_s)

    def _forget(self, session_id: str, turn_id: str) -> None:
        if self._running.get(session_id, ("", None))[0] == turn_id:
            del self._running[session_id]

    async def _keep_lease(self, request: runtime_pb2.RunTurnRequest) -> None:
        """Renew the lease while the turn runs; stop the turn when another caller interrupts it."""
        while True:
            await asyncio.sleep(self.settings.turn_lease_renew_s)
            try:
                reply = await self.clients.sessions.RenewTurnLease(
                    sessions_pb2.RenewTurnLeaseRequest(
                        tenant_id=request.tenant_id,
                        session_id=request.session_id,
                        lease_token=request.lease_token,
                        ttl_seconds=int(self.lease_ttl_s),
                    )
                )
                await self.events.keep_turn(self.open_turn(request.tenant_id, request.session_id, request.turn_id))
            except CogmeshError as exc:  # the log's mark lapses; the lease still holds the session
                log.warning("could not renew the turn's mark in the event log", error=exc.message)
                continue
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    continue  # sessions briefly away: the lease outlives a few missed renewals
                log.warning("turn lost its lease; stopping it", details=exc.details())
                reply = None
            if reply is None or reply.interrupt_requested_by:
                await self.cancel(request.session_id, request.turn_id)
                return

    async def _release(self, request: runtime_pb2.RunTurnRequest, patience_s: float | None = None) -> bool:
        """Give the lease back, retrying while sessions is away (the release is idempotent under its token).

        Gives up after `patience_s` (default: the lease's TTL, past which it has expired anyway).
        """
        loop = asyncio.get_running_loop()
        give_up = loop.time() + (self.lease_ttl_s if patience_s is None else patience_s)
        release = sessions_pb2.ReleaseTurnLeaseRequest(
            tenant_id=request.tenant_id, session_id=request.session_id, lease_token=request.lease_token
        )
        delay = 0.05
        while True:
            left = give_up - loop.time()
            try:
                await self.clients.sessions.ReleaseTurnLease(
                    release, timeout=max(0.05, min(self.settings.call_timeout_s, left)), wait_for_ready=True
                )
                return True
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in _RETRYABLE or left <= delay:
                    # NOT_FOUND / FAILED_PRECONDITION: the session or the lease is gone already.
                    log.warning("lease release failed", code=exc.code().name, details=exc.details())
                    return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    def release_soon(self, request: runtime_pb2.RunTurnRequest) -> asyncio.Task[bool]:
        """Release in a task of its own that outlives the caller's cancellation."""
        task = asyncio.create_task(self._release(request))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)
        return task

    async def release_now(self, request: runtime_pb2.RunTurnRequest) -> None:
        """Release, waiting one call deadline at most; a release still retrying then goes on by itself."""
        await asyncio.wait([self.release_soon(request)], timeout=self.settings.call_timeout_s)

    async def append(
        self,
        session_id: str,
        events: list[events_pb2.RuntimeEvent],
        opened: OpenTurn | None = None,
        batch_id: str = "",
        patience_s: float | None = None,
    ) -> None:
        """Append to the event log, riding out an outage of up to `patience_s` (event_log_outage_s).

        Retries carry the same batch id, so an append that did land before its reply was lost
        is not logged twice. Raises EventLogLost when the log stays away longer.
        """
        loop = asyncio.get_running_loop()
        give_up = loop.time() + (self.settings.event_log_outage_s if patience_s is None else patience_s)
        delay, failures = 0.05, 0
        while True:
            try:
                await self.events.append(session_id, events, opened, batch_id=batch_id)
                if failures:
                    log.info("event log back; turn goes on", session_id=session_id, failed_appends=failures)
                return
            except Unavailable as exc:
                failures += 1
                if loop.time() + delay >= give_up:
                    raise EventLogLost(exc.message) from exc
                if failures == 1:
                    log.warning("event log unavailable; holding the turn's events", error=exc.message)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    def running_turn(self, session_id: str) -> str:
        return self._running.get(session_id, ("", None))[0]

    async def cancel(self, session_id: str, turn_id: str, tenant_id: str = "") -> str:
        """Signal the session's running turn (or the given one); returns the turn signalled, or "".

        A turn driven by another gateway replica is reached through the cancel relay.
        """
        caller = auth.current.get(None)  # the tenant of the RPC asking, set by GatewayGuard
        tenant_id = tenant_id or (caller.tenant_id if caller else "")
        if not self.running_turn(session_id) and self.relay is not None and tenant_id:
            lease = await call(
                "sessions",
                self.clients.sessions.GetTurnLease,
                sessions_pb2.GetTurnLeaseRequest(tenant_id=tenant_id, session_id=session_id),
            )
            running = lease.lease.turn_id
            if not running or (turn_id and turn_id != running):
                return ""
            return running if await self.relay.publish(session_id, running) else ""
        return await self.cancel_local(session_id, turn_id)

    async def cancel_local(self, session_id: str, turn_id: str) -> str:
        running = self.running_turn(session_id)
        if not running or (turn_id and turn_id != running):
            return ""
        reply = await call(
            "runtime",
            self.clients.runtime.CancelTurn,
            runtime_pb2.CancelTurnRequest(session_id=session_id, turn_id=running),
        )
        return running if reply.cancelled else ""

    async def close(self) -> None:
        await self.reaper.close()
        tasks = [task for _, task in self._running.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for release in list(self._releasing):
            release.cancel()
