"""Turns as background tasks: a turn runs to its end whether or not the client that
started it keeps listening, and every event it produces lands in the event log."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import grpc

from cogmesh.common.v1 import events_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway import auth
from gateway.cancel_relay import CancelRelay
from gateway.event_log import EventLog, is_terminal
from services.kit.clients import Clients, call
from services.kit.config import Settings
from services.kit.errors import CogmeshError
from services.kit.logging import bind_request, log

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


LEASE_TTL_S = 30  # a crashed gateway frees its sessions this fast; live turns renew well before
RENEW_EVERY_S = 2.0  # also how soon an INTERRUPT from another replica reaches the running turn


class TurnRunner:
    def __init__(self, settings: Settings, clients: Clients, events: EventLog):
        self.settings, self.clients, self.events = settings, clients, events
        self._running: dict[str, tuple[str, asyncio.Task[None]]] = {}  # session_id -> (turn_id, task)
        self.relay: CancelRelay | None = None  # set when replicas share Redis

    async def start(
        self,
        tenant_id: str,
        session_id: str,
        content: str,
        model: str,
        deadline_s: float | None = None,
        strategy: sessions_pb2.MultitaskStrategy = sessions_pb2.MULTITASK_STRATEGY_REJECT,
    ) -> tuple[str, int]:
        """Take the session's turn lease and start the turn; returns (turn_id, seq before its first event).

        `strategy` decides what happens when another turn runs: REJECT fails at once,
        ENQUEUE waits its turn and INTERRUPT cancels the running one (both within the deadline).
        """
        turn_id = uuid.uuid4().hex
        if strategy == sessions_pb2.MULTITASK_STRATEGY_INTERRUPT and self.running_turn(session_id):
            await self.cancel(session_id, "")  # it runs here: no need to wait for its next renewal
        wait_s = deadline_s or self.settings.turn_timeout_s
        lease = await call(
            "sessions",
            lambda r: self.clients.sessions.AcquireTurnLease(
                r, timeout=None if strategy == sessions_pb2.MULTITASK_STRATEGY_REJECT else wait_s
            ),
            sessions_pb2.AcquireTurnLeaseRequest(
                tenant_id=tenant_id, session_id=session_id, turn_id=turn_id, ttl_seconds=LEASE_TTL_S, strategy=strategy
            ),
        )
        start_seq = await self.events.last_seq(session_id)
        # Acknowledge at once: watchers learn the turn id and its first seq before the runtime answers.
        accepted = events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_QUEUED, text="accepted")
        await self.events.append(session_id, [events_pb2.RuntimeEvent(turn_id=turn_id, status=accepted)])
        request = runtime_pb2.RunTurnRequest(
            tenant_id=tenant_id,
            session_id=session_id,
            turn_id=turn_id,
            content=content,
            model=model,
            lease_token=lease.lease_token,
        )
        # The caller's deadline bounds the turn too (it reaches the runtime as the RunTurn deadline).
        timeout = min(self.settings.turn_timeout_s, deadline_s) if deadline_s else self.settings.turn_timeout_s
        task = asyncio.create_task(self._drive(request, timeout))
        self._running[session_id] = (turn_id, task)
        task.add_done_callback(lambda _: self._forget(session_id, turn_id))
        return turn_id, start_seq

    def _forget(self, session_id: str, turn_id: str) -> None:
        if self._running.get(session_id, ("", None))[0] == turn_id:
            del self._running[session_id]

    async def _keep_lease(self, request: runtime_pb2.RunTurnRequest) -> None:
        """Renew the lease while the turn runs; stop the turn when another caller interrupts it."""
        while True:
            await asyncio.sleep(RENEW_EVERY_S)
            try:
                reply = await self.clients.sessions.RenewTurnLease(
                    sessions_pb2.RenewTurnLeaseRequest(
                        tenant_id=request.tenant_id,
                        session_id=request.session_id,
                        lease_token=request.lease_token,
                        ttl_seconds=LEASE_TTL_S,
                    )
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    continue  # sessions briefly away: the lease outlives a few missed renewals
                log.warning("turn lost its lease; stopping it", details=exc.details())
                reply = None
            if reply is None or reply.interrupt_requested_by:
                await self.cancel(request.session_id, request.turn_id)
                return

    async def _drive(self, request: runtime_pb2.RunTurnRequest, timeout_s: float) -> None:
        bind_request(session_id=request.session_id, turn_id=request.turn_id, tenant=request.tenant_id)
        released = False
        keeper = asyncio.create_task(self._keep_lease(request))

        async def end_turn(events: list[events_pb2.RuntimeEvent]) -> None:
            # Free the session before its last event is visible: whoever sees `final` may start the next turn.
            nonlocal released
            if not released:
                released = True
                keeper.cancel()
                await asyncio.shield(self._release(request))
            await self.events.append(request.session_id, events)

        try:
            async for response in self.clients.runtime.RunTurn(request, timeout=timeout_s):
                for event in response.events:
                    event.turn_id = request.turn_id
                if any(is_terminal(e) for e in response.events):
                    await end_turn(list(response.events))
                else:
                    await self.events.append(request.session_id, response.events)
            if not released:
                await end_turn(
                    [
                        error_event(
                            request.turn_id,
                            events_pb2.ERROR_KIND_INTERNAL,
                            "runtime ended the turn without a final event",
                            True,
                        )
                    ]
                )
        except grpc.aio.AioRpcError as exc:
            log.warning("turn failed", code=exc.code().name, details=exc.details())
            kind = _ERROR_KINDS.get(exc.code(), events_pb2.ERROR_KIND_INTERNAL)
            message = f"runtime: {exc.code().name}: {exc.details()}"
            await end_turn([error_event(request.turn_id, kind, message, exc.code() in _RETRYABLE)])
        except asyncio.CancelledError:
            message = "gateway shut down during the turn"
            await end_turn([error_event(request.turn_id, events_pb2.ERROR_KIND_UNAVAILABLE, message, True)])
            raise
        except CogmeshError as exc:  # the event log itself failed (e.g. Redis away): nowhere to report it
            log.error("turn aborted: cannot log its events", error=exc.message)
        finally:
            keeper.cancel()
            if not released:  # never leave the session locked until the lease expires
                await asyncio.shield(self._release(request))

    async def _release(self, request: runtime_pb2.RunTurnRequest) -> None:
        try:
            await self.clients.sessions.ReleaseTurnLease(
                sessions_pb2.ReleaseTurnLeaseRequest(
                    tenant_id=request.tenant_id, session_id=request.session_id, lease_token=request.lease_token
                )
            )
        except grpc.aio.AioRpcError as exc:  # the lease then expires on its own
            log.warning("lease release failed", code=exc.code().name, details=exc.details())

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
        tasks = [task for _, task in self._running.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
