"""cogmesh.sessions.v1.ScheduleStoreService: the schedule store over gRPC, for the gateways' schedulers.

The requests' field rules (schedules.proto: ids, page sizes, limits) are checked before the servicer runs;
what is left here is across fields (a run added with a write is the schedule's).
"""

from __future__ import annotations

from typing import Any

from cogmesh.sessions.v1 import schedules_pb2 as pb
from cogmesh.sessions.v1 import schedules_pb2_grpc
from services.kit.config import Settings
from services.kit.errors import Violations
from services.kit.logging import log
from services.kit.redis_pool import Client
from services.kit.redis_url import redact
from services.sessions.schedules.redis_store import RedisScheduleStore
from services.sessions.schedules.store import MemoryScheduleStore, ScheduleStore, next_token, page_bounds

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


class ScheduleStoreServicer(schedules_pb2_grpc.ScheduleStoreServiceServicer):
    def __init__(self, store: ScheduleStore):
        self.store = store

    async def CreateSchedule(self, request: pb.CreateScheduleRequest, context: Any) -> pb.CreateScheduleResponse:
        return pb.CreateScheduleResponse(schedule=await self.store.create(request.schedule))

    async def GetSchedule(self, request: pb.GetScheduleRequest, context: Any) -> pb.GetScheduleResponse:
        return pb.GetScheduleResponse(schedule=await self.store.get(request.tenant_id, request.schedule_id))

    async def ListSchedules(self, request: pb.ListSchedulesRequest, context: Any) -> pb.ListSchedulesResponse:
        offset, size = page_bounds(request.page_size, request.page_token)
        found, total = await self.store.list_schedules(request.tenant_id, offset, size)
        return pb.ListSchedulesResponse(schedules=found, next_page_token=next_token(offset, size, total))

    async def UpdateSchedule(self, request: pb.UpdateScheduleRequest, context: Any) -> pb.UpdateScheduleResponse:
        problems = Violations()
        run = request.run if request.HasField("run") else None
        if run is not None:
            problems.check(
                (run.tenant_id, run.schedule_id) == (request.schedule.tenant_id, request.schedule.schedule_id),
                "run.schedule_id",
                "must be the schedule's",
            )
        problems.raise_if_any()
        schedule, added = await self.store.update(request.schedule, run)
        return pb.UpdateScheduleResponse(schedule=schedule, run=added)

    async def DeleteSchedule(self, request: pb.DeleteScheduleRequest, context: Any) -> pb.DeleteScheduleResponse:
        return pb.DeleteScheduleResponse(deleted=await self.store.delete(request.tenant_id, request.schedule_id))

    async def ListDueSchedules(self, request: pb.ListDueSchedulesRequest, context: Any) -> pb.ListDueSchedulesResponse:
        return pb.ListDueSchedulesResponse(
            schedules=await self.store.due(request.due_ms, request.limit or DEFAULT_LIMIT)
        )

    async def PutScheduleRun(self, request: pb.PutScheduleRunRequest, context: Any) -> pb.PutScheduleRunResponse:
        return pb.PutScheduleRunResponse(run=await self.store.put_run(request.run))

    async def ListScheduleRuns(self, request: pb.ListScheduleRunsRequest, context: Any) -> pb.ListScheduleRunsResponse:
        offset, size = page_bounds(request.page_size, request.page_token)
        runs, total = await self.store.list_runs(request.tenant_id, request.schedule_id, offset, size)
        return pb.ListScheduleRunsResponse(runs=runs, next_page_token=next_token(offset, size, total))

    async def ListStaleScheduleRuns(
        self, request: pb.ListStaleScheduleRunsRequest, context: Any
    ) -> pb.ListStaleScheduleRunsResponse:
        return pb.ListStaleScheduleRunsResponse(
            runs=await self.store.stale(request.now_ms, request.limit or DEFAULT_LIMIT)
        )
