"""Schedules through the gateway, with real services: two gateways and two runtime replicas over one
sessions service, in memory and on Redis, every scheduler on one fake clock.

- a tick runs exactly once whichever gateway sees it first, in a session of its own, and its run
  records the session, the turn, the outcome and the cost;
- after both gateways restart, a tick missed while they were down follows the catch-up rule (run
  once, or skip) and the next tick runs once;
- a run whose holder went away is taken over, and one whose turn was accepted just before is
  adopted, not started twice;
- the API: validation naming the field, pause, resume, trigger, continue mode, delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from cogmesh.gateway.v1 import agents_pb2 as agents_api
from cogmesh.gateway.v1 import agents_pb2_grpc as agents_grpc
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc, schedules_pb2_grpc
from cogmesh.gateway.v1 import schedules_pb2 as api
from cogmesh.sessions.v1 import schedules_pb2 as store_pb
from cogmesh.sessions.v1 import schedules_pb2_grpc as store_grpc
from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from gateway import main as gateway_main
from gateway.schedules.scheduler import Scheduler, run_turn_id
from services.kit.server import RunningServer, start
from services.suite.inprocess import Suite, start_suite
from services.suite.settings import SuiteSettings
from tests.integration.conftest import status_details

T0 = 2_051_222_400.0  # 2035-01-01T00:00:00Z: after any real now, so a real clock never finds these ticks due
TIMEOUT_S = 20.0
SETTINGS = SuiteSettings(
    heartbeat_s=0.2,
    call_timeout_s=2,
    dev_mode=True,
    scheduler_tick_s=0.05,
    scheduler_lease_s=5,
    scheduler_grace_s=60,
)
TENANT = "default"


class FakeClock:
    """The schedulers' clock: each sleeps until its next look by the event loop's time, so a jump of this
    one wakes them (`clock_moved`), as the next bounded look would for a stepped wall clock."""

    def __init__(self, now: float) -> None:
        self._now = now
        self.schedulers: list[Scheduler] = []

    def __call__(self) -> float:
        return self._now

    @property
    def now(self) -> float:
        return self._now

    @now.setter
    def now(self, now: float) -> None:
        self._now = now
        self.nudge()

    def drive(self, scheduler: Scheduler) -> None:
        scheduler.clock = self
        self.schedulers.append(scheduler)
        scheduler.clock_moved()

    def nudge(self) -> None:
        for scheduler in self.schedulers:
            scheduler.clock_moved()


def scheduler_of(server: RunningServer) -> Scheduler:
    found: Scheduler = next(
        m.servicer.scheduler for m in server.app.mounts if m.service_name.endswith("ScheduleService")
    )
    return found


@dataclass
class Replicas:
    suite: Suite
    extra: RunningServer  # the second gateway
    clock: FakeClock
    channels: list[grpc.aio.Channel]

    @property
    def gateways(self) -> list[RunningServer]:
        return [self.suite.servers["gateway"], self.extra]

    def schedules(self, k: int = 0) -> schedules_pb2_grpc.ScheduleServiceStub:
        return schedules_pb2_grpc.ScheduleServiceStub(self._channel(self.gateways[k].address))

    def gateway(self, k: int = 0) -> gateway_pb2_grpc.GatewayServiceStub:
        return gateway_pb2_grpc.GatewayServiceStub(self._channel(self.gateways[k].address))

    def sessions(self) -> sessions_pb2_grpc.SessionsServiceStub:
        return sessions_pb2_grpc.SessionsServiceStub(self._channel(self.suite.servers["sessions"].address))

    def store(self) -> store_grpc.ScheduleStoreServiceStub:
        return store_grpc.ScheduleStoreServiceStub(self._channel(self.suite.servers["sessions"].address))

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = grpc.aio.insecure_channel(address)
        self.channels.append(channel)
        return channel

    async def ticks(self, n: int = 3) -> None:
        """Wait until every gateway's scheduler has looked n more times."""
        schedulers = [scheduler_of(g) for g in self.gateways]
        targets = [s.ticks + n for s in schedulers]

        def passed() -> bool:
            self.clock.nudge()  # a pass each time: idle, a scheduler sleeps until its next look
            return all(s.ticks >= t for s, t in zip(schedulers, targets, strict=True))

        await until(passed)

    async def stop_gateways(self) -> None:
        for server in self.gateways:
            await server.stop(0)

    async def restart_gateways(self) -> None:
        """Both gateways as restarted processes: new schedulers on the same ports, on the fake clock."""
        self.clock.drive(scheduler_of(await self.suite.restart("gateway")))
        assert self.suite.settings is not None
        self.extra = await start(gateway_main.build, self.suite.settings, self.extra.address)
        self.clock.drive(scheduler_of(self.extra))


async def until(condition: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> None:
    """Wait for `condition` to hold (checked every 20 ms), at most `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s:g}s"
        await asyncio.sleep(0.02)


async def until_async(condition: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> Any:
    async with asyncio.timeout(timeout_s):
        while True:
            found = await condition()
            if found:
                return found
            await asyncio.sleep(0.02)


@pytest.fixture(params=["memory", "redis"])
async def replicas(request: pytest.FixtureRequest) -> AsyncIterator[Replicas]:
    settings = SETTINGS
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        settings = settings.model_copy(
            update={"redis_url": url, "redis_key_prefix": request.getfixturevalue("redis_prefix")}
        )
    clock = FakeClock(T0)
    suite = await start_suite(settings, runtimes=2)
    clock.drive(scheduler_of(suite.servers["gateway"]))
    assert suite.settings is not None
    extra = await start(gateway_main.build, suite.settings, "127.0.0.1:0")
    clock.drive(scheduler_of(extra))
    made = Replicas(suite, extra, clock, [])
    try:
        yield made
    finally:
        for channel in made.channels:
            await channel.close()
        with contextlib.suppress(Exception):
            await made.extra.stop(0)
        await suite.stop(0)


async def runs_of(r: Replicas, schedule_id: str) -> list[api.ScheduleRun]:
    reply = await r.schedules().ListScheduleRuns(api.ListScheduleRunsRequest(schedule_id=schedule_id), timeout=5)
    return list(reply.runs)


async def ended_runs(r: Replicas, schedule_id: str, n: int) -> list[api.ScheduleRun]:
    """The schedule's runs once n of them have ended."""

    async def ended() -> list[api.ScheduleRun] | None:
        runs = await runs_of(r, schedule_id)
        done = [x for x in runs if x.outcome >= api.SCHEDULE_RUN_OUTCOME_COMPLETED]
        return runs if len(done) >= n else None

    found: list[api.ScheduleRun] = await until_async(ended)
    return found


async def accepted_turns(r: Replicas, session_id: str) -> list[str]:
    """The turns whose acceptance the session's log holds."""
    read = sessions_pb2.ReadEventsRequest(tenant_id=TENANT, session_id=session_id)
    turns = []
    async for batch in r.sessions().ReadEvents(read, timeout=5):
        turns += [e.turn_id for e in batch.events if e.HasField("status") and e.status.text == "accepted"]
    return turns


def cron(expression: str, **fields: Any) -> api.ScheduleSpec:
    fields.setdefault("message", "report the weather")
    return api.ScheduleSpec(cron=api.Cron(expression=expression), **fields)


async def create(r: Replicas, spec: api.ScheduleSpec, k: int = 0) -> api.Schedule:
    reply = await r.schedules(k).CreateSchedule(api.CreateScheduleRequest(spec=spec), timeout=5)
    return reply.schedule


# --------------------------------------------------------------------------- exactly once


async def test_each_tick_runs_once_across_two_gateways_and_two_runtimes(replicas: Replicas) -> None:
    r = replicas
    schedule = await create(r, cron("*/5 * * * *"))
    assert schedule.state == api.SCHEDULE_STATE_ACTIVE
    assert schedule.next_fire_time.ToSeconds() == T0 + 300
    await r.ticks()
    assert await runs_of(r, schedule.schedule_id) == []  # not due yet

    r.clock.now = T0 + 300
    runs = await ended_runs(r, schedule.schedule_id, 1)
    await r.ticks()  # both schedulers looked again: nothing more
    runs = await runs_of(r, schedule.schedule_id)
    assert len(runs) == 1, runs
    run = runs[0]
    assert run.run_id == str(int((T0 + 300) * 1000))
    assert run.fire_time.ToSeconds() == T0 + 300
    assert run.trigger == api.SCHEDULE_RUN_TRIGGER_CLOCK
    assert run.outcome == api.SCHEDULE_RUN_OUTCOME_COMPLETED, run.error
    assert run.session_id and run.turn_id
    assert run.input_tokens > 0 and run.cost_usd >= 0
    assert await accepted_turns(r, run.session_id) == [run.turn_id]

    r.clock.now = T0 + 600 + 1  # the next tick, one second late: on time
    await ended_runs(r, schedule.schedule_id, 2)
    await r.ticks()
    runs = await runs_of(r, schedule.schedule_id)
    assert [x.fire_time.ToSeconds() for x in runs] == [T0 + 600, T0 + 300]  # newest first
    assert runs[0].session_id != runs[1].session_id  # a new session per run
    assert await accepted_turns(r, runs[0].session_id) == [runs[0].turn_id]
    got = await r.schedules(1).GetSchedule(api.GetScheduleRequest(schedule_id=schedule.schedule_id), timeout=5)
    assert got.schedule.next_fire_time.ToSeconds() == T0 + 900
    assert got.schedule.last_fire_time.ToSeconds() == T0 + 600
    # No replica started a turn of its own for a tick another claimed: one session per tick, no more.
    sessions = await r.gateway(1).ListSessions(gateway_pb2.ListSessionsRequest(), timeout=5)
    assert sorted(s.session_id for s in sessions.sessions) == sorted(x.session_id for x in runs)


async def test_after_a_restart_a_missed_tick_follows_the_catch_up_rule_and_the_next_runs_once(
    replicas: Replicas,
) -> None:
    r = replicas
    run_once = await create(r, cron("0 * * * *"))
    skip = await create(r, cron("0 * * * *", catch_up=api.SCHEDULE_CATCH_UP_SKIP))
    await r.stop_gateways()
    r.clock.now = T0 + 3600 + 600  # the tick at T0+3600 fell while no gateway ran, 10 minutes ago
    await r.restart_gateways()

    runs = await ended_runs(r, run_once.schedule_id, 1)
    assert runs[0].trigger == api.SCHEDULE_RUN_TRIGGER_CATCH_UP
    assert runs[0].fire_time.ToSeconds() == T0 + 3600
    assert runs[0].outcome == api.SCHEDULE_RUN_OUTCOME_COMPLETED
    await r.ticks()
    assert len(await runs_of(r, run_once.schedule_id)) == 1
    assert await runs_of(r, skip.schedule_id) == []
    for schedule in (run_once, skip):
        got = await r.schedules().GetSchedule(api.GetScheduleRequest(schedule_id=schedule.schedule_id), timeout=5)
        assert got.schedule.next_fire_time.ToSeconds() == T0 + 7200

    r.clock.now = T0 + 7200
    await ended_runs(r, run_once.schedule_id, 2)
    await ended_runs(r, skip.schedule_id, 1)
    await r.ticks()
    assert [x.trigger for x in await runs_of(r, run_once.schedule_id)] == [
        api.SCHEDULE_RUN_TRIGGER_CLOCK,
        api.SCHEDULE_RUN_TRIGGER_CATCH_UP,
    ]
    assert [x.trigger for x in await runs_of(r, skip.schedule_id)] == [api.SCHEDULE_RUN_TRIGGER_CLOCK]


async def test_a_run_whose_holder_went_away_is_taken_over_and_its_accepted_turn_adopted(replicas: Replicas) -> None:
    """A holder recorded the run's session, its turn was accepted, then the holder died before recording the
    turn: the replica that takes the run over finds that turn in the log and follows it; no second turn."""
    r = replicas
    schedule = await create(
        r,
        api.ScheduleSpec(
            interval_seconds=3600, message="nightly digest", session_mode=api.SCHEDULE_SESSION_MODE_CONTINUE
        ),
    )
    session_id = schedule.session_id
    assert session_id
    # The dead holder's steps: the run claimed with its session and log position, then the turn accepted.
    stored = await r.store().GetSchedule(
        store_pb.GetScheduleRequest(tenant_id=TENANT, schedule_id=schedule.schedule_id)
    )
    public = api.ScheduleRun(
        run_id="orphan",
        schedule_id=schedule.schedule_id,
        trigger=api.SCHEDULE_RUN_TRIGGER_MANUAL,
        outcome=api.SCHEDULE_RUN_OUTCOME_STARTING,
        session_id=session_id,
    )
    orphan = store_pb.StoredScheduleRun(
        tenant_id=TENANT,
        schedule_id=schedule.schedule_id,
        run_id="orphan",
        fire_ms=int(T0 * 1000),
        run=public.SerializeToString(),
        holder="gateway-gone",
        lease_expire_ms=int((T0 + 5) * 1000),
        attempt=1,
    )
    await r.store().PutScheduleRun(store_pb.PutScheduleRunRequest(run=orphan))
    turn_id, _ = await scheduler_of(r.gateways[0]).turns.start(
        TENANT, session_id, "nightly digest", "", turn_id=run_turn_id(TENANT, schedule.schedule_id, "orphan")
    )
    assert stored.schedule.session_id == session_id

    await r.ticks()
    assert (await runs_of(r, schedule.schedule_id))[0].outcome == api.SCHEDULE_RUN_OUTCOME_STARTING  # leased still
    r.clock.now = T0 + 6  # the lease lapsed
    runs = await ended_runs(r, schedule.schedule_id, 1)
    assert runs[0].turn_id == turn_id
    assert runs[0].outcome == api.SCHEDULE_RUN_OUTCOME_COMPLETED
    assert await accepted_turns(r, session_id) == [turn_id]  # adopted, not started again


# --------------------------------------------------------------------------- looks at the store


async def test_schedulers_look_at_the_store_only_when_something_can_be_due(replicas: Replicas) -> None:
    """Idle, a scheduler's ticks only read its clock; it looks at the store when a time it knows of comes
    (a schedule made through it) and at least every look_s (what other replicas wrote)."""
    r = replicas
    first, second = (scheduler_of(g) for g in r.gateways)
    assert first.look_s == SETTINGS.scheduler_lease_s  # under half the grace
    await r.ticks()
    looks = (first.looks, second.looks)
    await r.ticks(20)
    assert (first.looks, second.looks) == looks  # nothing due, no lease to lapse: no store call
    r.clock.now = T0 + first.look_s
    await until(lambda: first.looks > looks[0] and second.looks > looks[1])
    await r.ticks(2)  # those looks are over
    looks = (first.looks, second.looks)

    spec = api.ScheduleSpec(message="once")
    spec.at.FromSeconds(int(T0 + first.look_s + 2))  # before either's next bounded look
    schedule = await create(r, spec)  # through the first gateway: it looks when the schedule fires
    r.clock.now = T0 + first.look_s + 2
    (run,) = await ended_runs(r, schedule.schedule_id, 1)
    assert run.trigger == api.SCHEDULE_RUN_TRIGGER_CLOCK
    assert run.outcome == api.SCHEDULE_RUN_OUTCOME_COMPLETED, run.error
    assert second.looks == looks[1]  # the other replica sees the schedule at its next bounded look


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_a_schedule_fires_on_time_with_a_tick_an_hour_long(kind: str, request: pytest.FixtureRequest) -> None:
    """On the real clock, with hour-long ticks: creating a schedule wakes its gateway's scheduler, which
    sleeps until the schedule fires rather than until its next tick."""
    settings = SETTINGS.model_copy(update={"scheduler_tick_s": 3600.0})
    if kind == "redis":
        update = {"redis_url": request.getfixturevalue("redis_url"), "redis_key_prefix": f"schedidle{id(request)}:"}
        settings = settings.model_copy(update=update)
    suite = await start_suite(settings)
    channel = grpc.aio.insecure_channel(suite.gateway_address)
    try:
        await until(lambda: scheduler_of(suite.servers["gateway"]).looks >= 1)  # the look at start
        stub = schedules_pb2_grpc.ScheduleServiceStub(channel)
        spec = api.ScheduleSpec(message="soon")
        spec.at.FromMilliseconds(int((time.time() + 1) * 1000))
        created = await stub.CreateSchedule(api.CreateScheduleRequest(spec=spec), timeout=5)
        request_runs = api.ListScheduleRunsRequest(schedule_id=created.schedule.schedule_id)

        async def ended() -> list[api.ScheduleRun] | None:
            runs = list((await stub.ListScheduleRuns(request_runs, timeout=5)).runs)
            return runs if runs and runs[0].outcome >= api.SCHEDULE_RUN_OUTCOME_COMPLETED else None

        (run,) = await until_async(ended)
        assert run.trigger == api.SCHEDULE_RUN_TRIGGER_CLOCK
        assert run.outcome == api.SCHEDULE_RUN_OUTCOME_COMPLETED, run.error
    finally:
        await channel.close()
        await suite.stop(0)


# --------------------------------------------------------------------------- the API


async def test_bad_schedules_are_refused_naming_the_field(replicas: Replicas) -> None:
    r = replicas
    cases = [
        (cron("61 * * * *"), "spec.cron.expression"),
        (cron("* * * * * *"), "spec.cron.expression"),  # every second: under the 10 s minimum
        (
            api.ScheduleSpec(cron=api.Cron(expression="0 9 * * *", time_zone="Mars/Olympus"), message="x"),
            "spec.cron.time_zone",
        ),
        (api.ScheduleSpec(interval_seconds=5, message="x"), "spec.interval_seconds"),
        (api.ScheduleSpec(message="x"), "spec.timing"),
        (cron("0 9 * * *", message=""), "spec.message"),
        (cron("0 9 * * *", agent_version="v2"), "spec.agent_version"),
        (cron("0 9 * * *", session_id="s1"), "spec.session_id"),
    ]
    past = api.ScheduleSpec(message="x")
    past.at.FromSeconds(int(T0) - 1)
    cases.append((past, "spec.at"))
    for spec, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await create(r, spec)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (field, caught.value.details())
        _, violations = status_details(caught.value)
        assert field in [f for f, _ in violations], (field, violations)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await create(r, cron("0 9 * * *", agent="no-such-agent"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    info, _ = status_details(caught.value)
    assert info is not None and info.reason == "AGENT_NOT_FOUND"


async def test_pause_resume_trigger_continue_and_delete(replicas: Replicas) -> None:
    r = replicas
    schedule = await create(
        r, api.ScheduleSpec(interval_seconds=60, message="ping", session_mode=api.SCHEDULE_SESSION_MODE_CONTINUE)
    )
    paused = await r.schedules().PauseSchedule(api.PauseScheduleRequest(schedule_id=schedule.schedule_id), timeout=5)
    assert paused.schedule.state == api.SCHEDULE_STATE_PAUSED
    r.clock.now = T0 + 125  # two ticks fall while paused
    await r.ticks()
    assert await runs_of(r, schedule.schedule_id) == []
    resumed = await r.schedules(1).ResumeSchedule(
        api.ResumeScheduleRequest(schedule_id=schedule.schedule_id), timeout=5
    )
    assert resumed.schedule.state == api.SCHEDULE_STATE_ACTIVE
    assert resumed.schedule.next_fire_time.ToSeconds() == T0 + 180  # from now on

    triggered = await r.schedules(1).TriggerSchedule(
        api.TriggerScheduleRequest(schedule_id=schedule.schedule_id), timeout=5
    )
    assert triggered.run.trigger == api.SCHEDULE_RUN_TRIGGER_MANUAL
    await ended_runs(r, schedule.schedule_id, 1)
    r.clock.now = T0 + 180
    runs = await ended_runs(r, schedule.schedule_id, 2)
    assert {x.session_id for x in runs} == {schedule.session_id}  # both continue the schedule's session
    assert all(x.outcome == api.SCHEDULE_RUN_OUTCOME_COMPLETED for x in runs), runs
    assert sorted(await accepted_turns(r, schedule.session_id)) == sorted(x.turn_id for x in runs)

    listed = await r.schedules().ListSchedules(api.ListSchedulesRequest(page_size=1), timeout=5)
    assert [s.schedule_id for s in listed.schedules] == [schedule.schedule_id]
    deleted = await r.schedules().DeleteSchedule(api.DeleteScheduleRequest(schedule_id=schedule.schedule_id), timeout=5)
    assert deleted.deleted
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await r.schedules(1).GetSchedule(api.GetScheduleRequest(schedule_id=schedule.schedule_id), timeout=5)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_schedule_follows_a_stored_agents_alias_at_each_run(replicas: Replicas) -> None:
    """agent_version names a version or alias of a tenant's agent, resolved when each run opens its session."""
    r = replicas
    agents = agents_grpc.AgentServiceStub(r._channel(r.gateways[0].address))
    definition = struct_pb2.Struct()
    definition.update({"model": "local", "tools": ["calculator"], "system_prompt": "You report."})
    await agents.CreateAgent(agents_api.CreateAgentRequest(name="reporter", definition=definition), timeout=5)
    await agents.UpdateAgent(agents_api.UpdateAgentRequest(name="reporter", definition=definition), timeout=5)
    await agents.SetAgentAlias(agents_api.SetAgentAliasRequest(name="reporter", alias="prod", version=1), timeout=5)
    schedule = await create(r, cron("0 9 * * *", agent="reporter", agent_version="prod", message="What is 2 * 3?"))

    async def run_version(k: int) -> int:
        trigger = api.TriggerScheduleRequest(schedule_id=schedule.schedule_id)
        started = (await r.schedules().TriggerSchedule(trigger, timeout=5)).run
        run = next(x for x in await ended_runs(r, schedule.schedule_id, k) if x.run_id == started.run_id)
        assert run.outcome == api.SCHEDULE_RUN_OUTCOME_COMPLETED, run.error
        got = await r.gateway().GetSession(gateway_pb2.GetSessionRequest(session_id=run.session_id), timeout=5)
        return int(got.session.agent_version)

    assert await run_version(1) == 1
    await agents.SetAgentAlias(agents_api.SetAgentAliasRequest(name="reporter", alias="prod", version=2), timeout=5)
    assert await run_version(2) == 2  # the moved alias reaches the next run
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await create(r, cron("0 9 * * *", agent="reporter", agent_version="nightly"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND and "no alias 'nightly'" in (caught.value.details() or "")
