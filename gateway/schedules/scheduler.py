"""The scheduler every gateway replica runs: it claims due ticks exactly once and drives each run.

It looks at the store when the earliest time it knows of comes: a schedule's next fire time
or a run's lease expiry, as its last look read them (the lowest of each index), or one it
created or resumed itself; and at least every `look_s` (what another replica wrote since).
Between looks it sleeps until that time: an idle gateway wakes once a `look_s`, and a wall
clock stepped meanwhile is read again at the next look. A look asks for the schedules whose
next fire time has come and, for each, writes the schedule with its next fire time moved past
now, under the version it read, adding the tick's run (id: the tick's milliseconds) in the
same write. Of the replicas that saw the tick due, the one whose write lands holds the run;
the others get ABORTED and leave it. The holder then:

1. picks the run's session (a new one, made now, or the schedule's own) and records it with
   the seq its log ends at, under a lease (`scheduler_lease_s`, renewed while it works);
2. starts the turn as SendMessage does (gateway/turns.py), and records the turn;
3. reads the session's log from that seq until the turn ends or pauses, and records the
   outcome and its cost (the final event's metrics).

A holder that goes away leaves its run's lease to lapse; any replica then takes the run
over (again a versioned write) and goes on from the last step recorded. A run recorded with
its session but no turn may have had its turn accepted just before its holder went: a run's
turn id is derived from the run, so the new holder looks for that turn's `accepted` event in
the log after the recorded seq and adopts it rather than start a second turn. A holder starts a turn only
with most of its lease ahead of it, so it is never still starting one when another replica
takes the run over (the turn start's own deadline is far below the lease).

Missed ticks (no gateway ran when they fell): a tick more than `scheduler_grace_s` late is
missed; the latest missed tick runs once (SCHEDULE_CATCH_UP_RUN_ONCE, the default) or none
does (SCHEDULE_CATCH_UP_SKIP), and the schedule goes on from its next tick.

Times come from `clock` (seconds since the epoch): replicas' clocks are assumed in step to
well under the lease, as NTP keeps them. Tests give every replica one fake clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Callable

import grpc

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import schedules_pb2 as api
from cogmesh.sessions.v1 import schedules_pb2 as store_pb
from cogmesh.sessions.v1 import sessions_pb2
from gateway import auth
from gateway.schedules import timing
from gateway.settings import GatewaySettings
from gateway.turns import Turns
from services.kit.clients import Clients
from services.kit.dependencies import ScheduleStoreClient, SessionsClient
from services.kit.errors import CogmeshError, DependencyError, InvalidArgument, NotFound, Unavailable
from services.kit.logging import bind_request, log
from services.lib.agents import AgentRegistry
from services.lib.event_log import EventLogReader, ends_stream, is_paused
from services.lib.stored_agents import StoredAgents

Clock = Callable[[], float]
DUE_BATCH = 1000  # schedules claimed per look at most; more wait for the next tick
STARTS_AT_ONCE = 64  # turns a replica starts together: a burst of ticks queues here, not at the runtime

ENDED = frozenset(
    {
        api.SCHEDULE_RUN_OUTCOME_COMPLETED,
        api.SCHEDULE_RUN_OUTCOME_FAILED,
        api.SCHEDULE_RUN_OUTCOME_CANCELLED,
        api.SCHEDULE_RUN_OUTCOME_PAUSED,
        api.SCHEDULE_RUN_OUTCOME_SKIPPED,
    }
)


def ms(t: float) -> int:
    return math.floor(t * 1000 + 0.5)


def look_interval(tick_s: float, lease_s: float, grace_s: float) -> float:
    """The longest a scheduler goes without looking at the store. At most the lease: a run recorded
    by another replica after a look cannot lapse before the next look sees its expiry. At most half
    the grace: a tick whose replica died meanwhile is still run on time. At least a tick."""
    return max(tick_s, min(lease_s, grace_s / 2))


def spec_of(schedule: store_pb.StoredSchedule) -> api.ScheduleSpec:
    return api.ScheduleSpec.FromString(schedule.spec)


class LostRun(Exception):
    """Another replica holds the run now (its lease lapsed here), or its schedule is gone."""


class Scheduler:
    def __init__(
        self,
        settings: GatewaySettings,
        clients: Clients,
        agents: AgentRegistry,
        events: EventLogReader,
        turns: Turns,
        clock: Clock = time.time,
    ) -> None:
        self.settings, self.clients, self.agents, self.events, self.turns = settings, clients, agents, events, turns
        self.clock = clock
        self.store = ScheduleStoreClient.of(clients)
        self.sessions = SessionsClient.of(clients)
        self.stored = StoredAgents(clients, agents)  # the tenants' versioned agents
        self.holder = f"gateway-{uuid.uuid4().hex[:12]}"
        self.tick_s = settings.scheduler_tick_s
        self.lease_s = settings.scheduler_lease_s
        self.grace_s = settings.scheduler_grace_s
        self.look_s = look_interval(self.tick_s, self.lease_s, self.grace_s)
        self._starts = asyncio.Semaphore(STARTS_AT_ONCE)
        self._loop: asyncio.Task[None] | None = None
        self._runs: dict[tuple[str, str, str], asyncio.Task[None]] = {}  # the runs this replica drives
        self._next_look = -math.inf  # clock time of the next look at the store: at once on start
        self._wake = asyncio.Event()  # the next look moved earlier: sleep again for the new time
        self.ticks = 0  # passes of the loop (a look when one was due): tests wait on it
        self.looks = 0  # looks at the store

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop claiming and driving: runs held here are taken over elsewhere once their leases lapse."""
        tasks = [t for t in (self._loop, *self._runs.values()) if t is not None]
        self._loop = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def expect(self, fire_ms: int) -> None:
        """A schedule created or resumed here fires at `fire_ms`: look then, whatever the last look saw."""
        if fire_ms and fire_ms / 1000 < self._next_look:
            self._next_look = fire_ms / 1000
            self._wake.set()

    def clock_moved(self) -> None:
        """Compare the clock with the next look now, not when the sleep for it ends (a test's clock jumped)."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            wait = min(self.look_s, self._next_look - self.clock())
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()
            if self.clock() >= self._next_look:
                try:
                    await self.tick()
                except CogmeshError as exc:
                    log.warning("scheduler look failed; trying again next tick", error=str(exc))
                    self._next_look = min(self._next_look, self.clock() + self.tick_s)
            self.ticks += 1

    async def tick(self) -> None:
        """Claim every due tick, take over every run whose holder's lease lapsed, and note when to look next."""
        now = self.clock()
        self.looks += 1
        self._next_look = math.inf  # times expected while this look runs lower it
        horizon = ms(now + self.look_s)
        first_due = await self._first_due(horizon)
        if first_due is not None and first_due <= ms(now):
            due = await self.store.ListDueSchedules(store_pb.ListDueSchedulesRequest(due_ms=ms(now), limit=DUE_BATCH))
            await asyncio.gather(*(self._claim(schedule, now) for schedule in due.schedules))
            first_due = await self._first_due(horizon)  # past the ticks just claimed
        first_stale = await self._first_stale(horizon)
        if first_stale is not None and first_stale <= ms(now):
            stale = await self.store.ListStaleScheduleRuns(
                store_pb.ListStaleScheduleRunsRequest(now_ms=ms(now), limit=DUE_BATCH)
            )
            for run in stale.runs:
                if (run.tenant_id, run.schedule_id, run.run_id) not in self._runs:
                    await self._take_over(run)
            first_stale = await self._first_stale(horizon)
        following = min((t / 1000 for t in (first_due, first_stale) if t is not None), default=now + self.look_s)
        if following <= now:
            # Still due after this look: more than a batch, or a run held here whose lease lapsed. Next tick.
            following = now + self.tick_s
        self._next_look = min(self._next_look, following)

    async def _first_due(self, until_ms: int) -> int | None:
        """The earliest next fire time up to `until_ms` of any schedule (one index read when none is)."""
        reply = await self.store.ListDueSchedules(store_pb.ListDueSchedulesRequest(due_ms=until_ms, limit=1))
        return int(reply.schedules[0].next_fire_ms) if reply.schedules else None

    async def _first_stale(self, until_ms: int) -> int | None:
        """The earliest lease expiry up to `until_ms` of any run not ended."""
        reply = await self.store.ListStaleScheduleRuns(store_pb.ListStaleScheduleRunsRequest(now_ms=until_ms, limit=1))
        return int(reply.runs[0].lease_expire_ms) if reply.runs else None

    # ------------------------------------------------------------------ claiming

    async def _claim(self, schedule: store_pb.StoredSchedule, now: float) -> None:
        spec = spec_of(schedule)
        clock = timing.of(spec, schedule.create_ms / 1000)
        fire = schedule.next_fire_ms / 1000
        latest = max(clock.latest(now) or fire, fire)
        following = clock.next_after(now)
        on_time = now - latest <= self.grace_s
        run: store_pb.StoredScheduleRun | None = None
        if on_time or spec.catch_up != api.SCHEDULE_CATCH_UP_SKIP:
            trigger = api.SCHEDULE_RUN_TRIGGER_CLOCK if on_time else api.SCHEDULE_RUN_TRIGGER_CATCH_UP
            run = self._new_run(schedule, ms(latest), str(ms(latest)), trigger, now)
        claimed = store_pb.StoredSchedule()
        claimed.CopyFrom(schedule)
        claimed.next_fire_ms = ms(following) if following is not None else 0
        if run is not None:
            claimed.last_fire_ms = ms(latest)
        try:
            reply = await self.store.UpdateSchedule(store_pb.UpdateScheduleRequest(schedule=claimed, run=run))
        except DependencyError as exc:
            if exc.status_code in (grpc.StatusCode.ABORTED, grpc.StatusCode.NOT_FOUND):
                return  # another replica claimed the tick, or the schedule is gone
            raise
        if run is None:
            log.info("missed tick skipped", schedule_id=schedule.schedule_id, tick_ms=ms(latest))
        elif reply.HasField("run"):
            self._drive(reply.run, claimed)

    def _new_run(
        self, schedule: store_pb.StoredSchedule, fire_ms: int, run_id: str, trigger: int, now: float
    ) -> store_pb.StoredScheduleRun:
        public = api.ScheduleRun(
            run_id=run_id,
            schedule_id=schedule.schedule_id,
            trigger=trigger,  # type: ignore[arg-type]
            outcome=api.SCHEDULE_RUN_OUTCOME_STARTING,
        )
        public.fire_time.FromMilliseconds(fire_ms)
        return store_pb.StoredScheduleRun(
            tenant_id=schedule.tenant_id,
            schedule_id=schedule.schedule_id,
            run_id=run_id,
            fire_ms=fire_ms,
            run=public.SerializeToString(),
            holder=self.holder,
            lease_expire_ms=ms(now + self.lease_s),
            attempt=1,
        )

    async def trigger(self, schedule: store_pb.StoredSchedule) -> store_pb.StoredScheduleRun:
        """A run now, outside the clock: recorded, then driven here."""
        now = self.clock()
        run = self._new_run(schedule, ms(now), f"m{uuid.uuid4().hex[:16]}", api.SCHEDULE_RUN_TRIGGER_MANUAL, now)
        reply = await self.store.PutScheduleRun(store_pb.PutScheduleRunRequest(run=run))
        self._drive(reply.run, schedule)
        return reply.run

    async def _take_over(self, run: store_pb.StoredScheduleRun) -> None:
        taken = store_pb.StoredScheduleRun()
        taken.CopyFrom(run)
        taken.holder, taken.attempt = self.holder, run.attempt + 1
        taken.lease_expire_ms = ms(self.clock() + self.lease_s)
        try:
            reply = await self.store.PutScheduleRun(store_pb.PutScheduleRunRequest(run=taken))
            schedule = await self.store.GetSchedule(
                store_pb.GetScheduleRequest(tenant_id=run.tenant_id, schedule_id=run.schedule_id)
            )
        except DependencyError as exc:
            if exc.status_code in (grpc.StatusCode.ABORTED, grpc.StatusCode.NOT_FOUND):
                return  # another replica took it first, or the schedule is gone
            raise
        log.info("schedule run taken over", schedule_id=run.schedule_id, run_id=run.run_id, previous=run.holder)
        self._drive(reply.run, schedule.schedule)

    # ------------------------------------------------------------------ driving a run

    def _drive(self, run: store_pb.StoredScheduleRun, schedule: store_pb.StoredSchedule) -> None:
        key = (run.tenant_id, run.schedule_id, run.run_id)
        task = asyncio.create_task(_Run(self, run, schedule).drive())
        self._runs[key] = task
        task.add_done_callback(lambda _: self._runs.pop(key, None))


class _Run:
    """One run held by this replica, driven from its last recorded step to its outcome."""

    def __init__(self, scheduler: Scheduler, run: store_pb.StoredScheduleRun, schedule: store_pb.StoredSchedule):
        self.s, self.stored, self.schedule = scheduler, run, schedule
        self.spec = spec_of(schedule)
        self.public = api.ScheduleRun.FromString(run.run)

    async def drive(self) -> None:
        # The event log reader and the turn's lease act for the schedule's tenant, as for its API key.
        auth.current.set(auth.Principal(self.stored.tenant_id, f"schedule:{self.stored.schedule_id}"))
        bind_request(tenant=self.stored.tenant_id, schedule_id=self.stored.schedule_id, run_id=self.stored.run_id)
        try:
            if self.public.outcome == api.SCHEDULE_RUN_OUTCOME_STARTING:
                await self._start()
            if self.public.outcome == api.SCHEDULE_RUN_OUTCOME_RUNNING:
                await self._watch()
        except LostRun:
            log.info("schedule run held elsewhere now", run_id=self.stored.run_id)
        except CogmeshError as exc:
            # Left to its lease: once it lapses, a replica takes the run over from its last recorded step.
            log.warning("schedule run interrupted; it is taken over once its lease lapses", error=str(exc))

    async def _save(self, renew: bool = True) -> None:
        """Record the run as it stands, under the version read (LostRun when another replica wrote it)."""
        record = store_pb.StoredScheduleRun()
        record.CopyFrom(self.stored)
        record.run = self.public.SerializeToString()
        record.ended = self.public.outcome in ENDED
        if renew:
            record.lease_expire_ms = ms(self.s.clock() + self.s.lease_s)
        try:
            reply = await self.s.store.PutScheduleRun(store_pb.PutScheduleRunRequest(run=record))
        except DependencyError as exc:
            if exc.status_code in (grpc.StatusCode.ABORTED, grpc.StatusCode.NOT_FOUND):
                raise LostRun from exc
            raise
        self.stored = reply.run

    def _lease_left(self) -> float:
        return self.stored.lease_expire_ms / 1000 - self.s.clock()

    async def _end(self, outcome: int, error: str = "") -> None:
        self.public.outcome = outcome  # type: ignore[assignment]
        self.public.error = error[:2000]
        self.public.end_time.FromMilliseconds(ms(self.s.clock()))
        await self._save(renew=False)
        log.info("schedule run ended", run_id=self.stored.run_id, outcome=api.ScheduleRunOutcome.Name(outcome))

    # ------------------------------------------------------------------ starting

    async def _start(self) -> None:
        if not self.public.session_id:
            try:
                session_id = await self._session()
            except CogmeshError as exc:
                if isinstance(exc, Unavailable):
                    raise
                await self._end(api.SCHEDULE_RUN_OUTCOME_FAILED, exc.message)
                return
            self.public.session_id = session_id
            self.stored.after_seq = await self._last_seq(session_id)
            await self._save()
        else:
            turn_id = await self._accepted_turn()
            if turn_id:  # its turn was accepted before its previous holder could record it
                await self._started(turn_id)
                return
        async with self.s._starts:
            if self._lease_left() < self.s.lease_s / 2:
                await self._save()  # a start never outlives the lease it began under
            try:
                turn_id, _ = await self.s.turns.start(
                    self.stored.tenant_id, self.public.session_id, self.spec.message, "", turn_id=self._turn_id()
                )
            except CogmeshError as exc:
                if isinstance(exc, Unavailable):
                    raise
                skipped = exc.code == grpc.StatusCode.FAILED_PRECONDITION
                outcome = api.SCHEDULE_RUN_OUTCOME_SKIPPED if skipped else api.SCHEDULE_RUN_OUTCOME_FAILED
                await self._end(outcome, exc.message)
                return
        await self._started(turn_id)

    async def _started(self, turn_id: str) -> None:
        self.public.turn_id = turn_id
        self.public.outcome = api.SCHEDULE_RUN_OUTCOME_RUNNING
        self.public.start_time.FromMilliseconds(ms(self.s.clock()))
        await self._save()
        bind_request(session_id=self.public.session_id, turn_id=turn_id)

    async def _session(self) -> str:
        """The session of the run: the schedule's own, or a new one with its agent, user and scope."""
        if self.spec.session_mode == api.SCHEDULE_SESSION_MODE_CONTINUE:
            return self.schedule.session_id
        name = self.spec.agent or "default"
        ref = f"{name}@{self.spec.agent_version}" if self.spec.agent_version else name
        try:  # an alias is followed when the run opens its session
            agent, version = await self.s.stored.resolve(self.stored.tenant_id, ref)
        except (NotFound, InvalidArgument) as exc:
            raise CogmeshError(f"agent {ref!r} is no longer known: {exc.message}") from exc
        reply = await self.s.sessions.CreateSession(
            sessions_pb2.CreateSessionRequest(
                tenant_id=self.stored.tenant_id,
                user_id=self.spec.user_id,
                agent=agent.name,
                role_id=agent.default_role,
                scope=self.spec.scope,
                agent_version=version,
            )
        )
        return str(reply.session.session_id)

    async def _last_seq(self, session_id: str) -> int:
        reply = await self.s.sessions.GetEventLogState(
            sessions_pb2.GetEventLogStateRequest(tenant_id=self.stored.tenant_id, session_id=session_id)
        )
        return int(reply.last_seq)

    def _turn_id(self) -> str:
        return run_turn_id(self.stored.tenant_id, self.stored.schedule_id, self.stored.run_id)

    async def _accepted_turn(self) -> str:
        """The run's turn when its `accepted` event is in the log after the run's recorded seq."""
        read = sessions_pb2.ReadEventsRequest(
            tenant_id=self.stored.tenant_id, session_id=self.public.session_id, after_seq=self.stored.after_seq
        )
        try:
            async for batch in self.s.sessions.ReadEvents(read, timeout=self.s.settings.call_timeout_s):
                for event in batch.events:
                    if event.turn_id == self._turn_id() and event.HasField("status"):
                        return str(event.turn_id)
        except DependencyError as exc:
            if exc.status_code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            return ""  # the session or its log is gone: nothing was started there that can be followed
        return ""

    # ------------------------------------------------------------------ watching

    async def _watch(self) -> None:
        """Read the session's log until the run's turn ends or pauses; renew the lease meanwhile."""
        heartbeat_s = min(self.s.settings.heartbeat_s, self.s.lease_s / 3)
        turn_id = self.public.turn_id
        reading = self.s.events.read(self.public.session_id, int(self.stored.after_seq), heartbeat_s)
        try:
            while True:
                try:
                    batch = await anext(reading)
                except StopAsyncIteration:
                    return
                except CogmeshError as exc:  # the log's failure (the store's, in _save, is drive's to log)
                    if isinstance(exc, Unavailable):
                        raise
                    await self._end(
                        api.SCHEDULE_RUN_OUTCOME_FAILED, f"the turn's events could not be read: {exc.message}"
                    )
                    return
                for event in batch or ():
                    if event.turn_id == turn_id and ends_stream(event):
                        await self._outcome(event)
                        return
                if self._lease_left() < self.s.lease_s / 2:
                    await self._save()
        finally:
            with contextlib.suppress(Exception):
                await reading.aclose()  # type: ignore[attr-defined]

    async def _outcome(self, event: events_pb2.RuntimeEvent) -> None:
        if event.HasField("final"):
            metrics = event.final.metrics
            self.public.cost_usd = metrics.cost_usd
            self.public.input_tokens, self.public.output_tokens = metrics.input_tokens, metrics.output_tokens
            await self._end(api.SCHEDULE_RUN_OUTCOME_COMPLETED)
        elif is_paused(event):
            await self._end(api.SCHEDULE_RUN_OUTCOME_PAUSED, event.status.text)
        elif event.error.kind == events_pb2.ERROR_KIND_CANCELLED:
            await self._end(api.SCHEDULE_RUN_OUTCOME_CANCELLED, event.error.message)
        else:
            await self._end(api.SCHEDULE_RUN_OUTCOME_FAILED, event.error.message)


def run_to_api(run: store_pb.StoredScheduleRun) -> api.ScheduleRun:
    return api.ScheduleRun.FromString(run.run)


def schedule_to_api(schedule: store_pb.StoredSchedule) -> api.Schedule:
    public = api.Schedule(schedule_id=schedule.schedule_id, spec=spec_of(schedule), session_id=schedule.session_id)
    if schedule.paused:
        public.state = api.SCHEDULE_STATE_PAUSED
    elif schedule.next_fire_ms:
        public.state = api.SCHEDULE_STATE_ACTIVE
        public.next_fire_time.FromMilliseconds(schedule.next_fire_ms)
    else:
        public.state = api.SCHEDULE_STATE_DONE
    if schedule.last_fire_ms:
        public.last_fire_time.FromMilliseconds(schedule.last_fire_ms)
    public.create_time.FromMilliseconds(schedule.create_ms)
    return public


def run_turn_id(tenant_id: str, schedule_id: str, run_id: str) -> str:
    """A run's turn id: the same on every replica that holds the run."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"cogmesh-schedule-run:{tenant_id}/{schedule_id}/{run_id}").hex
