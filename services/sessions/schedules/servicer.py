"""cogmesh.sessions.v1.ScheduleStoreService: the schedule store over gRPC, for the gateways' schedulers."""

from __future__ import annotations

from typing import Any

from cogmesh.sessions.v1 import schedules_pb2 as pb
from cogmesh.sessions.v1 import schedules_pb2_grpc
from services.kit.config import Settings
from services.kit.errors import Violations
from services.kit.logging import log
from services.kit.protos import MAX_ID
from services.kit.redis_pool import Client
from services.kit.redis_url import redact
from services.sessions.schedules.redis_store import RedisScheduleStore
from services.sessions.schedules.store import MemoryScheduleStore, ScheduleStore, next_token, page_bounds

MAX_PAGE = 1000
MAX_LIMIT = 10_000
DEFAULT_LIMIT = 1000


def open_store(settings: Settings, client: Client | None = None) -> ScheduleStore:
    """Redis when COGMESH_REDIS_URL is set (the sessions' own Redis, same key prefix), else memory.

    `client`: a Redis client already open on that URL (another store's) to share rather than open a
    pool of its own; its owner closes it."""
    if not settings.redis_url:
        return MemoryScheduleStore()
    log.info("schedule store", kind="redis", url=redact(settings.redis_url), shared_client=client is not None)
    if client is not None:
        return RedisScheduleStore(client, settings.redis_key_prefix, owns_client=False)
    return RedisScheduleStore.from_url(settings.redis_url, settings.redis_key_prefix, settings.redis_timeout_s)


def _ids(tenant_id: str, schedule_id: str, problems: Violations, prefix: str = "") -> None:
    for name, value in (("tenant_id", tenant_id), ("schedule_id", schedule_id)):
        problems.require(value, prefix + name)
        problems.check(len(value) <= MAX_ID, prefix + name, f"must be at most {MAX_ID} characters")


def _page(page_size: int, problems: Violations) -> None:
    problems.check(0 <= page_size <= MAX_PAGE, "page_size", f"must be between 0 and {MAX_PAGE}")


def _limit(limit: int, problems: Violations) -> int:
    problems.check(0 <= limit <= MAX_LIMIT, "limit", f"must be between 0 and {MAX_LIMIT}")
    return limit or DEFAULT_LIMIT


def _run(run: pb.StoredScheduleRun, problems: Violations) -> None:
    _ids(run.tenant_id, run.schedule_id, problems, "run.")
    problems.require(run.run_id, "run.run_id")
    problems.check(len(run.run_id) <= MAX_ID, "run.run_id", f"must be at most {MAX_ID} characters")


class ScheduleStoreServicer(schedules_pb2_grpc.ScheduleStoreServiceServicer):
    def __init__(self, store: ScheduleStore):
        self.store = store

    async def CreateSchedule(self, request: pb.CreateScheduleRequest, context: Any) -> pb.CreateScheduleResponse:
        problems = Violations()
        _ids(request.schedule.tenant_id, request.schedule.schedule_id, problems, "schedule.")
        problems.raise_if_any()
        return pb.CreateScheduleResponse(schedule=await self.store.create(request.schedule))

    async def GetSchedule(self, request: pb.GetScheduleRequest, context: Any) -> pb.GetScheduleResponse:
        problems = Violations()
        _ids(request.tenant_id, request.schedule_id, problems)
        problems.raise_if_any()
        return pb.GetScheduleResponse(schedule=await self.store.get(request.tenant_id, request.schedule_id))

    async def ListSchedules(self, request: pb.ListSchedulesRequest, context: Any) -> pb.ListSchedulesResponse:
        problems = Violations()
        problems.require(request.tenant_id, "tenant_id")
        _page(request.page_size, problems)
        problems.raise_if_any()
        offset, size = page_bounds(request.page_size, request.page_token)
        found, total = await self.store.list_schedules(request.tenant_id, offset, size)
        return pb.ListSchedulesResponse(schedules=found, next_page_token=next_token(offset, size, total))

    async def UpdateSchedule(self, request: pb.UpdateScheduleRequest, context: Any) -> pb.UpdateScheduleResponse:
        problems = Violations()
        _ids(request.schedule.tenant_id, request.schedule.schedule_id, problems, "schedule.")
        run = request.run if request.HasField("run") else None
        if run is not None:
            _run(run, problems)
            problems.check(
                (run.tenant_id, run.schedule_id) == (request.schedule.tenant_id, request.schedule.schedule_id),
                "run.schedule_id",
                "must be the schedule's",
            )
        problems.raise_if_any()
        schedule, added = await self.store.update(request.schedule, run)
        return pb.UpdateScheduleResponse(schedule=schedule, run=added)

    async def DeleteSchedule(self, request: pb.DeleteScheduleRequest, context: Any) -> pb.DeleteScheduleResponse:
        problems = Violations()
        _ids(request.tenant_id, request.schedule_id, problems)
        problems.raise_if_any()
        return pb.DeleteScheduleResponse(deleted=await self.store.delete(request.tenant_id, request.schedule_id))

    async def ListDueSchedules(self, request: pb.ListDueSchedulesRequest, context: Any) -> pb.ListDueSchedulesResponse:
        problems = Violations()
        limit = _limit(request.limit, problems)
        problems.raise_if_any()
        return pb.ListDueSchedulesResponse(schedules=await self.store.due(request.due_ms, limit))

    async def PutScheduleRun(self, request: pb.PutScheduleRunRequest, context: Any) -> pb.PutScheduleRunResponse:
        problems = Violations()
        _run(request.run, problems)
        problems.raise_if_any()
        return pb.PutScheduleRunResponse(run=await self.store.put_run(request.run))

    async def ListScheduleRuns(self, request: pb.ListScheduleRunsRequest, context: Any) -> pb.ListScheduleRunsResponse:
        problems = Violations()
        _ids(request.tenant_id, request.schedule_id, problems)
        _page(request.page_size, problems)
        problems.raise_if_any()
        offset, size = page_bounds(request.page_size, request.page_token)
        runs, total = await self.store.list_runs(request.tenant_id, request.schedule_id, offset, size)
        return pb.ListScheduleRunsResponse(runs=runs, next_page_token=next_token(offset, size, total))

    async def ListStaleScheduleRuns(
        self, request: pb.ListStaleScheduleRunsRequest, context: Any
    ) -> pb.ListStaleScheduleRunsResponse:
        problems = Violations()
        limit = _limit(request.limit, problems)
        problems.raise_if_any()
        return pb.ListStaleScheduleRunsResponse(runs=await self.store.stale(request.now_ms, limit))
