"""The turns this replica runs, each in a task of its own that outlives the RPC that started it.

A turn comes three ways: started (StartTurn), resumed with the answer it
waited for (ContinueTurn), or taken over from another replica that
stopped while running it (ClaimOrphanedTurns). Whichever way, it runs the same:
its events and the journal of its steps go to the session's event log through
its `TurnLog`, and its end (or pause) is appended together with its messages and
the release of its lease, so nothing about the turn lives only here.

While turns run, this replica renews their leases in one call every few seconds
(learning which were asked to stop, and which were lost to a takeover), and looks
for orphaned turns to take over. It measures how late those renewals and its event
loop run, and refuses new turns while they run too late (services/runtime/admission.py):
a renewal that is due goes before any new turn. On shutdown it hands its turns over: each gets a
moment to reach its next recorded step, then stops, and its lease is expired at
once so another replica goes on with it from there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from cogmesh.common.v1 import events_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit import tasks
from services.kit.clients import Clients, call
from services.kit.dependencies import RuntimeClient, SessionsClient
from services.kit.errors import CogmeshError, DependencyError, FailedPrecondition, InvalidArgument, RateLimited
from services.kit.logging import bind_request, log
from services.kit.metrics import TurnMeter
from services.kit.protos import dict_to_struct, error_event, struct_to_dict
from services.lib import lease_holders
from services.lib.answers import decided, same
from services.lib.llm import ChatMessage
from services.runtime.admission import Admission
from services.runtime.append_channel import AppendChannel
from services.runtime.assembly import BlockedTurn, CommandTurn, NewTurn, TurnBuilder
from services.runtime.context_link import Memory, SessionMemory
from services.runtime.engines import Engine
from services.runtime.journal import ANSWER, TAKEOVER, replay
from services.runtime.policy_link import message_to_proto
from services.runtime.settings import RuntimeSettings
from services.runtime.steps.state import decode_snapshot
from services.runtime.structured import OutputSpec
from services.runtime.turn import Decision, ResumePoint, Turn
from services.runtime.turn_log import HandedOver, TurnLog, TurnLost, fit_end_event
from services.runtime.turn_store import TurnStore, decision_from


@dataclass
class Running:
    """A turn this replica runs (or is still building)."""

    tenant_id: str
    session_id: str
    turn_id: str
    lease_token: int
    log: TurnLog
    turn: Turn | None = None
    task: asyncio.Task[Any] | None = None
    interrupted: bool = False
    checking: bool = False  # a renewal found the lease claimed: waiting for the claimer to hand it back

    def adopt(self, lease_token: int) -> None:
        """The turn's lease under a new token (a claim of its lapsed lease, by this replica or another)."""
        self.lease_token = lease_token
        self.log.adopt(lease_token)
        if self.turn is not None and self.turn.compactor is not None:
            self.turn.compactor.lease_token = lease_token

    def cancel(self) -> bool:
        """A cancellation: the turn ends with its cancelled error (logged), or, still building, without one."""
        if self.turn is not None:
            return self.turn.request_cancel()
        if self.task is not None and not self.task.done():
            self.task.cancel()
            return True
        return False


def cancelled_event(turn_id: str) -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(
        turn_id=turn_id,
        error=events_pb2.TurnError(kind=events_pb2.ERROR_KIND_CANCELLED, message="turn cancelled on request"),
    )


def answer_json(
    decision: Decision | None, abandon: bool, deadline: float, interrupt_id: str = "", consumed: bool = False
) -> bytes:
    """The ANSWER entry; `consumed`: its append took the checkpoint too (a takeover has nothing to take)."""
    data: dict[str, Any] = {"abandon": abandon, "deadline": deadline, "decision": None, "interrupt_id": interrupt_id}
    if consumed:
        data["consumed"] = True
    if decision is not None:
        data["decision"] = vars(decision) | {"arguments": dict(decision.arguments) if decision.arguments else None}
    return json.dumps(data, sort_keys=True, default=str).encode()


def answer_from(data: dict[str, Any] | None) -> tuple[Decision | None, bool]:
    if data is None:
        return None, False
    decision = data.get("decision")
    return (Decision(**decision) if decision else None), bool(data.get("abandon"))


# What a failure while the turn is built or run means for its end, by the status it carries.
_ERROR_KINDS = {
    grpc.StatusCode.UNAVAILABLE: events_pb2.ERROR_KIND_UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: events_pb2.ERROR_KIND_DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED: events_pb2.ERROR_KIND_RATE_LIMITED,
}


def failure_event(turn_id: str, exc: CogmeshError) -> events_pb2.RuntimeEvent:
    """A failure (a dependency down, a request that cannot run) as the turn's end."""
    kind = _ERROR_KINDS.get(exc.code, events_pb2.ERROR_KIND_INVALID_REQUEST)
    return error_event(turn_id, kind, exc.message, exc.code in _ERROR_KINDS)


def expired_event(turn_id: str) -> events_pb2.RuntimeEvent:
    return error_event(turn_id, events_pb2.ERROR_KIND_DEADLINE_EXCEEDED, "the turn ran past its deadline", True)


# Events the loop follows at once with its step's durable record (a call's announcement, then the DECIDE
# step; a tool's result, then the TOOL step): the writer is not woken in between, so one append carries
# both (per tool call two appends and two round trips fewer; each record waited for its event's append).
RECORDED_NEXT = frozenset({"tool_call_started", "tool_call_finished"})
# A model streaming faster than the loop turns (its chunks already buffered) lets the loop turn at least this
# often: the turn's own appends and their replies need it (seen holding a first token 6 ms).
YIELD_S = 0.001
# Takeovers in all, steps recorded in between or not, after which a turn ends (times COGMESH_MAX_TAKEOVERS).
TAKEOVERS_IN_ALL = 10
PROBE_S = 0.25  # how often, while turns run, the event loop's lag is measured (a timer's drift)
CLAIMS_PER_LOOK = 10  # orphaned turns one look may claim
ADOPT_ASKS = 3  # AdoptTurn calls to a holder that answers UNAVAILABLE before it counts as gone
ADOPT_ASK_PAUSE_S = 0.5


def _never_connected(exc: DependencyError) -> bool:
    """The call failed to connect, so the holder never saw it (grpc's wording for a refused connection)."""
    text = exc.status_message.lower()
    return "failed to connect" in text or "connection refused" in text


class TurnRunner:
    def __init__(
        self, clients: Clients, settings: RuntimeSettings, builder: TurnBuilder, store: TurnStore, memory: SessionMemory
    ) -> None:
        self.clients, self.settings, self.builder, self.store, self.memory = clients, settings, builder, store, memory
        self.appends = AppendChannel(clients.sessions)  # every turn's log writes, on one stream
        self.address = ""  # host:port other replicas reach this one at; set once the server is bound
        self.accepting = True
        self._running: dict[tuple[str, str], Running] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._idle = asyncio.Event()  # set while no turn runs here
        self._idle.set()
        self._busy = asyncio.Event()  # set while turns run here: renewals and the lag probe run only then
        self._renew_now = asyncio.Event()  # a renewal is overdue: it goes before new work
        self.admission = Admission(
            settings.turn_lease_ttl_s, settings.turn_lease_renew_s, settings.runtime_max_turns, clock=time.monotonic
        )
        self.refused = 0  # new turns refused by admission control
        self.taken_over = 0  # turns this replica took over from another (redoing their last step)

    @property
    def sessions(self) -> SessionsClient:
        """The typed sessions client over whatever `clients` is now (tests swap it to hold renewals back)."""
        return SessionsClient.of(self.clients)

    def serving(self, address: str) -> None:
        """The server is bound: keep leases alive and look for orphaned turns from now on."""
        self.address = address
        self._loops = [
            asyncio.create_task(self._keep_leases()),
            asyncio.create_task(self._claim_orphans()),
            asyncio.create_task(self._probe_lag()),
        ]

    def admit(self) -> None:
        """Refuse a new turn (RESOURCE_EXHAUSTED with RetryInfo) while this replica cannot keep its leases in
        time; a renewal that is due is woken first, so it runs before the new turn's work."""
        if self.admission.renewal_overdue():
            self._renew_now.set()
        refusal = self.admission.refusal(len(self._running))
        if refusal is None:
            return
        self.refused += 1
        log.info("new turn refused", cause=refusal.cause, measured_s=round(refusal.measured_s, 3))
        raise RateLimited(
            refusal.message,
            refusal.retry_after_s,
            metadata={
                "admission": refusal.cause,
                "holder": self.address,
                "measured": f"{refusal.measured_s:g}",
                "limit": f"{refusal.limit_s:g}",
            },
        )

    # ------------------------------------------------------------------ the ways a turn comes

    def _log(self, tenant_id: str, session_id: str, turn_id: str, token: int, state: Any, how: str) -> TurnLog:
        return TurnLog(
            self.appends,
            tenant_id,
            session_id,
            turn_id,
            token,
            call_timeout_s=self.settings.call_timeout_s,
            flush_s=self.settings.delta_flush_ms / 1000,
            flush_max_s=self.settings.delta_flush_max_ms / 1000,
            outage_s=self.settings.event_log_outage_s,
            previous_state=state,
            meter=TurnMeter(how) if self.settings.metrics else None,
            record_steps=self.settings.journal_steps,
            # How long a write refused under a claimed lease waits for the claimer's AdoptTurn: its call, and
            # a claim that got no clear answer lapsing and the next claimer asking again. Waiting costs
            # nothing (nothing is written meanwhile); giving up early lets a live turn be taken over.
            adopt_grace_s=self.settings.call_timeout_s + 2 * self.settings.turn_lease_ttl_s,
            holder=self.address,  # a claimer of its lapsed lease asks this replica first
        )

    def deadline_of(self, request: runtime_pb2.RunTurnRequest | runtime_pb2.ResumeTurnRequest) -> float:
        """When the turn must be over: its caller's deadline, else the turn timeout from now."""
        if request.HasField("deadline"):
            return float(request.deadline.ToNanoseconds()) / 1e9
        return time.time() + self.settings.turn_timeout_s

    async def start(
        self,
        request: runtime_pb2.RunTurnRequest,
        output: OutputSpec | None,
        grant: sessions_pb2.TurnStart | None = None,
        lease_expires: float | None = None,
    ) -> Running | None:
        """Take the turn and build and run it in the background: the caller learns where it runs, and
        the turn's failures, even to build, are logged as its end. None: read after its lease ran out
        (`lease_expires`, epoch seconds), it found the turn claimed by another replica, which runs it."""
        bind_request(session_id=request.session_id, turn_id=request.turn_id, tenant=request.tenant_id)
        if (here := self._runs_already(request.session_id, request.turn_id, request.lease_token)) is not None:
            return here
        late = lease_expires is not None and time.time() >= lease_expires - self.settings.turn_lease_renew_s
        if late and await self._renew_one(request) is False:
            log.warning("a turn read after its lease ran out was taken over meanwhile: it runs where it was claimed")
            return None
        running = self._track("StartTurn", request.tenant_id, request.session_id, request.turn_id, request.lease_token)
        running.log.named = late  # the renewal just named this replica the holder
        self._spawn(running, self._build_and_run(running, request, output, grant))
        return running

    def _renewal(self, tenant_id: str, session_id: str, lease_token: int) -> sessions_pb2.RenewTurnLeaseRequest:
        """A renewal naming this replica: the lease TTL plus the grace that covers its lag (admission)."""
        ttl = int(self.settings.turn_lease_ttl_s) + self.admission.grace_s()
        return sessions_pb2.RenewTurnLeaseRequest(
            tenant_id=tenant_id, session_id=session_id, lease_token=lease_token, ttl_seconds=ttl, holder=self.address
        )

    async def _renew_one(self, request: runtime_pb2.RunTurnRequest) -> bool | None:
        """Renew one turn's lease now, naming this replica: whether it is still held (None: unclear)."""
        lease = self._renewal(request.tenant_id, request.session_id, request.lease_token)
        try:
            reply = await self.sessions.RenewTurnLeases(
                sessions_pb2.RenewTurnLeasesRequest(leases=[lease]), timeout=self.settings.call_timeout_s
            )
        except DependencyError:
            return None  # the renewal loop and the log's writes find out
        return bool(reply.leases and reply.leases[0].held)

    async def _build(
        self,
        running: Running,
        request: runtime_pb2.RunTurnRequest,
        output: OutputSpec | None,
        grant: sessions_pb2.TurnStart | None = None,
    ) -> NewTurn | CommandTurn | BlockedTurn | events_pb2.RuntimeEvent:
        """The turn, built within its deadline; or the end to log when it ended meanwhile."""
        deadline = self.deadline_of(request)
        try:
            async with asyncio.timeout(deadline - time.time()):
                start = await self.builder.new_turn(request, output, grant)
        except TimeoutError:  # its caller's deadline passed while the turn gathered what it needs
            return expired_event(request.turn_id)
        except asyncio.CancelledError:
            if not running.interrupted:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            return cancelled_event(request.turn_id)  # CancelTurn while it was built
        if isinstance(start, NewTurn):
            start.turn.deadline = deadline
        return start

    async def _build_and_run(
        self,
        running: Running,
        request: runtime_pb2.RunTurnRequest,
        output: OutputSpec | None,
        grant: sessions_pb2.TurnStart | None = None,
    ) -> None:
        start = await self._build(running, request, output, grant)  # failures end the turn in `_spawn`'s guard
        if isinstance(start, events_pb2.RuntimeEvent):
            await self._end_now(running, start)
        else:
            await self._run_new(running, start, request)

    async def resume(self, request: runtime_pb2.ResumeTurnRequest, decision: Any, abandon: bool) -> Running:
        """Go on with the paused turn in the background, with the answer recorded.

        A caller that answered through sessions' AnswerPause sends what it returned (`paused`: the decided
        checkpoint and the turn's journal), and the turn's first append takes the checkpoint: no call to
        sessions before it. A caller of the previous version sends the answer alone: it is recorded here
        (when given), the checkpoint and the journal are read, and the checkpoint is taken by a call of its own.
        """
        bind_request(session_id=request.session_id, turn_id=request.turn_id, tenant=request.tenant_id)
        paused = request.paused if request.HasField("paused") else None
        journal = None
        if paused is not None:
            checkpoint = paused.checkpoint
            if decision is not None and not (checkpoint.HasField("decision") and same(decision, checkpoint.decision)):
                raise FailedPrecondition(
                    f"interrupt {request.interrupt_id!r} was answered differently; the first answer wins",
                    metadata={"interrupt_id": request.interrupt_id},
                )
            journal = self._replay(request, paused.entries)
        else:
            checkpoint = await self.store.answered(request, decision)
        if checkpoint.turn_id != request.turn_id:
            raise InvalidArgument(
                [("interrupt_id", f"belongs to turn {checkpoint.turn_id!r}, not to turn {request.turn_id!r}")]
            )
        if not abandon and not checkpoint.HasField("decision"):
            raise FailedPrecondition(
                f"interrupt {request.interrupt_id!r} has no answer yet: send it in this request",
                metadata={"interrupt_id": request.interrupt_id},
            )
        state, journaled = await self._paused_state(request, checkpoint, journal)
        point = ResumePoint(state, decision_from(checkpoint), abandon)
        # The next state is recorded as a change from this one when the journal has it (not an older inline checkpoint).
        previous = state if journaled else None
        if (here := self._runs_already(request.session_id, request.turn_id, request.lease_token)) is not None:
            return here
        running = self._track(
            "ContinueTurn", request.tenant_id, request.session_id, request.turn_id, request.lease_token, previous
        )
        deadline = self.deadline_of(request)
        try:
            turn, engine = await self.builder.resumed_turn(request, state, point)
            turn.deadline = deadline
            # The answer first: from here a takeover goes on with it (and takes the checkpoint), so a
            # failure before the checkpoint is taken cannot leave a turn neither paused nor running.
            answer = answer_json(point.decision, abandon, deadline, request.interrupt_id, consumed=bool(paused))
            record = None if abandon else decided(checkpoint)
            if record is not None:  # the decision's audit event, in the answer's write: logged once, by one resume
                running.log.emit(events_pb2.RuntimeEvent(approval_decided=record))
            if paused is not None:
                # Its append takes the checkpoint too, fenced by the lease: one write makes this the turn's
                # one resume and records the answer a takeover goes on with.
                running.log.consume_with_next_append(request.interrupt_id)
                await running.log.record_raw(ANSWER, answer)
            else:
                await running.log.record_raw(ANSWER, answer)
                await self.store.consume(request, allow_undecided=abandon)  # now this is the one resume
        except asyncio.CancelledError:
            await self._forget(running)
            if running.interrupted:  # the checkpoint is left as it was: the turn is still paused
                why = "the resume was cancelled before the turn continued; it is still paused"
                raise FailedPrecondition(why) from None
            raise
        except BaseException:
            await self._forget(running)
            raise
        log.info("turn resumed", interrupt_id=request.interrupt_id, abandon=abandon)
        self._spawn(running, self._run_built(running, turn, engine))
        return running

    async def _paused_state(
        self, request: runtime_pb2.ResumeTurnRequest, checkpoint: sessions_pb2.Checkpoint, journal: Any = None
    ) -> tuple[dict[str, Any], bool]:
        """The state the turn paused in, and whether it came from its journal (an older checkpoint carries
        it inline). The journal is read unless the caller brought it."""
        try:
            if checkpoint.payload:
                return decode_snapshot(checkpoint.payload), False
            if journal is None:
                journal = await self._journal(request.tenant_id, request.session_id, request.turn_id)
            state: dict[str, Any] | None = journal.state
            if state is None or not state.get("waiting"):
                raise ValueError("its journal ends without a pause")
            return state, True
        except ValueError as exc:
            raise FailedPrecondition(
                f"the checkpoint of interrupt {request.interrupt_id!r} is unreadable: {exc}"
            ) from exc

    @staticmethod
    def _replay(request: runtime_pb2.ResumeTurnRequest, entries: Any) -> Any:
        """The journal the caller brought (AnswerPause read it with the lease), replayed."""
        try:
            return replay(entries)
        except (ValueError, DecodeError) as exc:
            raise FailedPrecondition(
                f"the journal of the turn paused at interrupt {request.interrupt_id!r} is unreadable: {exc}"
            ) from exc

    async def _journal(self, tenant_id: str, session_id: str, turn_id: str) -> Any:
        reply = await call(
            "sessions",
            self.clients.sessions.GetJournal,
            sessions_pb2.GetJournalRequest(tenant_id=tenant_id, session_id=session_id, turn_id=turn_id),
        )
        return replay(reply.entries)

    async def take_over(self, claimed: sessions_pb2.ClaimedTurn) -> None:
        """Go on with a turn whose runtime stopped, from the last step its journal recorded."""
        # The turn, also when a resume held the lease (typed; a sessions service of the previous
        # version names a resume's holder as text, which parse_holder reads).
        turn_id = lease_holders.parse_holder(claimed.turn_id).turn_id
        bind_request(session_id=claimed.session_id, turn_id=turn_id, tenant=claimed.tenant_id)
        wrote_last = claimed.previous_holder in ("", self.address)  # no other replica has written since
        if wrote_last and self.adopt(claimed.session_id, turn_id, claimed.lease_token):
            # Its lease lapsed while this very replica was too busy to renew it: go on under the new
            # token rather than redo the step (its next write, refused under the old one, is resent).
            log.warning("took over a turn this replica still runs: it goes on", takeovers=claimed.takeovers)
            return
        if not wrote_last:
            # A copy of the turn this replica still runs is stale: another replica wrote after it (and the
            # new token fences it). It stops, whoever goes on: that replica, or a takeover from the journal.
            if (stale := self._running.get((claimed.session_id, turn_id))) is not None:
                self._lost(stale, TurnLost("another replica ran the turn since", retryable=False))
            runs = await self._holder_runs(claimed, turn_id)
            if runs is not False:  # it goes on there; or unclear: the lease lapses and the next claim decides
                return
        if claimed.takeovers > TAKEOVERS_IN_ALL * max(self.settings.max_takeovers, 1):
            # Not even its journal is read: a runtime that dies reading it, or before recording its takeover
            # (which the limit at one step counts), would pass the turn from replica to replica for good.
            log.error("a turn taken over too often is ended", takeovers=claimed.takeovers)
            self._end_claimed(
                claimed, turn_id, f"the turn was taken over {claimed.takeovers} times; it is not tried again"
            )
            return
        try:
            journal = await self._journal(claimed.tenant_id, claimed.session_id, turn_id)
        except CogmeshError as exc:
            if exc.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                # Sessions away: its lease lapses again and the next look retries.
                log.warning("cannot read the journal of a turn to take over", error=exc.message)
                return
            self._end_unreadable(claimed, turn_id, exc)  # e.g. too large: every look would fail the same way
            return
        except (ValueError, DecodeError) as exc:
            self._end_unreadable(claimed, turn_id, exc)
            return
        running = self._track(
            "takeover", claimed.tenant_id, claimed.session_id, turn_id, claimed.lease_token, journal.state
        )
        self.taken_over += 1
        # Cancelled while nobody ran it (its runtime gone): it ends as cancelled, keeping what it had done.
        running.interrupted = bool(claimed.interrupt_requested_by)
        log.info("taking over a turn", takeovers=claimed.takeovers, from_seq=journal.seq, log_seq=claimed.last_seq)
        self._spawn(running, self._run_takeover(running, claimed, journal))

    def _runs_already(self, session_id: str, turn_id: str, lease_token: int) -> Running | None:
        """The copy of the turn this replica runs under this lease or a newer one, if any.

        A StartTurn (or ContinueTurn) read later than its lease lasted (a saturated replica) finds the turn
        already taken over here from that lapsed lease: it goes on as it is. A second copy under the older
        token would replace it among the running turns, and the next claim would hand the turn to the stale
        copy, which would stream the answer again from its start (seen at 1,000 turns at once)."""
        here = self._running.get((session_id, turn_id))
        if here is None or here.lease_token < lease_token or here.task is None or here.task.done():
            return None
        log.warning("asked to run a turn this replica already runs under a newer lease: it goes on as it is")
        return here

    def adopt(self, session_id: str, turn_id: str, lease_token: int) -> bool:
        """Go on under `lease_token` with a turn this replica still runs (another replica claimed its lapsed
        lease: its renewals were lost to a store outage or to load). False when it does not run it."""
        mine = self._running.get((session_id, turn_id))
        if mine is None or mine.task is None or mine.task.done() or mine.task.cancelling():
            return False  # not here, or ending (cancelled: it lost its lease, or is shutting down)
        if mine.log.failure is not None:
            return False
        if lease_token > mine.lease_token:
            mine.adopt(lease_token)
        return True

    async def _holder_runs(self, claimed: sessions_pb2.ClaimedTurn, turn_id: str) -> bool | None:
        """Ask the replica that held the lapsed lease whether it still runs the turn (it then goes on under
        the claim's token): True, False (it does not, or it is gone), or None when the answer is unclear
        (a timeout: it may have adopted the token, so taking the turn over now could let two write)."""
        holder = RuntimeClient.at(self.clients, claimed.previous_holder)
        request = runtime_pb2.AdoptTurnRequest(
            session_id=claimed.session_id, turn_id=turn_id, lease_token=claimed.lease_token
        )
        for attempt in range(1, ADOPT_ASKS + 1):
            try:  # no waiting for a connection: a holder that is gone refuses at once
                reply = await holder.AdoptTurn(request, timeout=self.settings.call_timeout_s, wait_for_ready=False)
                break
            except DependencyError as exc:
                if exc.status_code != grpc.StatusCode.UNAVAILABLE:
                    code = exc.status_code.name
                    log.warning("no clear answer from the turn's last runtime: its lease decides", code=code)
                    return None
                # UNAVAILABLE is also a call that reached a busy holder and lost its answer with the connection
                # (it may have adopted the token: taking over now would let two write under it). A holder that
                # is gone refuses the connection: said at once, or again when asked again (adopting is idempotent).
                if _never_connected(exc) or attempt == ADOPT_ASKS:
                    log.info("the turn's last runtime is gone: taking the turn over", holder=claimed.previous_holder)
                    return False
                await asyncio.sleep(ADOPT_ASK_PAUSE_S * attempt)
        if reply.adopted:
            log.warning(
                "claimed a turn its runtime still runs (its lease lapsed): it goes on there",
                holder=claimed.previous_holder,
                takeovers=claimed.takeovers,
            )
        return bool(reply.adopted)

    def _end_unreadable(self, claimed: sessions_pb2.ClaimedTurn, turn_id: str, exc: Exception) -> None:
        """Claimed again and again, the turn would never end (and its session stay busy): end it now."""
        log.error("the journal of a turn to take over is unreadable", error=str(exc))
        self._end_claimed(claimed, turn_id, f"the turn's journal is unreadable ({exc}); it cannot go on")

    def _end_claimed(self, claimed: sessions_pb2.ClaimedTurn, turn_id: str, why: str) -> None:
        """End a claimed turn with an error, without its journal."""
        running = self._track("takeover", claimed.tenant_id, claimed.session_id, turn_id, claimed.lease_token)
        end = error_event(turn_id, events_pb2.ERROR_KIND_INTERNAL, why, False)
        self._spawn(running, self._end_now(running, end))

    async def _run_takeover(self, running: Running, claimed: sessions_pb2.ClaimedTurn, journal: Any) -> None:
        turn_id, out = running.turn_id, running.log
        if claimed.last_seq > journal.seq:
            # Events after the last recorded step came from a step that is done again now.
            out.emit(
                events_pb2.RuntimeEvent(
                    turn_id=turn_id,
                    native_notice=events_pb2.NativeNotice(
                        kind="step_retried",
                        text="the runtime running this turn stopped; another one goes on from its last "
                        f"recorded step: events {journal.seq + 1}..{claimed.last_seq} are void",
                        metadata=dict_to_struct({"void_after_seq": journal.seq, "void_through_seq": claimed.last_seq}),
                    ),
                )
            )
        # A turn whose runtimes keep stopping at the same step (one that kills them) is not tried forever; one
        # that records steps in between goes on however often it is moved (a rolling restart, a chaos run).
        if journal.stalled >= self.settings.max_takeovers or (journal.request is None and journal.state is None):
            why = (
                f"the turn's runtime stopped {journal.stalled + 1} times at the same step; it is not tried again"
                if journal.request is not None or journal.state is not None
                else "the turn's journal is empty: nothing to go on with"
            )
            await self._end_now(running, error_event(turn_id, events_pb2.ERROR_KIND_INTERNAL, why, True))
            return
        out.emit(
            events_pb2.RuntimeEvent(
                turn_id=turn_id,
                status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_RUNNING, text="taken over"),
            )
        )
        deadline = self._takeover_deadline(journal)
        if deadline <= time.time():
            await self._end_now(running, expired_event(turn_id))
            return
        await out.record_raw(TAKEOVER, json.dumps({"holder": self.address, "from_seq": journal.seq}).encode())
        if journal.state is None:
            request = runtime_pb2.RunTurnRequest()
            request.CopyFrom(journal.request)
            request.lease_token = claimed.lease_token
            output = None
            if request.HasField("output_schema"):
                output = OutputSpec.of(struct_to_dict(request.output_schema))
            start = await self.builder.new_turn(request, output)
            if isinstance(start, NewTurn):
                start.turn.deadline = deadline
            await self._run_new(running, start, request)
            return
        decision, abandon = answer_from(journal.answer)
        point = ResumePoint(journal.state, decision, abandon, takeover=journal.answer is None)
        resume = runtime_pb2.ResumeTurnRequest(
            tenant_id=running.tenant_id,
            session_id=running.session_id,
            turn_id=turn_id,
            lease_token=claimed.lease_token,
        )
        answered = (journal.answer or {}).get("interrupt_id", "")
        if answered and not journal.answer.get("consumed"):
            # Recorded by a resume that took the checkpoint with a call of its own after it (a caller of the
            # previous version): it may have stopped in between.
            taking = runtime_pb2.ResumeTurnRequest()
            taking.CopyFrom(resume)
            taking.interrupt_id = answered
            try:
                await self.store.consume(taking, allow_undecided=True)
            except CogmeshError as exc:
                if exc.code != grpc.StatusCode.NOT_FOUND:  # NOT_FOUND: it did
                    raise
        turn, engine = await self.builder.resumed_turn(resume, journal.state, point)
        turn.deadline = deadline
        await self._run_built(running, turn, engine)

    def _takeover_deadline(self, journal: Any) -> float:
        """The deadline of the run that stopped: its resume's, else its request's."""
        if journal.answer is not None and journal.answer.get("deadline"):
            return float(journal.answer["deadline"])
        if journal.request is not None:
            return self.deadline_of(journal.request)
        return time.time() + self.settings.turn_timeout_s

    # ------------------------------------------------------------------ running

    def _track(
        self, how: str, tenant_id: str, session_id: str, turn_id: str, token: int, state: dict[str, Any] | None = None
    ) -> Running:
        out = self._log(tenant_id, session_id, turn_id, token, state, how)
        running = Running(tenant_id, session_id, turn_id, token, out)
        running.task = asyncio.current_task()
        running.log.on_lost = lambda lost: self._lost(running, lost)
        self._running[(session_id, turn_id)] = running
        self._idle.clear()
        self._busy.set()
        return running

    def _spawn(self, running: Running, work: Any) -> None:
        async def guarded() -> None:
            try:
                await work
            except (TurnLost, HandedOver) as stop:
                log.info("turn stopped here", why=str(stop) or "handed over")
            except asyncio.CancelledError:
                pass  # lost its lease, or shutting down: whoever goes on with it logs the rest
            except CogmeshError as exc:  # e.g. a dependency down, a taken-over turn whose agent is gone
                log.warning("turn could not go on", error=exc.message)
                with contextlib.suppress(TurnLost):
                    await running.log.end([failure_event(running.turn_id, exc)])
            except Exception:  # noqa: BLE001 - a bug must end the turn, not leave its watchers waiting
                log.exception("turn failed in the runtime")
                with contextlib.suppress(TurnLost):
                    message = "the runtime failed while running the turn"
                    await running.log.end([error_event(running.turn_id, events_pb2.ERROR_KIND_INTERNAL, message, True)])
            finally:
                await self._forget(running)

        task = asyncio.create_task(guarded())
        running.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _forget(self, running: Running) -> None:
        if self._running.get((running.session_id, running.turn_id)) is running:
            del self._running[(running.session_id, running.turn_id)]
        await running.log.close()
        if not self._running:
            self._idle.set()
            self._busy.clear()

    async def idle(self) -> None:
        """Wait until no turn runs on this replica."""
        await self._idle.wait()

    def _lost(self, running: Running, lost: TurnLost) -> None:
        """The turn may not write any more: stop it without a word (whoever holds it now logs the rest)."""
        log.warning(
            "turn stopped: it cannot write to its event log",
            why=str(lost),
            session_id=running.session_id,
            turn_id=running.turn_id,
        )
        if running.task is not None and running.task is not asyncio.current_task():
            running.task.cancel()

    async def _end_now(self, running: Running, event: events_pb2.RuntimeEvent) -> None:
        await running.log.end([event])

    async def _run_new(
        self, running: Running, start: NewTurn | CommandTurn | BlockedTurn, request: runtime_pb2.RunTurnRequest
    ) -> None:
        for event in start.events:
            running.log.emit(event)
        if isinstance(start, BlockedTurn):
            log.info("turn blocked by a hook", reason=start.reason)
            await self._end_now(
                running, error_event(request.turn_id, events_pb2.ERROR_KIND_GUARDRAIL, start.reason, False)
            )
            return
        if isinstance(start, CommandTurn):
            await self._command(running, start, request)
            return
        await self._run_built(running, start.turn, start.engine)

    async def _run_built(self, running: Running, turn: Turn, engine: Engine) -> None:
        """Run the engine into the turn's log; its end or pause goes with its messages and the lease's release."""
        out = running.log
        turn.journal = out
        running.turn = turn
        if running.interrupted:
            turn.request_cancel()
        stream: AsyncGenerator[events_pb2.RuntimeEvent, None] = engine.run(turn)  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        turned = loop.time()
        async with contextlib.aclosing(stream):
            async for event in stream:
                pause = turn.pause
                if pause is not None and event is pause.event:
                    status = await anext(stream)  # the PAUSED status that follows the interrupt
                    await out.end([event, status], pause=self.store.checkpoint_of(turn))
                    log.info("turn paused", interrupt_id=pause.interrupt_id, waiting=pause.snapshot["waiting"])
                    return
                kind = event.WhichOneof("payload")
                if kind in ("final", "error"):
                    messages = [message_to_proto(m, turn.turn_id) for m in turn.new_messages]
                    if kind == "final":
                        event.final.new_messages.extend(messages)
                    fit_end_event(event)
                    await out.end([event], messages)
                    self.memory.put(running.session_id, Memory(turn.summary, turn.covered, out.message_count))
                    log.info("turn ended", outcome=kind, messages=len(messages), runtime=engine.name)
                    return
                # The writer sends it now, not once the model stream pauses. A model streaming faster than the
                # loop turns (its chunks already buffered) would otherwise hold back the turn's appends and their
                # replies, which need the loop too: it turns while something waits to go at once, and every
                # YIELD_S. A call's announcement and a tool's result are left for their step's record (RECORDED_NEXT).
                out.emit(event)
                if kind not in RECORDED_NEXT and (out.urgent or loop.time() - turned > YIELD_S):
                    await asyncio.sleep(0)
                    turned = loop.time()

    async def _command(self, running: Running, start: CommandTurn, request: runtime_pb2.RunTurnRequest) -> None:
        """Answer a slash command without the model and apply what it changes."""
        reply, turn_id, out = start.reply, request.turn_id, running.log
        status = events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_RUNNING, text=f"command /{reply.command}")
        out.emit(events_pb2.RuntimeEvent(turn_id=turn_id, status=status))
        for text in await self.store.apply_command(start, request):
            notice = events_pb2.NativeNotice(kind="command", text=text)
            out.emit(events_pb2.RuntimeEvent(turn_id=turn_id, native_notice=notice))
        out.emit(events_pb2.RuntimeEvent(turn_id=turn_id, assistant_delta=events_pb2.AssistantDelta(text=reply.reply)))
        final = events_pb2.RuntimeEvent(
            turn_id=turn_id,
            final=events_pb2.FinalResult(text=reply.reply, metrics=events_pb2.TurnMetrics(runtime="command")),
        )
        said = [ChatMessage("user", request.content), ChatMessage("assistant", reply.reply)]
        exchange = [message_to_proto(m, turn_id) for m in said]
        if reply.effect.reset:
            # The reset's summary covers the exchange too, so it is stored first (idempotent), then the end.
            count = await self.store.append(request, exchange)
            await self.store.reset(request, count)
            final.final.new_messages.extend(exchange)
            await out.end([final])
        else:
            final.final.new_messages.extend(exchange)
            await out.end([final], exchange)
        log.info("command answered", command=reply.command, ok=reply.ok)

    # ------------------------------------------------------------------ cancel, leases, takeovers

    def cancel(self, session_id: str, turn_id: str) -> bool:
        running = self._running.get((session_id, turn_id))
        if running is None:
            return False
        running.interrupted = True
        return running.cancel()

    async def _keep_leases(self) -> None:
        """Renew every running turn's lease in one call; stop turns that were asked to, or lost theirs.

        Renewals are due every `turn_lease_renew_s` from the last one sent, and go at once when a StartTurn
        or the lag probe finds one overdue. How late each is answered is what admission control measures;
        while this replica lags, it renews for the lease TTL plus a grace that covers its lag."""
        every, clock = self.settings.turn_lease_renew_s, self.admission.clock
        due = clock() + every
        while True:
            if not self._running:
                self.admission.forget()
                await self._busy.wait()
                due = clock() + every
            self.admission.renewal_due(due)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, due - clock())):
                    await self._renew_now.wait()
            self._renew_now.clear()
            held = list(self._running.values())
            if not held:
                continue
            tokens = [r.lease_token for r in held]
            request = sessions_pb2.RenewTurnLeasesRequest(
                leases=[self._renewal(r.tenant_id, r.session_id, r.lease_token) for r in held]
            )
            sent = clock()
            try:
                reply = await self.sessions.RenewTurnLeases(request, timeout=self.settings.call_timeout_s)
            except DependencyError as exc:  # the leases outlive a few missed renewals
                log.warning("could not renew the running turns' leases", code=exc.status_code.name)
                # Still due (admission sees it ever later); tried again sooner than a whole interval.
                await asyncio.sleep(every / 4)
                continue
            self.admission.renewed(due, clock())
            due = sent + every
            for running, token, outcome in zip(held, tokens, reply.leases, strict=False):
                if running.lease_token != token:
                    continue  # re-claimed under a new token while this renewal was out: it holds the lease
                if running.task is None or running.task.done():
                    continue  # ended (and let its lease go) while this renewal was out
                if not outcome.held:
                    self._spawn_check(running, token)
                    continue
                running.log.named = True  # a renewal names its replica as the holder
                if outcome.interrupt_requested_by and not running.interrupted:
                    log.info("turn asked to stop", by=outcome.interrupt_requested_by)
                    running.interrupted = True
                    running.cancel()

    async def _probe_lag(self) -> None:
        """While turns run, how late the event loop runs a timer: a loop that lags delays every renewal as
        much. A renewal found overdue is woken now (it goes before the work queued behind it)."""
        period, clock = min(PROBE_S, self.settings.turn_lease_renew_s / 2), self.admission.clock
        while True:
            await self._busy.wait()
            expected = clock() + period
            await asyncio.sleep(period)
            self.admission.loop_lag(clock() - expected)
            if self.admission.renewal_overdue():
                self._renew_now.set()

    def _spawn_check(self, running: Running, token: int) -> None:
        """A renewal found the lease taken: the turn stops, unless the claimer hands it back (AdoptTurn)."""
        if running.checking:
            return  # one check per turn: later renewals find the same claim

        async def check() -> None:
            try:
                if not await running.log.adopted_after(token):
                    self._lost(running, TurnLost("the turn's lease was taken over", retryable=False))
            finally:
                running.checking = False

        running.checking = True
        task = asyncio.create_task(check())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def takeover_poll_after(self, wait_s: float, found: bool, none_open: bool = False) -> float:
        """Seconds to the next look for orphaned turns: `takeover_poll_s` while this replica runs turns or the
        last look found some; a lease TTL when it found no turn open at all (none can come due sooner: a turn's
        first lease is twice the TTL, a resumed one's a TTL); else twice the last wait, up to half a lease TTL.
        An idle suite's looks then scale with its work, not with the clock, and a turn whose runtime died is
        still taken over within about its lease TTL and half of it (docs/durability.md)."""
        base = self.settings.takeover_poll_s
        if found or self._running:
            return base
        if none_open:
            return max(base, self.settings.turn_lease_ttl_s)
        return min(wait_s * 2, max(base, self.settings.turn_lease_ttl_s / 2))

    async def _claim_orphans(self) -> None:
        """Take over turns whose runtime stopped (their lease lapsed while they were open)."""
        ttl = int(self.settings.turn_lease_ttl_s)
        wait = self.settings.takeover_poll_s
        none_open = False
        while True:
            # Jitter, so replicas started together do not all look at the same moment.
            await asyncio.sleep(wait * (0.75 + random.random() / 2))
            if not self.accepting:
                return
            claims = self.admission.claim_limit(len(self._running), CLAIMS_PER_LOOK)
            if not claims:  # too busy to take on more: the turns wait for a replica that keeps time
                wait = self.settings.takeover_poll_s
                continue
            # Nothing was open and nothing runs here: sessions may hold the answer until a turn opens.
            hold = self.settings.takeover_idle_wait_s if none_open and not self._running else 0
            try:
                reply = await self.sessions.ClaimOrphanedTurns(
                    sessions_pb2.ClaimOrphanedTurnsRequest(
                        holder=self.address, max_turns=claims, ttl_seconds=ttl, wait_seconds=hold
                    ),
                    timeout=self.settings.call_timeout_s + hold,
                )
            except DependencyError as exc:
                if exc.status_code != grpc.StatusCode.UNAVAILABLE:
                    log.warning("could not look for turns to take over", code=exc.status_code.name)
                wait, none_open = self.takeover_poll_after(wait, False), False
                continue
            none_open = reply.none_open
            wait = self.takeover_poll_after(wait, bool(reply.turns), reply.none_open)
            # At once, not one after another: each asks its last runtime first, which must answer before
            # that runtime stops waiting for the answer.
            await asyncio.gather(*(self._take_over_one(claimed) for claimed in reply.turns))

    async def _take_over_one(self, claimed: sessions_pb2.ClaimedTurn) -> None:
        try:
            await self.take_over(claimed)
        except Exception:  # noqa: BLE001 - one turn's failure must not end this replica's takeovers
            log.exception("could not take over a turn", session_id=claimed.session_id)

    async def close(self) -> None:
        """Hand the running turns over to the other replicas: at their next recorded step, or where they are."""
        self.accepting = False
        for loop in self._loops:
            loop.cancel()
        running = [r for r in self._running.values() if r.task is not None]
        if running:
            for r in running:
                r.log.handing_over = True
            pending = {r.task for r in running if r.task is not None}
            started = time.monotonic()
            _, left = await asyncio.wait(pending, timeout=self.settings.handover_grace_s)
            await tasks.stop(left, "handing turns over")
            await self._hand_over(running)
            log.info("turns handed over", turns=len(running), waited_s=round(time.monotonic() - started, 3))
        await tasks.stop([*self._tasks, *self._loops], "stopping the runtime")
        await self.appends.close()

    async def _hand_over(self, turns: list[Running]) -> None:
        request = sessions_pb2.RenewTurnLeasesRequest(
            leases=[
                sessions_pb2.RenewTurnLeaseRequest(
                    tenant_id=r.tenant_id, session_id=r.session_id, lease_token=r.lease_token, hand_over=True
                )
                for r in turns
            ]
        )
        with contextlib.suppress(DependencyError):  # not handed over: their leases lapse instead
            await self.sessions.RenewTurnLeases(request, timeout=self.settings.call_timeout_s)
