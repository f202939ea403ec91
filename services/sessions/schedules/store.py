"""The schedule store: schedules and runs as records, every write a compare-and-set on a version.

The store decides nothing about time. The gateways' schedulers compute fire times and
leases on their clocks and write what they decided under the version they read; of two
replicas writing the same version one wins and the other gets Conflict (ABORTED). A tick is
claimed by the write that moves the schedule's next fire time past it, and that same write
adds the tick's run: so each tick has one run, whoever claimed it.

Two indexes answer the schedulers' questions across tenants: which schedules are due (next
fire time, unless paused) and which runs are stale (not ended, their holder's lease over).
"""

from __future__ import annotations

from typing import Protocol

import grpc

from cogmesh.sessions.v1 import schedules_pb2 as pb
from services.kit.errors import CogmeshError, InvalidArgument, NotFound

RUNS_KEPT = 1_000  # runs remembered per schedule; the oldest go first
DEFAULT_PAGE = 50


class Conflict(CogmeshError):
    """The record changed since it was read: another replica wrote it first."""

    code = grpc.StatusCode.ABORTED


class AlreadyExists(CogmeshError):
    code = grpc.StatusCode.ALREADY_EXISTS


def schedule_not_found(schedule_id: str) -> NotFound:
    return NotFound(f"no schedule {schedule_id!r}", metadata={"schedule_id": schedule_id})


def page_bounds(page_size: int, page_token: str) -> tuple[int, int]:
    """(offset, size) of a page; a token is the offset where the page starts."""
    size = page_size or DEFAULT_PAGE
    try:
        offset = int(page_token or 0)
    except ValueError:
        offset = -1
    if offset < 0:
        raise InvalidArgument([("page_token", "is not a token this service gave")])
    return offset, size


def next_token(offset: int, size: int, total: int) -> str:
    return str(offset + size) if offset + size < total else ""


def is_due(schedule: pb.StoredSchedule, due_ms: int) -> bool:
    return not schedule.paused and 0 < schedule.next_fire_ms <= due_ms


def is_stale(run: pb.StoredScheduleRun, now_ms: int) -> bool:
    return not run.ended and run.lease_expire_ms <= now_ms


class ScheduleStore(Protocol):
    async def create(self, schedule: pb.StoredSchedule) -> pb.StoredSchedule: ...
    async def get(self, tenant_id: str, schedule_id: str) -> pb.StoredSchedule: ...
    async def list_schedules(self, tenant_id: str, offset: int, size: int) -> tuple[list[pb.StoredSchedule], int]:
        """A page of the tenant's schedules, oldest first, and how many it has."""
        ...

    async def update(
        self, schedule: pb.StoredSchedule, run: pb.StoredScheduleRun | None
    ) -> tuple[pb.StoredSchedule, pb.StoredScheduleRun | None]:
        """Write the schedule if its version is the stored one; add `run` with it unless one of its id exists."""
        ...

    async def delete(self, tenant_id: str, schedule_id: str) -> bool: ...
    async def due(self, due_ms: int, limit: int) -> list[pb.StoredSchedule]: ...
    async def put_run(self, run: pb.StoredScheduleRun) -> pb.StoredScheduleRun: ...
    async def list_runs(
        self, tenant_id: str, schedule_id: str, offset: int, size: int
    ) -> tuple[list[pb.StoredScheduleRun], int]: ...
    async def stale(self, now_ms: int, limit: int) -> list[pb.StoredScheduleRun]: ...
    async def close(self) -> None: ...


def _copy(record: pb.StoredSchedule) -> pb.StoredSchedule:
    copied = pb.StoredSchedule()
    copied.CopyFrom(record)
    return copied


def _copy_run(record: pb.StoredScheduleRun) -> pb.StoredScheduleRun:
    copied = pb.StoredScheduleRun()
    copied.CopyFrom(record)
    return copied


class MemoryScheduleStore:
    """One process's schedules: the default, for a suite whose sessions live in memory too.

    Every method runs without an await in between its reads and writes, so each is atomic
    on the event loop."""

    def __init__(self) -> None:
        self._schedules: dict[tuple[str, str], pb.StoredSchedule] = {}
        self._runs: dict[tuple[str, str], dict[str, pb.StoredScheduleRun]] = {}
        self._open: set[tuple[str, str, str]] = set()  # runs not ended

    def _found(self, tenant_id: str, schedule_id: str) -> pb.StoredSchedule:
        found = self._schedules.get((tenant_id, schedule_id))
        if found is None:
            raise schedule_not_found(schedule_id)
        return found

    async def create(self, schedule: pb.StoredSchedule) -> pb.StoredSchedule:
        key = (schedule.tenant_id, schedule.schedule_id)
        if key in self._schedules:
            raise AlreadyExists(f"schedule {schedule.schedule_id!r} exists", metadata={"schedule_id": key[1]})
        stored = _copy(schedule)
        stored.version = 1
        self._schedules[key] = stored
        self._runs[key] = {}
        return _copy(stored)

    async def get(self, tenant_id: str, schedule_id: str) -> pb.StoredSchedule:
        return _copy(self._found(tenant_id, schedule_id))

    async def list_schedules(self, tenant_id: str, offset: int, size: int) -> tuple[list[pb.StoredSchedule], int]:
        mine = sorted(
            (s for (tenant, _), s in self._schedules.items() if tenant == tenant_id),
            key=lambda s: (s.create_ms, s.schedule_id),
        )
        return [_copy(s) for s in mine[offset : offset + size]], len(mine)

    async def update(
        self, schedule: pb.StoredSchedule, run: pb.StoredScheduleRun | None
    ) -> tuple[pb.StoredSchedule, pb.StoredScheduleRun | None]:
        key = (schedule.tenant_id, schedule.schedule_id)
        stored = self._found(*key)
        if stored.version != schedule.version:
            raise Conflict(f"schedule {key[1]!r} changed (version {stored.version}, not {schedule.version})")
        written = _copy(schedule)
        written.version = stored.version + 1
        self._schedules[key] = written
        added = None
        if run is not None and run.run_id not in self._runs[key]:
            added = self._keep_run(run, 1)
        return _copy(written), added

    def _keep_run(self, run: pb.StoredScheduleRun, version: int) -> pb.StoredScheduleRun:
        key = (run.tenant_id, run.schedule_id)
        stored = _copy_run(run)
        stored.version = version
        runs = self._runs[key]
        runs[run.run_id] = stored
        run_key = (*key, run.run_id)
        if stored.ended:
            self._open.discard(run_key)
        else:
            self._open.add(run_key)
        if len(runs) > RUNS_KEPT:
            oldest = min(runs.values(), key=lambda r: (r.fire_ms, r.run_id))
            del runs[oldest.run_id]
            self._open.discard((*key, oldest.run_id))
        return _copy_run(stored)

    async def delete(self, tenant_id: str, schedule_id: str) -> bool:
        key = (tenant_id, schedule_id)
        if self._schedules.pop(key, None) is None:
            return False
        for run_id in self._runs.pop(key, {}):
            self._open.discard((*key, run_id))
        return True

    async def due(self, due_ms: int, limit: int) -> list[pb.StoredSchedule]:
        found = sorted((s for s in self._schedules.values() if is_due(s, due_ms)), key=lambda s: s.next_fire_ms)
        return [_copy(s) for s in found[:limit]]

    async def put_run(self, run: pb.StoredScheduleRun) -> pb.StoredScheduleRun:
        runs = self._runs.get((run.tenant_id, run.schedule_id))
        if runs is None:
            raise schedule_not_found(run.schedule_id)
        stored = runs.get(run.run_id)
        version = stored.version if stored is not None else 0
        if version != run.version:
            raise Conflict(f"run {run.run_id!r} changed (version {version}, not {run.version})")
        return self._keep_run(run, version + 1)

    async def list_runs(
        self, tenant_id: str, schedule_id: str, offset: int, size: int
    ) -> tuple[list[pb.StoredScheduleRun], int]:
        runs = self._runs.get((tenant_id, schedule_id))
        if runs is None:
            raise schedule_not_found(schedule_id)
        newest = sorted(runs.values(), key=lambda r: (r.fire_ms, r.run_id), reverse=True)
        return [_copy_run(r) for r in newest[offset : offset + size]], len(newest)

    async def stale(self, now_ms: int, limit: int) -> list[pb.StoredScheduleRun]:
        runs = (self._runs[(t, s)][r] for t, s, r in self._open)
        found = sorted((r for r in runs if is_stale(r, now_ms)), key=lambda r: r.lease_expire_ms)
        return [_copy_run(r) for r in found[:limit]]

    async def close(self) -> None:
        return None
