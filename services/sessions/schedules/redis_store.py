"""The Redis schedule store: every replica of the sessions service shares it (standalone, Sentinel or Cluster).

A schedule's keys share one hash tag, so each write is one Lua script on one slot: the
schedule's record and version (`rec`), its runs (`runs`), their versions (`runver`) and
their order by fire time (`order`). A claimed tick's run is added by the same script that
moves the schedule's next fire time, so a tick has one run whatever the replicas do.

The indexes that span schedules live in slots of their own and are kept in separate
steps around each script: the tenant's list, the due index (next fire time of each schedule
that is not paused) and the stale index (lease expiry of each run not ended). An index may be
early (a score at or before the truth) but never late: before a write a score may only move
earlier (ZADD LT), after it the exact score is set. A step lost to a crash therefore leaves
an early entry, which the next query for it finds and puts right from the record (`due`,
`stale`), so no tick is ever missed for an index, only looked at once more.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable
from typing import Any, TypeVar

from cogmesh.sessions.v1 import schedules_pb2 as pb
from services.kit import lua
from services.kit.redis_pool import Client, pooled_client, unless_unavailable
from services.kit.redis_url import check_prefix
from services.sessions.schedules.store import (
    RUNS_KEPT,
    AlreadyExists,
    Conflict,
    is_due,
    is_stale,
    schedule_not_found,
)

T = TypeVar("T")
FIX_ROUNDS = 10  # reads of an index past entries put right, per query: a `limit` of 1 still finds the first

# The scripts: services/sessions/schedules/lua/*.lua (each file's opening comments say what its KEYS and ARGV
# hold and it returns).
_LUA = lua.load("services.sessions.schedules")
_CREATE, _UPDATE, _PUT_RUN, _DELETE = _LUA["create"], _LUA["update"], _LUA["put_run"], _LUA["delete"]


def _tenant_hash(tenant_id: str) -> str:
    return hashlib.sha256(tenant_id.encode()).hexdigest()[:24]


class RedisScheduleStore:
    def __init__(self, client: Client, prefix: str = "cogmesh:", owns_client: bool = True):
        """`owns_client` False: the client is shared (another store's pool) and closed by its owner."""
        self._redis = client
        self._owns_client = owns_client
        self._prefix = check_prefix(prefix)
        self._due = f"{prefix}{{schedules-due}}:due"
        self._stale = f"{prefix}{{schedules-runs}}:stale"
        self._create = client.register_script(_CREATE)
        self._update = client.register_script(_UPDATE)
        self._put_run = client.register_script(_PUT_RUN)
        self._delete = client.register_script(_DELETE)

    @classmethod
    def from_url(cls, url: str, prefix: str, timeout_s: float) -> RedisScheduleStore:
        return cls(pooled_client(url, timeout_s, health_check_interval=15), prefix)

    # ----------------------------------------------------------------- keys

    def _keys(self, tenant_id: str, schedule_id: str) -> list[str]:
        # Schedule ids are the gateway's (letters, digits, '-', '_'); the tenant's part is hashed: no braces.
        base = f"{self._prefix}{{sched:{_tenant_hash(tenant_id)}:{schedule_id}}}"
        return [f"{base}:rec", f"{base}:runs", f"{base}:runver", f"{base}:order"]

    def _tenant_list(self, tenant_id: str) -> str:
        return f"{self._prefix}{{sched-t:{_tenant_hash(tenant_id)}}}:list"

    @staticmethod
    def _member(*parts: str) -> str:
        return json.dumps(parts)

    async def _call(self, call: Awaitable[T]) -> T:
        return await unless_unavailable(call, "schedule store")

    # ----------------------------------------------------------------- records

    async def _read(self, tenant_id: str, schedule_id: str) -> pb.StoredSchedule | None:
        reply: list[Any] = await self._call(self._redis.hmget(self._keys(tenant_id, schedule_id)[0], ["rec", "ver"]))
        rec, ver = reply
        if rec is None:
            return None
        schedule = pb.StoredSchedule.FromString(rec)
        schedule.version = int(ver)
        return schedule

    async def _read_runs(self, tenant_id: str, schedule_id: str, run_ids: list[str]) -> list[pb.StoredScheduleRun]:
        if not run_ids:
            return []
        keys = self._keys(tenant_id, schedule_id)
        records: list[Any] = await self._call(self._redis.hmget(keys[1], run_ids))
        versions: list[Any] = await self._call(self._redis.hmget(keys[2], run_ids))
        runs = []
        for record, version in zip(records, versions, strict=True):
            if record is not None and version is not None:
                run = pb.StoredScheduleRun.FromString(record)
                run.version = int(version)
                runs.append(run)
        return runs

    @staticmethod
    def _encoded(record: pb.StoredSchedule | pb.StoredScheduleRun) -> bytes:
        version = record.version
        record.ClearField("version")  # the script keeps the version beside the record
        try:
            return record.SerializeToString()
        finally:
            record.version = version

    async def _index_schedule(self, schedule: pb.StoredSchedule, earlier_only: bool) -> None:
        member = self._member(schedule.tenant_id, schedule.schedule_id)
        if schedule.paused or not schedule.next_fire_ms:
            if not earlier_only:
                await self._call(self._redis.zrem(self._due, member))
            return
        await self._call(self._redis.zadd(self._due, {member: schedule.next_fire_ms}, lt=earlier_only))

    async def _index_run(self, run: pb.StoredScheduleRun, earlier_only: bool) -> None:
        member = self._member(run.tenant_id, run.schedule_id, run.run_id)
        if run.ended:
            if not earlier_only:
                await self._call(self._redis.zrem(self._stale, member))
            return
        await self._call(self._redis.zadd(self._stale, {member: run.lease_expire_ms}, lt=earlier_only))

    # ----------------------------------------------------------------- the store

    async def create(self, schedule: pb.StoredSchedule) -> pb.StoredSchedule:
        await self._index_schedule(schedule, earlier_only=True)
        keys = self._keys(schedule.tenant_id, schedule.schedule_id)
        if not await self._call(self._create(keys=keys, args=[self._encoded(schedule)])):
            raise AlreadyExists(
                f"schedule {schedule.schedule_id!r} exists", metadata={"schedule_id": schedule.schedule_id}
            )
        await self._call(
            self._redis.zadd(self._tenant_list(schedule.tenant_id), {schedule.schedule_id: schedule.create_ms})
        )
        stored = pb.StoredSchedule()
        stored.CopyFrom(schedule)
        stored.version = 1
        return stored

    async def get(self, tenant_id: str, schedule_id: str) -> pb.StoredSchedule:
        found = await self._read(tenant_id, schedule_id)
        if found is None:
            raise schedule_not_found(schedule_id)
        return found

    async def list_schedules(self, tenant_id: str, offset: int, size: int) -> tuple[list[pb.StoredSchedule], int]:
        index = self._tenant_list(tenant_id)
        ids = await self._call(self._redis.zrange(index, offset, offset + size - 1))
        total = await self._call(self._redis.zcard(index))
        found = []
        for raw in ids:
            schedule_id = raw.decode() if isinstance(raw, bytes) else str(raw)
            schedule = await self._read(tenant_id, schedule_id)
            if schedule is None:  # deleted between its script and the index step: forget it
                await self._call(self._redis.zrem(index, schedule_id))
                total -= 1
            else:
                found.append(schedule)
        return found, total

    async def update(
        self, schedule: pb.StoredSchedule, run: pb.StoredScheduleRun | None
    ) -> tuple[pb.StoredSchedule, pb.StoredScheduleRun | None]:
        await self._index_schedule(schedule, earlier_only=True)
        if run is not None:
            await self._index_run(run, earlier_only=True)
        keys = self._keys(schedule.tenant_id, schedule.schedule_id)
        args: list[Any] = [schedule.version, self._encoded(schedule), "", b"", 0, RUNS_KEPT]
        if run is not None:
            args[2:5] = [run.run_id, self._encoded(run), run.fire_ms]
        status, version, added = await self._call(self._update(keys=keys, args=args))
        if status == -1:
            raise schedule_not_found(schedule.schedule_id)
        if status == 0:
            raise Conflict(f"schedule {schedule.schedule_id!r} changed (version {version}, not {schedule.version})")
        written = pb.StoredSchedule()
        written.CopyFrom(schedule)
        written.version = version
        await self._index_schedule(written, earlier_only=False)
        if run is None or not added:
            return written, None
        stored = pb.StoredScheduleRun()
        stored.CopyFrom(run)
        stored.version = 1
        await self._index_run(stored, earlier_only=False)
        return written, stored

    async def delete(self, tenant_id: str, schedule_id: str) -> bool:
        runs = await self._call(self._delete(keys=self._keys(tenant_id, schedule_id), args=[]))
        await self._call(self._redis.zrem(self._due, self._member(tenant_id, schedule_id)))
        await self._call(self._redis.zrem(self._tenant_list(tenant_id), schedule_id))
        if runs is None:  # Lua's false: there was no such schedule
            return False
        members = [self._member(tenant_id, schedule_id, r.decode() if isinstance(r, bytes) else r) for r in runs]
        if members:
            await self._call(self._redis.zrem(self._stale, *members))
        return True

    async def due(self, due_ms: int, limit: int) -> list[pb.StoredSchedule]:
        found: list[pb.StoredSchedule] = []
        for _ in range(FIX_ROUNDS):
            # Entries found stay in front of the range; those put right leave it: read on past them.
            members: list[Any] = await self._call(
                self._redis.zrangebyscore(self._due, "-inf", due_ms, start=len(found), num=limit - len(found))
            )
            fixed = 0
            for member in members:
                tenant_id, schedule_id = json.loads(member)
                schedule = await self._read(tenant_id, schedule_id)
                if schedule is not None and is_due(schedule, due_ms):
                    found.append(schedule)
                    continue
                fixed += 1
                if schedule is None:
                    await self._call(self._redis.zrem(self._due, member))
                else:  # an early entry (a step lost): put it right from the record
                    await self._index_schedule(schedule, earlier_only=False)
            if not fixed or len(found) >= limit:
                break
        return found

    async def put_run(self, run: pb.StoredScheduleRun) -> pb.StoredScheduleRun:
        await self._index_run(run, earlier_only=True)
        keys = self._keys(run.tenant_id, run.schedule_id)
        args: list[Any] = [run.version, run.run_id, self._encoded(run), run.fire_ms, RUNS_KEPT]
        status, version = await self._call(self._put_run(keys=keys, args=args))
        if status == -1:
            raise schedule_not_found(run.schedule_id)
        if status == 0:
            raise Conflict(f"run {run.run_id!r} changed (version {version}, not {run.version})")
        stored = pb.StoredScheduleRun()
        stored.CopyFrom(run)
        stored.version = version
        await self._index_run(stored, earlier_only=False)
        return stored

    async def list_runs(
        self, tenant_id: str, schedule_id: str, offset: int, size: int
    ) -> tuple[list[pb.StoredScheduleRun], int]:
        keys = self._keys(tenant_id, schedule_id)
        if not await self._call(self._redis.exists(keys[0])):
            raise schedule_not_found(schedule_id)
        ids = await self._call(self._redis.zrevrange(keys[3], offset, offset + size - 1))
        total = await self._call(self._redis.zcard(keys[3]))
        run_ids = [raw.decode() if isinstance(raw, bytes) else str(raw) for raw in ids]
        return await self._read_runs(tenant_id, schedule_id, run_ids), total

    async def stale(self, now_ms: int, limit: int) -> list[pb.StoredScheduleRun]:
        found: list[pb.StoredScheduleRun] = []
        for _ in range(FIX_ROUNDS):
            members: list[Any] = await self._call(
                self._redis.zrangebyscore(self._stale, "-inf", now_ms, start=len(found), num=limit - len(found))
            )
            fixed = 0
            for member in members:
                tenant_id, schedule_id, run_id = json.loads(member)
                runs = await self._read_runs(tenant_id, schedule_id, [run_id])
                if runs and is_stale(runs[0], now_ms):
                    found.append(runs[0])
                    continue
                fixed += 1
                if not runs:  # its schedule deleted, or the run trimmed
                    await self._call(self._redis.zrem(self._stale, member))
                else:
                    await self._index_run(runs[0], earlier_only=False)
            if not fixed or len(found) >= limit:
                break
        return found

    async def close(self) -> None:
        if self._owns_client:
            await self._redis.aclose()
