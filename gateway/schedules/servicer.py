"""cogmesh.gateway.v1.ScheduleService: schedules of the caller's tenant, on the gateway's port.

Thin: checks the request (every problem named by its field), writes the schedule to the
sessions service's schedule store, and leaves the ticks to the scheduler (scheduler.py).
A key that pins scope values sees only the schedules whose scope holds them, as for sessions.

Every call is authenticated and rate-limited as GatewayService's are, by the gateway's guard
(gateway/guard.py PROTECTED_PREFIXES).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import grpc

from cogmesh.common.v1 import errors_pb2
from cogmesh.gateway.v1 import schedules_pb2 as api
from cogmesh.gateway.v1 import schedules_pb2_grpc
from cogmesh.sessions.v1 import schedules_pb2 as store_pb
from cogmesh.sessions.v1 import sessions_pb2
from gateway import auth
from gateway.schedules import timing
from gateway.schedules.scheduler import Scheduler, ms, run_to_api, schedule_to_api, spec_of
from services.kit.dependencies import ScheduleStoreClient, SessionsClient
from services.kit.errors import DependencyError, NotFound, Unavailable, Violations
from services.lib import scope as scopes

UPDATE_TRIES = 5  # a pause or resume racing a tick's claim writes again over the claim


def _not_found(schedule_id: str) -> NotFound:
    return NotFound(f"no schedule {schedule_id!r}", metadata={"schedule_id": schedule_id})


def agent_ref(spec: api.ScheduleSpec) -> str:
    """The agent as CreateSession takes it: "name", or "name@<version or alias>" for a stored agent."""
    name = spec.agent or "default"
    return f"{name}@{spec.agent_version}" if spec.agent_version else name


class ScheduleServicer(schedules_pb2_grpc.ScheduleServiceServicer):
    def __init__(self, scheduler: Scheduler):
        self.scheduler = scheduler
        self.clients, self.agents = scheduler.clients, scheduler.agents
        self.sessions = SessionsClient.of(self.clients)

    @property
    def store(self) -> ScheduleStoreClient:
        return self.scheduler.store

    async def _get(self, schedule_id: str) -> store_pb.StoredSchedule:
        """The caller's schedule, or NOT_FOUND exactly as for one that does not exist."""
        principal = auth.current.get()
        request = store_pb.GetScheduleRequest(tenant_id=principal.tenant_id, schedule_id=schedule_id)
        try:
            reply = await self.store.GetSchedule(request)
        except DependencyError as exc:
            if exc.status_code == grpc.StatusCode.NOT_FOUND:
                raise _not_found(schedule_id) from exc
            raise
        if not scopes.holds(spec_of(reply.schedule).scope, principal.pinned_scope):
            raise _not_found(schedule_id)
        return reply.schedule

    async def _update(
        self, schedule_id: str, change: Callable[[store_pb.StoredSchedule], None]
    ) -> store_pb.StoredSchedule:
        for _ in range(UPDATE_TRIES):
            schedule = await self._get(schedule_id)
            change(schedule)
            try:
                reply = await self.store.UpdateSchedule(store_pb.UpdateScheduleRequest(schedule=schedule))
            except DependencyError as exc:
                if exc.status_code == grpc.StatusCode.ABORTED:
                    continue  # a tick was claimed meanwhile: read it again
                if exc.status_code == grpc.StatusCode.NOT_FOUND:
                    raise _not_found(schedule_id) from exc
                raise
            return reply.schedule
        raise Unavailable(f"schedule {schedule_id!r} kept changing under this call; try again")

    # ------------------------------------------------------------------ create

    async def _check(self, spec: api.ScheduleSpec, now: float) -> dict[str, str]:
        """Every problem of the spec beyond its fields' rules (schedules.proto: checked before), each naming its
        field; the sessions' scope (with the key's pins)."""
        problems = Violations()
        timing.check(spec, now, problems)
        problems.check(bool(spec.message.strip()), "spec.message", "must not be blank")
        problems.check(
            not spec.session_id or spec.session_mode == api.SCHEDULE_SESSION_MODE_CONTINUE,
            "spec.session_id",
            "is only for SCHEDULE_SESSION_MODE_CONTINUE",
        )
        problems.raise_if_any()
        try:
            agent, _ = await self.scheduler.stored.resolve(
                auth.current.get().tenant_id,
                agent_ref(spec),
                "spec.agent_version" if spec.agent_version else "spec.agent",
            )
        except NotFound as exc:
            raise NotFound(
                f"spec.agent: {exc.message}",
                reason=errors_pb2.ERROR_REASON_AGENT_NOT_FOUND,
                metadata={"agent": agent_ref(spec)},
            ) from exc
        problems.check(
            agent.is_primary, "spec.agent", f"{agent.name!r} is a subagent: only other agents delegate to it"
        )
        problems.raise_if_any()
        return auth.current.get().session_scope(spec.scope, "spec.scope")

    async def _session(self, spec: api.ScheduleSpec) -> str:
        """A continuing schedule's session: the caller's one it names, or a new one."""
        principal = auth.current.get()
        if spec.session_id:
            reply = await self.sessions.GetSession(
                sessions_pb2.GetSessionRequest(tenant_id=principal.tenant_id, session_id=spec.session_id)
            )
            principal.check_sees(reply.session)
            return spec.session_id
        agent = self.agents.get(spec.agent or "default")
        created = await self.sessions.CreateSession(
            sessions_pb2.CreateSessionRequest(
                tenant_id=principal.tenant_id,
                user_id=spec.user_id,
                agent=agent.name,
                role_id=agent.default_role,
                scope=spec.scope,
            )
        )
        return str(created.session.session_id)

    async def CreateSchedule(self, request: api.CreateScheduleRequest, context: Any) -> api.CreateScheduleResponse:
        now = self.scheduler.clock()
        spec = api.ScheduleSpec()
        spec.CopyFrom(request.spec)
        scope = await self._check(spec, now)
        spec.scope.clear()
        spec.scope.update(scope)
        if not spec.agent:
            spec.agent = "default"
        schedule = store_pb.StoredSchedule(
            tenant_id=auth.current.get().tenant_id,
            schedule_id=uuid.uuid4().hex[:20],
            create_ms=ms(now),
        )
        following = timing.of(spec, schedule.create_ms / 1000).next_after(now)
        schedule.next_fire_ms = ms(following) if following is not None else 0
        if spec.session_mode == api.SCHEDULE_SESSION_MODE_CONTINUE:
            schedule.session_id = await self._session(spec)
        schedule.spec = spec.SerializeToString()
        reply = await self.store.CreateSchedule(store_pb.CreateScheduleRequest(schedule=schedule))
        self.scheduler.expect(reply.schedule.next_fire_ms)  # other replicas see it at their next look
        return api.CreateScheduleResponse(schedule=schedule_to_api(reply.schedule))

    # ------------------------------------------------------------------ read

    async def GetSchedule(self, request: api.GetScheduleRequest, context: Any) -> api.GetScheduleResponse:
        return api.GetScheduleResponse(schedule=schedule_to_api(await self._get(request.schedule_id)))

    async def ListSchedules(self, request: api.ListSchedulesRequest, context: Any) -> api.ListSchedulesResponse:
        principal = auth.current.get()
        reply = await self.store.ListSchedules(
            store_pb.ListSchedulesRequest(
                tenant_id=principal.tenant_id, page_size=request.page_size, page_token=request.page_token
            )
        )
        # A key with pinned scope values sees its own schedules only (a page may then hold fewer).
        mine = [s for s in reply.schedules if scopes.holds(spec_of(s).scope, principal.pinned_scope)]
        return api.ListSchedulesResponse(
            schedules=[schedule_to_api(s) for s in mine], next_page_token=reply.next_page_token
        )

    async def ListScheduleRuns(
        self, request: api.ListScheduleRunsRequest, context: Any
    ) -> api.ListScheduleRunsResponse:
        schedule = await self._get(request.schedule_id)
        reply = await self.store.ListScheduleRuns(
            store_pb.ListScheduleRunsRequest(
                tenant_id=schedule.tenant_id,
                schedule_id=schedule.schedule_id,
                page_size=request.page_size,
                page_token=request.page_token,
            )
        )
        return api.ListScheduleRunsResponse(
            runs=[run_to_api(r) for r in reply.runs], next_page_token=reply.next_page_token
        )

    # ------------------------------------------------------------------ change

    async def PauseSchedule(self, request: api.PauseScheduleRequest, context: Any) -> api.PauseScheduleResponse:

        def pause(schedule: store_pb.StoredSchedule) -> None:
            schedule.paused = True

        return api.PauseScheduleResponse(schedule=schedule_to_api(await self._update(request.schedule_id, pause)))

    async def ResumeSchedule(self, request: api.ResumeScheduleRequest, context: Any) -> api.ResumeScheduleResponse:
        now = self.scheduler.clock()

        def resume(schedule: store_pb.StoredSchedule) -> None:
            # From now on: ticks that fell while it was paused are not run.
            following = timing.of(spec_of(schedule), schedule.create_ms / 1000).next_after(now)
            schedule.paused = False
            schedule.next_fire_ms = ms(following) if following is not None else 0

        resumed = await self._update(request.schedule_id, resume)
        self.scheduler.expect(resumed.next_fire_ms)
        return api.ResumeScheduleResponse(schedule=schedule_to_api(resumed))

    async def DeleteSchedule(self, request: api.DeleteScheduleRequest, context: Any) -> api.DeleteScheduleResponse:
        try:
            schedule = await self._get(request.schedule_id)
        except NotFound:
            return api.DeleteScheduleResponse(deleted=False)
        reply = await self.store.DeleteSchedule(
            store_pb.DeleteScheduleRequest(tenant_id=schedule.tenant_id, schedule_id=schedule.schedule_id)
        )
        return api.DeleteScheduleResponse(deleted=reply.deleted)

    async def TriggerSchedule(self, request: api.TriggerScheduleRequest, context: Any) -> api.TriggerScheduleResponse:
        schedule = await self._get(request.schedule_id)
        return api.TriggerScheduleResponse(run=run_to_api(await self.scheduler.trigger(schedule)))
