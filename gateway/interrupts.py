"""Paused turns at the gateway: starting turns with per-turn options, resuming and abandoning paused ones.

A turn pauses when the runtime needs an answer from outside (an approval, the
user's input, a client-side tool's result). The runtime writes a checkpoint to the
sessions service, emits the interrupt event and a TURN_STATE_PAUSED status, and
ends its stream. `TurnDriver` then frees the session's lease before that status is
visible, like at the end of a turn, so whoever reads it can answer at once.

The answer may reach any gateway replica. `resume` records nothing itself (the
servicer records the decision with DecideCheckpoint first); it takes the lease
under a resume id of its own, `<turn_id>:resume:<random>`, so a second replica
trying to resume the same turn at the same moment is refused instead of getting
the same fencing token, and calls RuntimeService.ResumeTurn on any runtime
replica. The resumed turn keeps its turn_id, and its events go to the same event
log. `abandon` gives a paused turn up (CancelTurn on a paused turn): the runtime
answers the pending calls with a cancellation, stores the turn's messages and
ends it with an error of kind cancelled.

`TurnDriver` extends `TurnRunner` (gateway/turns.py) with starting, driving,
resuming and abandoning turns. A new turn is refused while one is paused: the lease
answer carries the session's pending interrupts, so the common path costs one call
to sessions, and only a session with a pending interrupt pays for the checkpoint read.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import struct_pb2

from cogmesh.common.v1 import errors_pb2, events_pb2, messages_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway import auth
from gateway.event_log import OpenTurn
from gateway.event_log import ends_stream as ends_stream  # re-exported for the servicers
from gateway.event_log import is_paused as is_paused
from gateway.turns import _ERROR_KINDS, _RETRYABLE, EventLogLost, TurnRunner, error_event
from services.kit.clients import call
from services.kit.errors import CogmeshError, FailedPrecondition, NotFound, Unavailable, from_dependency
from services.kit.logging import bind_request, log

RESUME_MARK = ":resume:"
HANDOVER_S = 5.0  # how long an answer waits for a just-paused turn to hand its lease back


class _BatchIds:
    """Ids of one pump's appends: a retried append repeats its id, so the log keeps it once."""

    def __init__(self) -> None:
        self.prefix, self.count = uuid.uuid4().hex[:16], 0

    def next(self) -> str:
        self.count += 1
        return f"{self.prefix}:{self.count}"


class Following(Exception):
    """Another caller is resuming the turn at this moment."""


def turn_of_lease(lease_turn_id: str) -> str:
    """The turn a lease holder id stands for (a resume holds the lease under a suffixed id)."""
    return lease_turn_id.split(RESUME_MARK, 1)[0]


@dataclass(frozen=True)
class TurnOptions:
    """What SendMessage may set for one turn, passed on to RunTurnRequest."""

    runtime: str = ""
    output_schema: struct_pb2.Struct | None = None
    limits: runtime_pb2.TurnLimits | None = None
    cost_budget: runtime_pb2.CostBudget | None = None
    client_tools: Sequence[messages_pb2.ToolSpec] = field(default_factory=tuple)

    def apply(self, request: runtime_pb2.RunTurnRequest) -> None:
        request.runtime = self.runtime
        if self.output_schema is not None:
            request.output_schema.CopyFrom(self.output_schema)
        if self.limits is not None:
            request.limits.CopyFrom(self.limits)
        if self.cost_budget is not None:
            request.cost_budget.CopyFrom(self.cost_budget)
        request.client_tools.extend(self.client_tools)


TurnRequest = runtime_pb2.RunTurnRequest | runtime_pb2.ResumeTurnRequest


class TurnDriver(TurnRunner):
    """TurnRunner that also knows paused turns: per-turn options, resume, abandon."""

    async def start(
        self,
        tenant_id: str,
        session_id: str,
        content: str,
        model: str,
        deadline_s: float | None = None,
        strategy: sessions_pb2.MultitaskStrategy = sessions_pb2.MULTITASK_STRATEGY_REJECT,
        options: TurnOptions | None = None,
    ) -> tuple[str, int]:
        """Take the session's turn lease and start the turn; returns (turn_id, seq before its first event)."""
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
                tenant_id=tenant_id,
                session_id=session_id,
                turn_id=turn_id,
                ttl_seconds=int(self.lease_ttl_s),
                strategy=strategy,
            ),
        )
        request = runtime_pb2.RunTurnRequest(
            tenant_id=tenant_id,
            session_id=session_id,
            turn_id=turn_id,
            content=content,
            model=model,
            lease_token=lease.lease_token,
        )
        if lease.pending_interrupt_ids:
            await self._refuse_if_paused(tenant_id, session_id, lease.lease_token)
        try:
            start_seq = await self.events.last_seq(session_id)
            # Acknowledge at once: watchers learn the turn id and its first seq before the runtime answers.
            accepted = events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_QUEUED, text="accepted")
            await self.append(
                session_id,
                [events_pb2.RuntimeEvent(turn_id=turn_id, status=accepted)],
                opened=self.open_turn(tenant_id, session_id, turn_id),
                batch_id=f"{turn_id}:accepted",
                patience_s=self.settings.call_timeout_s,
            )
        except BaseException as exc:  # nothing started: hand the lease back at once
            self.release_soon(request)
            if isinstance(exc, EventLogLost):
                raise Unavailable(
                    f"event log (Redis) unavailable: {exc}; nothing was started, send the message again",
                    metadata={"dependency": "redis", "retryable": "true"},
                ) from exc
            raise
        if options is not None:
            options.apply(request)
        timeout = self._timeout(deadline_s)
        task = asyncio.create_task(self._drive(request, timeout))
        self._track(session_id, turn_id, task)
        return turn_id, start_seq

    async def _refuse_if_paused(self, tenant_id: str, session_id: str, token: int) -> None:
        """A paused turn waits for its answer: give the lease back and say which interrupt it waits for."""
        checkpoint = await self.paused(tenant_id, session_id)
        if checkpoint is None:
            return  # answered in the meantime: the lease is ours to use
        release = sessions_pb2.ReleaseTurnLeaseRequest(tenant_id=tenant_id, session_id=session_id, lease_token=token)
        await asyncio.shield(call("sessions", self.clients.sessions.ReleaseTurnLease, release))
        raise paused_error(session_id, checkpoint)

    def _timeout(self, deadline_s: float | None) -> float:
        # The caller's deadline bounds the turn too (it reaches the runtime as the RPC deadline).
        return min(self.settings.turn_timeout_s, deadline_s) if deadline_s else self.settings.turn_timeout_s

    def _track(self, session_id: str, turn_id: str, task: asyncio.Task[None]) -> None:
        self._running[session_id] = (turn_id, task)
        task.add_done_callback(lambda _: self._forget(session_id, turn_id))

    async def _drive(self, request: TurnRequest, timeout_s: float) -> None:
        # A runtime that just restarted is waited for by the kit's channel (a bounded ready-wait per call).
        if isinstance(request, runtime_pb2.ResumeTurnRequest):
            stream = self.clients.runtime.ResumeTurn(request, timeout=timeout_s)
        else:
            stream = self.clients.runtime.RunTurn(request, timeout=timeout_s)
        await self._pump(request, stream, [])

    async def _pump(
        self, request: TurnRequest, stream: Any, first: list[events_pb2.RuntimeEvent], opened: OpenTurn | None = None
    ) -> None:
        """Log the turn's events; free the lease before its last event (final, error or pause) is visible.

        Every way out logs an end: the runtime's own, or an error saying what failed (the
        runtime's status, a message that did not decode, a bug here). An event log that is
        away is waited for (`append`); one away too long ends the turn once it is back.
        """
        bind_request(session_id=request.session_id, turn_id=request.turn_id, tenant=request.tenant_id)
        released = ended = False
        keeper = asyncio.create_task(self._keep_lease(request))  # type: ignore[arg-type]
        batch_ids = _BatchIds()

        async def release() -> None:
            nonlocal released
            if not released:
                keeper.cancel()
                released = True
                # A sessions service that is away delays the end event by one call deadline at most.
                await self.release_now(request)  # type: ignore[arg-type]

        async def log_events(events: list[events_pb2.RuntimeEvent], patience_s: float | None = None) -> None:
            nonlocal opened, ended
            for event in events:
                event.turn_id = request.turn_id
            closing = any(ends_stream(e) for e in events)
            if closing:
                await release()
            await self.append(request.session_id, events, opened, batch_ids.next(), patience_s)
            opened = None  # marked open once; `_keep_lease` renews the mark
            ended = ended or closing

        async def fail(kind: int, message: str, retryable: bool, patience_s: float | None = None) -> None:
            if not ended:
                await log_events([error_event(request.turn_id, kind, message, retryable)], patience_s)

        try:
            if first:
                await log_events(first)
            async for response in stream:
                if response is None:  # grpc logged "Exception deserializing message!" and gave us nothing
                    stream.cancel()
                    message = "runtime sent a message the gateway could not decode; the turn was stopped"
                    await fail(events_pb2.ERROR_KIND_INTERNAL, message, True)
                    return
                await log_events(list(response.events))
            await fail(events_pb2.ERROR_KIND_INTERNAL, "runtime ended the turn without a final event", True)
        except grpc.aio.AioRpcError as exc:
            log.warning("turn failed", code=exc.code().name, details=exc.details())
            kind = _ERROR_KINDS.get(exc.code(), events_pb2.ERROR_KIND_INTERNAL)
            await fail(kind, f"runtime: {exc.code().name}: {exc.details()}", exc.code() in _RETRYABLE)
        except asyncio.CancelledError:
            message = "gateway shut down during the turn"
            with contextlib.suppress(EventLogLost):  # one try: the gateway is on its way out
                await asyncio.shield(fail(events_pb2.ERROR_KIND_UNAVAILABLE, message, True, patience_s=0))
            raise
        except EventLogLost as exc:
            stream.cancel()
            log.error("turn stopped: the event log stayed unavailable", error=str(exc))
            if not ended:
                self._finish_later(request, str(exc))
        except NotFound as exc:  # DeleteSession: the log refuses a deleted session's events, nobody is left to tell
            stream.cancel()
            log.info("turn stopped: its session was deleted", error=exc.message)
        except Exception:  # noqa: BLE001 - a bug must still end the turn, not leave its watchers waiting
            log.exception("turn failed in the gateway")
            stream.cancel()
            with contextlib.suppress(EventLogLost):
                await fail(events_pb2.ERROR_KIND_INTERNAL, "the gateway failed while driving the turn", True)
        finally:
            keeper.cancel()
            if not released:  # never leave the session locked until the lease expires
                self.release_soon(request)  # type: ignore[arg-type]

    def _finish_later(self, request: TurnRequest, cause: str) -> None:
        """End a turn the event log was away for: once it is back, free the lease, then log the error."""
        outage_s = self.settings.event_log_outage_s

        async def finish() -> None:
            await self.release_soon(request)  # type: ignore[arg-type]
            message = (
                f"event log (Redis) unavailable for more than {outage_s:g}s, so the turn was stopped: {cause}; "
                "send the message again"
            )
            error = error_event(request.turn_id, events_pb2.ERROR_KIND_UNAVAILABLE, message, True)
            try:
                await self.append(request.session_id, [error], patience_s=self.lease_ttl_s)
            except NotFound:
                pass  # the session was deleted meanwhile: nothing to end
            except EventLogLost:  # its mark lapses and any replica's reaper ends it
                log.error("could not log the end of a turn stopped by an event log outage")

        task = asyncio.create_task(finish())
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    # ------------------------------------------------------------------ paused turns

    async def resume(
        self,
        tenant_id: str,
        session_id: str,
        checkpoint: sessions_pb2.Checkpoint,
        deadline_s: float | None = None,
        abandon: bool = False,
    ) -> tuple[str, int]:
        """Resume (or give up) the turn paused at `checkpoint`; returns (turn_id, seq before its next event).

        The runtime's first answer is awaited here, so a resume that cannot start (runtime
        down, checkpoint already taken) fails this call and the turn stays paused.
        """
        turn_id, interrupt_id = checkpoint.turn_id, checkpoint.interrupt_id
        holder = f"{turn_id}{RESUME_MARK}{uuid.uuid4().hex[:12]}"
        acquire = sessions_pb2.AcquireTurnLeaseRequest(
            tenant_id=tenant_id, session_id=session_id, turn_id=holder, ttl_seconds=int(self.lease_ttl_s)
        )
        try:
            lease = await self.clients.sessions.AcquireTurnLease(acquire)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise from_dependency(exc, "sessions") from exc
            current = await self._lease_holder(tenant_id, session_id)
            if current.startswith(f"{turn_id}{RESUME_MARK}"):
                if abandon:
                    raise Following(turn_id) from exc
                # Another answer (on any replica) is resuming this very turn: follow it.
                return turn_id, await self.events.last_seq(session_id)
            if current != turn_id:
                raise from_dependency(exc, "sessions") from exc
            # The turn is still handing its lease back after pausing: wait for it, briefly.
            acquire.strategy = sessions_pb2.MULTITASK_STRATEGY_ENQUEUE
            lease = await call(
                "sessions", lambda r: self.clients.sessions.AcquireTurnLease(r, timeout=HANDOVER_S), acquire
            )
        request = runtime_pb2.ResumeTurnRequest(
            tenant_id=tenant_id,
            session_id=session_id,
            turn_id=turn_id,
            interrupt_id=interrupt_id,
            lease_token=lease.lease_token,
        )
        if abandon:
            request.abandon = True
        try:
            start_seq = await self.events.last_seq(session_id)
        except BaseException:
            self.release_soon(request)  # type: ignore[arg-type]
            raise
        stream = self.clients.runtime.ResumeTurn(request, timeout=self._timeout(deadline_s))
        try:
            first = await stream.read()
        except grpc.aio.AioRpcError as exc:
            await self.release_now(request)  # type: ignore[arg-type]
            raise from_dependency(exc, "runtime") from exc
        except BaseException:
            stream.cancel()
            await self.release_now(request)  # type: ignore[arg-type]
            raise
        # None: grpc could not decode it; the pump reads on and ends the turn with an error.
        events = [] if first is grpc.aio.EOF or first is None else list(first.events)
        opened = self.open_turn(tenant_id, session_id, turn_id)
        task = asyncio.create_task(self._pump(request, stream, events, opened))
        self._track(session_id, turn_id, task)
        log.info("turn resumed", session_id=session_id, turn_id=turn_id, interrupt_id=interrupt_id, abandon=abandon)
        return turn_id, start_seq

    async def _lease_holder(self, tenant_id: str, session_id: str) -> str:
        reply = await call(
            "sessions",
            self.clients.sessions.GetTurnLease,
            sessions_pb2.GetTurnLeaseRequest(tenant_id=tenant_id, session_id=session_id),
        )
        return str(reply.lease.turn_id)

    async def paused(self, tenant_id: str, session_id: str, turn_id: str = "") -> sessions_pb2.Checkpoint | None:
        """The checkpoint a paused turn of the session (the given one, or any) waits on."""
        reply = await call(
            "sessions",
            self.clients.sessions.ListCheckpoints,
            sessions_pb2.ListCheckpointsRequest(tenant_id=tenant_id, session_id=session_id),
        )
        for checkpoint in reply.checkpoints:
            if not turn_id or checkpoint.turn_id == turn_id:
                return checkpoint  # type: ignore[no-any-return]
        return None

    async def cancel(self, session_id: str, turn_id: str, tenant_id: str = "") -> str:
        """Signal the running turn (here or, through the relay, on another replica), else give up a paused one."""
        caller = auth.current.get(None)
        tenant_id = tenant_id or (caller.tenant_id if caller else "")
        if not self.running_turn(session_id) and self.relay is not None and tenant_id:
            running = turn_of_lease(await self._lease_holder(tenant_id, session_id))
            wanted = running and (not turn_id or turn_id == running)
            if wanted and await self.relay.publish(session_id, running):
                return running
        else:
            found = await self.cancel_local(session_id, turn_id)
            if found:
                return found
        if not tenant_id:
            return ""
        checkpoint = await self.paused(tenant_id, session_id, turn_id)
        if checkpoint is None:
            return ""
        try:
            abandoned, _ = await self.resume(tenant_id, session_id, checkpoint, abandon=True)
        except Following:
            return ""  # an answer is resuming it right now: it is not paused any more
        except CogmeshError as exc:
            if exc.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
                return ""  # answered and resumed meanwhile, or another cancel got there first
            raise
        return abandoned

    async def cancel_local(self, session_id: str, turn_id: str) -> str:
        return await super().cancel_local(session_id, turn_of_lease(turn_id))


def paused_error(session_id: str, checkpoint: sessions_pb2.Checkpoint) -> FailedPrecondition:
    return FailedPrecondition(
        f"session {session_id!r} has a paused turn ({checkpoint.turn_id}) waiting for interrupt "
        f"{checkpoint.interrupt_id!r}: answer it or cancel the turn first",
        reason=errors_pb2.ERROR_REASON_TURN_IN_PROGRESS,
        metadata={"turn_id": checkpoint.turn_id, "interrupt_id": checkpoint.interrupt_id},
    )
