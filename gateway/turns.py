"""Starting, resuming and cancelling turns. The gateway takes the session's lease and logs the
turn's acceptance; a runtime replica runs the turn and logs the rest, so the turn does not
depend on this gateway: its events reach the session's event log whoever watches it.

Start: one call to sessions takes the lease and, in the same write, logs the `accepted`
event with the turn's request in its journal, so an accepted turn is never lost: when no
runtime takes it (every replica away) its lease lapses and whichever runtime replica comes
back takes it over. Then any runtime replica gets the turn (StartTurn) in the background,
the caller waiting only to hear whether every replica refused it as too busy (admission
control: RESOURCE_EXHAUSTED with RetryInfo; an ENQUEUE turn waits for room instead), then
reading the log. A runtime that refuses the turn (a request error, a paused session) gets
its answer logged as the turn's end.

A paused turn (an approval, the user's input, a client tool's result) waits for its answer.
`resume` answers it in one call to sessions (AnswerPause: the answer recorded, the first one
winning, and the lease taken as a resume of the turn with an attempt id of its own, so a second
replica resuming the same turn at the same moment is refused and follows the first instead of
getting the same fencing token), then asks any runtime replica to go on (ContinueTurn) with what
that call returned; a resume that cannot start fails the call and the turn stays paused, its
answer recorded. `abandon` gives a paused turn up (a cancellation).

Cancel reaches the runtime running the turn directly (its address is on the lease), and
asks sessions to stop it too, which its runtime learns at its next lease renewal when the
direct call did not get through. A session with a paused turn refuses a new one: the lease
answer carries its pending interrupts, so the common path costs one call to sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import struct_pb2
from google.protobuf.timestamp_pb2 import Timestamp
from google.rpc import error_details_pb2

from cogmesh.common.v1 import errors_pb2, events_pb2, messages_pb2, turns_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway import answers, auth, contract
from gateway.settings import GatewaySettings
from services.kit import addresses
from services.kit.clients import Clients
from services.kit.dependencies import RuntimeClient, SessionsClient
from services.kit.errors import CogmeshError, DependencyError, FailedPrecondition, RateLimited
from services.kit.logging import bind_request, log
from services.kit.protos import error_event
from services.lib import journal_kinds, turn_options
from services.lib.event_log import ends_stream as ends_stream  # re-exported for the servicers
from services.lib.event_log import is_paused as is_paused

_ERROR_KINDS = {
    grpc.StatusCode.UNAVAILABLE: events_pb2.ERROR_KIND_UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: events_pb2.ERROR_KIND_DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED: events_pb2.ERROR_KIND_CANCELLED,
    grpc.StatusCode.INVALID_ARGUMENT: events_pb2.ERROR_KIND_INVALID_REQUEST,
    grpc.StatusCode.NOT_FOUND: events_pb2.ERROR_KIND_INVALID_REQUEST,
    grpc.StatusCode.FAILED_PRECONDITION: events_pb2.ERROR_KIND_INVALID_REQUEST,
    grpc.StatusCode.RESOURCE_EXHAUSTED: events_pb2.ERROR_KIND_RATE_LIMITED,
}
# How often a ROLLBACK turn looks whether it is queued for the lease yet (then it stops the running turn).
_QUEUED_POLL_S = 0.02
# Answers after which the runtime may have the turn after all: it is left to a takeover, not ended.
_UNDECIDED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED})


@dataclass(frozen=True)
class Busy:
    """A runtime replica refused a new turn (admission control: it cannot keep its leases in time now)."""

    holder: str  # the replica's address, as it names itself
    retry_after_s: float
    details: str


def busy(exc: DependencyError) -> Busy | None:
    """The refusal of StartTurn by a busy replica (RESOURCE_EXHAUSTED naming its admission cause), else None:
    any other RESOURCE_EXHAUSTED (a message too large, say) would be refused by every replica alike."""
    if exc.status_code != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    info = exc.error_info
    if info is None or not info.metadata.get("admission"):
        return None
    retries = exc.details_of(error_details_pb2.RetryInfo)
    delay = retries[-1].retry_delay.ToNanoseconds() / 1e9 if retries else 0.0
    return Busy(info.metadata.get("holder", ""), delay, exc.status_message)


class Following(Exception):
    """Another caller is resuming the turn at this moment."""


@dataclass(frozen=True)
class TurnOptions:
    """What SendMessage may set for one turn, passed on to RunTurnRequest."""

    runtime: str = ""
    output_schema: struct_pb2.Struct | None = None
    limits: turns_pb2.TurnLimits | None = None
    cost_budget: turns_pb2.CostBudget | None = None
    client_tools: Sequence[messages_pb2.ToolSpec] = field(default_factory=tuple)

    def apply(self, request: runtime_pb2.RunTurnRequest) -> None:
        request.runtime = self.runtime
        if self.output_schema is not None:
            request.output_schema.CopyFrom(self.output_schema)
        if self.limits is not None:
            request.limits.CopyFrom(contract.internal(self.limits, runtime_pb2.TurnLimits))
        if self.cost_budget is not None:
            request.cost_budget.CopyFrom(contract.internal(self.cost_budget, runtime_pb2.CostBudget))
        request.client_tools.extend(self.client_tools)


class Turns:
    def __init__(self, settings: GatewaySettings, clients: Clients) -> None:
        self.settings, self.clients = settings, clients
        self.sessions, self.runtime = SessionsClient.of(clients), RuntimeClient.of(clients)
        self.lease_ttl_s = settings.turn_lease_ttl_s
        self._holders: dict[str, tuple[str, str]] = {}  # session -> (turn, runtime address), as StartTurn said
        self._background: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ new turns

    async def start(
        self,
        tenant_id: str,
        session_id: str,
        content: str,
        model: str,
        deadline_s: float | None = None,
        strategy: sessions_pb2.MultitaskStrategy = sessions_pb2.MULTITASK_STRATEGY_REJECT,
        options: TurnOptions | None = None,
        turn_id: str = "",
    ) -> tuple[str, int]:
        """Take the lease, log the turn's acceptance, hand it to a runtime; returns (turn_id, seq before it).

        `turn_id` is new unless the caller derives one (a schedule's run, so a replica taking the
        run over recognises the turn in the log)."""
        turn_id = turn_id or uuid.uuid4().hex
        request = runtime_pb2.RunTurnRequest(
            tenant_id=tenant_id, session_id=session_id, turn_id=turn_id, content=content, model=model
        )
        timeout_s = self._timeout(deadline_s)
        request.deadline.FromNanoseconds(int((time.time() + timeout_s) * 1e9))
        if options is not None:
            options.apply(request)
        if strategy == sessions_pb2.MULTITASK_STRATEGY_INTERRUPT:
            # The lease's interrupt reaches the running turn at its next renewal; this reaches it now.
            with contextlib.suppress(CogmeshError):
                await self.cancel(session_id, "", tenant_id, abandon_paused=False)
        accepted = events_pb2.RuntimeEvent(
            turn_id=turn_id,
            status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_QUEUED, text="accepted", content=content),
        )
        wait_s = deadline_s or self.settings.turn_timeout_s
        acquire = sessions_pb2.AcquireTurnLeaseRequest(
            tenant_id=tenant_id,
            session_id=session_id,
            turn_id=turn_id,
            # Twice the TTL until the runtime's first renewal or write names it the holder: a runtime too
            # busy to get there within one TTL would see its new turn claimed by another replica, which
            # cannot know to ask it, and the turn run twice (issue 32 item 6). Its first renewal sets
            # the usual TTL; a runtime that dies first costs its turn one TTL more.
            ttl_seconds=2 * int(self.lease_ttl_s),
            strategy=strategy,
            events=[accepted],
            entries=[journal_kinds.entry(journal_kinds.REQUEST, request.SerializeToString())],
            start_messages=turn_options.HISTORY_MESSAGES,  # the runtime starts from what the grant read
        )
        if strategy == sessions_pb2.MULTITASK_STRATEGY_ROLLBACK:
            lease = await self._roll_back(acquire, wait_s)
        else:
            lease = await self.sessions.AcquireTurnLease(
                acquire, timeout=None if strategy == sessions_pb2.MULTITASK_STRATEGY_REJECT else wait_s
            )
        request.lease_token = lease.lease_token
        if lease.pending_interrupt_ids and not lease.last_seq:
            # Nothing was logged: a paused turn waits. Unless it was answered meanwhile, refuse.
            await self._refuse_if_paused(tenant_id, session_id, lease.lease_token)
            await self._append("accepted", request, acquire.events, acquire.entries)
        start = lease.start if lease.HasField("start") else None
        queue = strategy == sessions_pb2.MULTITASK_STRATEGY_ENQUEUE
        expires = lease.expire_time if lease.HasField("expire_time") else None
        handing = self._spawn(self._hand_to_runtime(request, timeout_s, start, queue, expires))
        if not queue:
            await self._unless_refused(handing)
        return turn_id, int(lease.start_seq)

    async def _roll_back(
        self, acquire: sessions_pb2.AcquireTurnLeaseRequest, wait_s: float
    ) -> sessions_pb2.AcquireTurnLeaseResponse:
        """Take the lease as a ROLLBACK turn: the running turn is stopped and sessions drops it as it grants the lease.

        Sessions drops the turn this one interrupts: the one holding the lease when this one queued. So the
        running turn is stopped directly only once this turn is in the queue (stopped before, it would have
        released the lease already and nothing would be dropped); until then the lease's interrupt, which
        reaches it at its next renewal, is what stops it."""
        acquiring = asyncio.ensure_future(self.sessions.AcquireTurnLease(acquire, timeout=wait_s))
        try:
            while not acquiring.done():
                state = await self.sessions.GetTurnLease(
                    sessions_pb2.GetTurnLeaseRequest(tenant_id=acquire.tenant_id, session_id=acquire.session_id)
                )
                if acquire.turn_id in state.queued_turn_ids:
                    running = state.lease.turn_id  # named: an empty one would be whichever turn runs then (ours)
                    with contextlib.suppress(CogmeshError):
                        if running:
                            await self.cancel(acquire.session_id, running, acquire.tenant_id, False)
                    break
                await asyncio.wait({acquiring}, timeout=_QUEUED_POLL_S)
            return await acquiring
        finally:
            acquiring.cancel()  # this call went away before the grant: so does its place in the queue

    async def _append(
        self,
        purpose: str,
        request: runtime_pb2.RunTurnRequest,
        events: Sequence[events_pb2.RuntimeEvent],
        entries: Sequence[sessions_pb2.JournalEntry] = (),
        release: bool = False,
    ) -> None:
        append = sessions_pb2.AppendEventsRequest(
            tenant_id=request.tenant_id,
            session_id=request.session_id,
            turn_id=request.turn_id,
            lease_token=request.lease_token,
            events=events,
            entries=entries,
            # One id per purpose: sessions drops an append whose id it has seen (a resend), so two
            # appends of one turn with the same id would lose the second.
            append_id=f"{request.turn_id}:gateway:{purpose}",
            release_lease=release,
        )
        await self.sessions.AppendEvents(append)

    async def _refuse_if_paused(self, tenant_id: str, session_id: str, token: int) -> None:
        """A paused turn waits for its answer: give the lease back and say which interrupt it waits for."""
        checkpoint = await self.paused(tenant_id, session_id)
        if checkpoint is None:
            return  # answered in the meantime: the lease is ours to use
        release = sessions_pb2.ReleaseTurnLeaseRequest(tenant_id=tenant_id, session_id=session_id, lease_token=token)
        await asyncio.shield(self.sessions.ReleaseTurnLease(release))
        raise paused_error(session_id, checkpoint)

    def _timeout(self, deadline_s: float | None) -> float:
        # The caller's deadline bounds the turn too (it reaches the runtime as the RPC deadline).
        return min(self.settings.turn_timeout_s, deadline_s) if deadline_s else self.settings.turn_timeout_s

    async def _hand_to_runtime(
        self,
        request: runtime_pb2.RunTurnRequest,
        timeout_s: float,
        start: sessions_pb2.TurnStart | None = None,
        queue: bool = False,
        lease_expires: Timestamp | None = None,
    ) -> None:
        """StartTurn on any runtime replica, with the session as the grant read it; a refusal ends the turn.

        A replica too busy to keep its leases in time refuses new turns (RESOURCE_EXHAUSTED with RetryInfo):
        the others are tried, each once. When every one refuses, the turn ends as retryable and its caller
        is told RESOURCE_EXHAUSTED (RateLimited is raised); or, `queue` (ENQUEUE), it waits, keeping its
        lease, and tries again within its deadline."""
        bind_request(session_id=request.session_id, turn_id=request.turn_id, tenant=request.tenant_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        said_waiting = False
        while True:
            try:
                reply, refusals = await self._start_anywhere(
                    runtime_pb2.StartTurnRequest(turn=request, start=start, lease_expire_time=lease_expires),
                    max(deadline - loop.time(), 0.0),
                )
            except DependencyError as exc:
                await self._not_started(request, exc)
                return
            if reply is not None:
                self._holders[request.session_id] = (request.turn_id, reply.holder)
                return
            retry_s = min(r.retry_after_s for r in refusals) or self.settings.turn_lease_renew_s
            if not queue or loop.time() + retry_s >= deadline:
                why = "every runtime replica is too busy to take a new turn now"
                if queue:
                    why = "every runtime replica stayed too busy to take the turn until its deadline"
                await self._end_busy(request, f"{why} ({refusals[0].details}); try again in {retry_s:g}s")
                raise RateLimited(
                    f"{why}: try again in {retry_s:g}s",
                    retry_s,
                    metadata={"turn_id": request.turn_id, "refused_by": str(len(refusals))},
                )
            if not said_waiting:
                said_waiting = True
                text = f"every runtime replica is busy; the turn waits for one (next try in {retry_s:g}s)"
                notice = events_pb2.NativeNotice(kind="waiting_for_runtime", text=text)
                with contextlib.suppress(CogmeshError):
                    await self._append(
                        "busy", request, [events_pb2.RuntimeEvent(turn_id=request.turn_id, native_notice=notice)]
                    )
            if not await self._hold_lease(request, retry_s * (0.5 + random.random() / 2)):
                return

    async def _start_anywhere(
        self, turn: runtime_pb2.StartTurnRequest, timeout_s: float
    ) -> tuple[runtime_pb2.StartTurnResponse | None, list[Busy]]:
        """StartTurn on the balanced channel; on a busy replica's refusal, on each other replica the address
        names, once: (the reply, or None when every replica refused; the refusals). Any other failure raises."""
        refusals: list[Busy] = []
        try:
            return await self.runtime.StartTurn(turn, timeout=timeout_s), refusals
        except DependencyError as exc:
            refused = busy(exc)
            if refused is None:
                raise
            refusals.append(refused)
        replicas = await addresses.resolve(self.settings.runtime_addr)
        others = [address for address in replicas if address != refused.holder][: len(replicas) - 1]
        for address in others:
            replica = RuntimeClient.at(self.clients, address)
            try:
                return await replica.StartTurn(turn, timeout=timeout_s, wait_for_ready=False), refusals
            except DependencyError as exc:
                refused = busy(exc)
                if refused is None:
                    raise
                refusals.append(refused)
        return None, refusals

    async def _not_started(self, request: runtime_pb2.RunTurnRequest, exc: DependencyError) -> None:
        """StartTurn failed: undecided (left to a takeover, the caller told it waits), or the turn's end."""
        code = exc.status_code
        if code in _UNDECIDED:
            # The turn is accepted and journaled: a runtime replica takes it over once its lease lapses
            # (the runtime may even have it: a second StartTurn could run it twice under one token).
            log.warning("no runtime took the turn now; it will be taken over", code=code.name)
            text = (
                f"no runtime answered ({code.name}: {exc.status_message}); the turn runs as soon as a runtime "
                f"replica takes it over, within about {self.lease_ttl_s:g}s of one being up"
            )
            notice = events_pb2.NativeNotice(kind="waiting_for_runtime", text=text)
            with contextlib.suppress(CogmeshError):  # taken over meanwhile: nothing to say
                await self._append(
                    "waiting", request, [events_pb2.RuntimeEvent(turn_id=request.turn_id, native_notice=notice)]
                )
            return
        kind = _ERROR_KINDS.get(code, events_pb2.ERROR_KIND_INTERNAL)
        end = error_event(request.turn_id, kind, f"runtime: {code.name}: {exc.status_message}", False)
        try:
            await self._append("refused", request, [end], release=True)
        except CogmeshError as failure:  # the lease lapses; a takeover meets the same refusal and logs it
            log.warning("could not log a refused turn's end", error=failure.message)

    async def _end_busy(self, request: runtime_pb2.RunTurnRequest, message: str) -> None:
        """Every replica refused the turn: its end (retryable) is logged as a refused turn's is, the lease freed."""
        log.warning("every runtime replica refused the turn: busy", why=message)
        end = error_event(request.turn_id, events_pb2.ERROR_KIND_RATE_LIMITED, message, True)
        try:
            await self._append("refused", request, [end], release=True)
        except CogmeshError as failure:  # the lease lapses; a takeover runs the turn once a replica has room
            log.warning("could not log a refused turn's end", error=failure.message)

    async def _hold_lease(self, request: runtime_pb2.RunTurnRequest, wait_s: float) -> bool:
        """Keep the turn's lease for `wait_s` while it waits for a runtime replica with room. False when the
        turn is no longer this gateway's to start: cancelled meanwhile (its end logged here), or claimed."""
        renew = sessions_pb2.RenewTurnLeasesRequest(
            leases=[
                sessions_pb2.RenewTurnLeaseRequest(
                    tenant_id=request.tenant_id,
                    session_id=request.session_id,
                    lease_token=request.lease_token,
                    ttl_seconds=int(self.lease_ttl_s),
                )
            ]
        )
        loop = asyncio.get_running_loop()
        until = loop.time() + wait_s
        while True:
            try:
                reply = await self.sessions.RenewTurnLeases(renew, timeout=self.settings.call_timeout_s)
            except DependencyError as exc:  # the lease outlives a missed renewal; if not, a runtime claims it
                log.warning("could not renew a waiting turn's lease", code=exc.status_code.name)
            else:
                outcome = reply.leases[0] if reply.leases else None
                if outcome is None or not outcome.held:
                    log.info("a waiting turn was claimed by a runtime replica: it runs there")
                    return False
                if outcome.interrupt_requested_by:
                    cancelled = events_pb2.TurnError(
                        kind=events_pb2.ERROR_KIND_CANCELLED, message="turn cancelled on request"
                    )
                    with contextlib.suppress(CogmeshError):
                        await self._append(
                            "cancelled",
                            request,
                            [events_pb2.RuntimeEvent(turn_id=request.turn_id, error=cancelled)],
                            release=True,
                        )
                    return False
            left = until - loop.time()
            if left <= 0:
                return True
            await asyncio.sleep(min(left, self.settings.turn_lease_renew_s))

    async def _unless_refused(self, handing: asyncio.Task[None]) -> None:
        """Wait for the hand-off (at most `call_timeout_s`): a turn every runtime replica refused is answered
        RESOURCE_EXHAUSTED with RetryInfo. A slower hand-off goes on in the background (its end is logged)."""
        done, _ = await asyncio.wait({handing}, timeout=self.settings.call_timeout_s)
        if handing in done and not handing.cancelled() and isinstance(handing.exception(), RateLimited):
            raise handing.exception()  # type: ignore[misc]

    def _spawn(self, work: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        # A refusal nobody waited for any more is in the log already.
        task.add_done_callback(lambda done: done.cancelled() or done.exception())
        return task

    # ------------------------------------------------------------------ paused turns

    async def resume(
        self,
        tenant_id: str,
        session_id: str,
        interrupt_id: str,
        decision: sessions_pb2.CheckpointDecision | None = None,
        deadline_s: float | None = None,
        abandon: bool = False,
        given: str = "",
    ) -> tuple[str, int]:
        """Answer the turn paused at `interrupt_id` and resume it (or give it up: `abandon`); returns
        (turn_id, seq before its next event). `decision` None resumes with the answer recorded; `given`
        names the caller's field that carried it (a refusal names it).

        One call to sessions (AnswerPause) records the answer and takes the lease to resume the turn, and
        one to a runtime replica (ContinueTurn) carries what it returned, so the runtime reads nothing more
        before going on. When another attempt is resuming this very turn (the same answer from elsewhere),
        this one follows it, or, abandoning, raises Following.
        """
        answer = sessions_pb2.AnswerPauseRequest(
            tenant_id=tenant_id,
            session_id=session_id,
            interrupt_id=interrupt_id,
            decision=decision,
            abandon=abandon,
            resume=sessions_pb2.LeaseResume(attempt_id=uuid.uuid4().hex[:12]),
            ttl_seconds=int(self.lease_ttl_s),
        )
        try:
            paused = await self.sessions.AnswerPause(answer)
        except DependencyError as exc:
            followed = answers.resuming(exc)
            if followed and not abandon:
                # Another answer (on any replica) is resuming this very turn: follow it.
                return followed, await self._last_seq(tenant_id, session_id)
            if followed:
                raise Following(followed) from exc
            refused = answers.refusal(exc, session_id, interrupt_id, given)
            if refused is None:
                raise
            raise refused from exc
        turn_id = paused.checkpoint.turn_id
        request = runtime_pb2.ResumeTurnRequest(
            tenant_id=tenant_id,
            session_id=session_id,
            turn_id=turn_id,
            interrupt_id=interrupt_id,
            lease_token=paused.lease_token,
            paused=paused,
        )
        if abandon:
            request.abandon = True
        timeout_s = self._timeout(deadline_s)
        request.deadline.FromNanoseconds(int((time.time() + timeout_s) * 1e9))
        try:
            reply = await self.runtime.ContinueTurn(runtime_pb2.ContinueTurnRequest(resume=request), timeout=timeout_s)
        except BaseException as exc:
            # Refused: the turn is still paused, and the lease goes back at once. Undecided (no answer,
            # the call cut): the runtime may have recorded the answer, which a takeover goes on with
            # once the lease lapses, so it is not given back under it.
            if isinstance(exc, DependencyError) and exc.status_code not in _UNDECIDED:
                release = sessions_pb2.ReleaseTurnLeaseRequest(
                    tenant_id=tenant_id, session_id=session_id, lease_token=paused.lease_token
                )
                with contextlib.suppress(DependencyError):  # else it lapses: the turn stays paused
                    await asyncio.shield(self.sessions.ReleaseTurnLease(release))
            raise
        self._holders[session_id] = (turn_id, reply.holder)
        log.info("turn resumed", session_id=session_id, turn_id=turn_id, interrupt_id=interrupt_id, abandon=abandon)
        return turn_id, int(paused.start_seq)

    async def _lease(self, tenant_id: str, session_id: str) -> sessions_pb2.TurnLease:
        reply = await self.sessions.GetTurnLease(
            sessions_pb2.GetTurnLeaseRequest(tenant_id=tenant_id, session_id=session_id)
        )
        return reply.lease

    async def _last_seq(self, tenant_id: str, session_id: str) -> int:
        reply = await self.sessions.GetEventLogState(
            sessions_pb2.GetEventLogStateRequest(tenant_id=tenant_id, session_id=session_id)
        )
        return int(reply.last_seq)

    async def paused(self, tenant_id: str, session_id: str, turn_id: str = "") -> sessions_pb2.Checkpoint | None:
        """The checkpoint a paused turn of the session (the given one, or any) waits on."""
        reply = await self.sessions.ListCheckpoints(
            sessions_pb2.ListCheckpointsRequest(tenant_id=tenant_id, session_id=session_id)
        )
        for checkpoint in reply.checkpoints:
            if not turn_id or checkpoint.turn_id == turn_id:
                return checkpoint
        return None

    # ------------------------------------------------------------------ cancel

    async def cancel(self, session_id: str, turn_id: str, tenant_id: str = "", abandon_paused: bool = True) -> str:
        """Stop the session's running turn (or the given one), else give up a paused one; the turn, or ""."""
        caller = auth.current.get(None)
        tenant_id = tenant_id or (caller.tenant_id if caller else "")
        if not tenant_id:
            return ""
        lease = await self._lease(tenant_id, session_id)
        running = lease.turn_id  # a resume's lease names the turn it resumes
        if running and (not turn_id or turn_id == running):
            if await self._cancel_at(session_id, running, lease.holder):
                return running
            interrupted = await self.sessions.InterruptTurn(
                sessions_pb2.InterruptTurnRequest(
                    tenant_id=tenant_id, session_id=session_id, turn_id=running, requested_by="cancel"
                )
            )
            return str(interrupted.turn_id)
        if not abandon_paused:
            return ""
        checkpoint = await self.paused(tenant_id, session_id, turn_id)
        if checkpoint is None:
            return ""
        try:
            abandoned, _ = await self.resume(tenant_id, session_id, checkpoint.interrupt_id, abandon=True)
        except Following:
            return ""  # an answer is resuming it right now: it is not paused any more
        except CogmeshError as exc:
            if exc.code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION):
                return ""  # answered and resumed meanwhile, or another cancel got there first
            raise
        return abandoned

    async def _cancel_at(self, session_id: str, turn_id: str, holder: str) -> bool:
        """Ask the runtime replica running the turn to stop it now; False when that cannot be done."""
        known = self._holders.get(session_id)
        address = holder or (known[1] if known and known[0] == turn_id else "")
        if not address:
            return False
        try:
            reply = await RuntimeClient.at(self.clients, address).CancelTurn(
                runtime_pb2.CancelTurnRequest(session_id=session_id, turn_id=turn_id),
                timeout=self.settings.call_timeout_s,
            )
        except DependencyError as exc:
            log.warning("could not reach the runtime running the turn", holder=address, code=exc.status_code.name)
            return False
        return bool(reply.cancelled)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)


def paused_error(session_id: str, checkpoint: sessions_pb2.Checkpoint) -> FailedPrecondition:
    return FailedPrecondition(
        f"session {session_id!r} has a paused turn ({checkpoint.turn_id}) waiting for interrupt "
        f"{checkpoint.interrupt_id!r}: answer it or cancel the turn first",
        reason=errors_pb2.ERROR_REASON_TURN_IN_PROGRESS,
        metadata={"turn_id": checkpoint.turn_id, "interrupt_id": checkpoint.interrupt_id},
    )
