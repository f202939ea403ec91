"""One contract, every schedule store: in memory and on Redis (standalone, Sentinel, Cluster).

What the schedulers rely on: a write names the version it read and only one of two writers
of a version wins; a claimed tick's run is added by the write that moves the schedule past
it; the due and stale indexes answer across tenants and put themselves right from the
records after a lost step.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from cogmesh.sessions.v1 import schedules_pb2 as pb
from services.kit.errors import NotFound
from services.kit.redis_pool import pooled_client
from services.sessions.schedules.redis_store import RedisScheduleStore
from services.sessions.schedules.store import AlreadyExists, Conflict, MemoryScheduleStore, ScheduleStore
from tests.support.redis_topologies import REDIS_TOPOLOGIES, redis_for


@pytest.fixture(params=["memory", *REDIS_TOPOLOGIES])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ScheduleStore]:
    with contextlib.ExitStack() as stack:
        made: ScheduleStore
        if request.param == "memory":
            made = MemoryScheduleStore()
        else:
            redis = stack.enter_context(redis_for(request, request.param))
            made = RedisScheduleStore(pooled_client(redis.url, 2.0), redis.prefix)
        try:
            yield made
        finally:
            await made.close()


def schedule(tenant: str, schedule_id: str, next_ms: int, create_ms: int = 1) -> pb.StoredSchedule:
    return pb.StoredSchedule(
        tenant_id=tenant, schedule_id=schedule_id, spec=b"spec", next_fire_ms=next_ms, create_ms=create_ms
    )


def run(tenant: str, schedule_id: str, fire_ms: int, lease_ms: int, holder: str = "a") -> pb.StoredScheduleRun:
    return pb.StoredScheduleRun(
        tenant_id=tenant,
        schedule_id=schedule_id,
        run_id=str(fire_ms),
        fire_ms=fire_ms,
        run=b"run",
        holder=holder,
        lease_expire_ms=lease_ms,
    )


async def test_a_tick_is_claimed_by_one_of_two_writers_and_has_one_run(store: ScheduleStore) -> None:
    created = await store.create(schedule("acme", "s1", 1000))
    assert created.version == 1
    assert [s.schedule_id for s in await store.due(1000, 10)] == ["s1"]
    first, second = pb.StoredSchedule(), pb.StoredSchedule()
    for claim in (first, second):
        claim.CopyFrom(created)
        claim.next_fire_ms = 2000
    written, added = await store.update(first, run("acme", "s1", 1000, 5000))
    assert (written.version, written.next_fire_ms) == (2, 2000)
    assert added is not None and added.version == 1
    with pytest.raises(Conflict):
        await store.update(second, run("acme", "s1", 1000, 5000, holder="b"))
    assert await store.due(1999, 10) == []  # moved past the tick
    runs, total = await store.list_runs("acme", "s1", 0, 10)
    assert total == 1 and runs[0].holder == "a"
    # A run of an id the schedule has already is not added again, even by a write that wins.
    _, again = await store.update(written, run("acme", "s1", 1000, 5000, holder="c"))
    assert again is None
    assert (await store.list_runs("acme", "s1", 0, 10))[1] == 1


async def test_runs_are_written_under_their_version_and_stale_once_their_lease_ends(store: ScheduleStore) -> None:
    await store.create(schedule("acme", "s1", 1000))
    added = await store.put_run(run("acme", "s1", 1000, lease_ms=5000))
    with pytest.raises(Conflict):
        await store.put_run(run("acme", "s1", 1000, lease_ms=5000))  # version 0: it exists
    assert await store.stale(4999, 10) == []
    assert [r.run_id for r in await store.stale(5000, 10)] == ["1000"]
    # Two replicas take it over: one wins.
    mine, theirs = pb.StoredScheduleRun(), pb.StoredScheduleRun()
    for taken, holder in ((mine, "b"), (theirs, "c")):
        taken.CopyFrom(added)
        taken.holder, taken.lease_expire_ms = holder, 9000
    renewed = await store.put_run(mine)
    with pytest.raises(Conflict):
        await store.put_run(theirs)
    assert await store.stale(8999, 10) == []
    renewed.ended = True
    await store.put_run(renewed)
    assert await store.stale(10**12, 10) == []


async def test_due_skips_paused_schedules_and_spans_tenants(store: ScheduleStore) -> None:
    await store.create(schedule("acme", "a", 1000))
    await store.create(schedule("globex", "b", 500))
    paused = await store.create(schedule("acme", "c", 100))
    paused.paused = True
    await store.update(paused, None)
    assert [s.schedule_id for s in await store.due(1000, 10)] == ["b", "a"]
    assert [s.schedule_id for s in await store.due(1000, 1)] == ["b"]
    with pytest.raises(AlreadyExists):
        await store.create(schedule("acme", "a", 1000))


async def test_listing_pages_and_delete_forgets_the_schedule_and_its_runs(store: ScheduleStore) -> None:
    for k in range(5):
        await store.create(schedule("acme", f"s{k}", 1000, create_ms=k + 1))
    await store.create(schedule("globex", "other", 1000))
    page, total = await store.list_schedules("acme", 0, 2)
    assert total == 5 and [s.schedule_id for s in page] == ["s0", "s1"]
    page, _ = await store.list_schedules("acme", 4, 2)
    assert [s.schedule_id for s in page] == ["s4"]
    for fire in (10, 30, 20):
        await store.put_run(run("acme", "s0", fire, lease_ms=1))
    runs, total = await store.list_runs("acme", "s0", 0, 2)
    assert total == 3 and [r.run_id for r in runs] == ["30", "20"]  # newest first
    assert await store.delete("acme", "s0")
    assert not await store.delete("acme", "s0")
    with pytest.raises(NotFound):
        await store.get("acme", "s0")
    with pytest.raises(NotFound):
        await store.list_runs("acme", "s0", 0, 10)
    assert await store.stale(10**12, 10) == []
    assert {s.schedule_id for s in await store.due(1000, 10)} == {"s1", "s2", "s3", "s4", "other"}
    with pytest.raises(NotFound):
        await store.get("globex", "s1")  # another tenant's id space


async def test_redis_indexes_put_themselves_right_after_a_lost_step(request: pytest.FixtureRequest) -> None:
    """A crash between a schedule's script and its index step leaves an early entry: found, then corrected."""
    with redis_for(request, "standalone") as redis:
        store = RedisScheduleStore(pooled_client(redis.url, 2.0), redis.prefix)
        try:
            created = await store.create(schedule("acme", "s1", 1000))
            created.next_fire_ms = 5000
            await store.update(created, None)
            # As if the step after the script was lost: the index still says 1000.
            await store._redis.zadd(store._due, {store._member("acme", "s1"): 1000})
            assert await store.due(1000, 10) == []  # the record says 5000: not due...
            assert await store._redis.zscore(store._due, store._member("acme", "s1")) == 5000  # ...and put right
        finally:
            await store.close()


async def test_the_first_due_read_past_early_entries_finds_the_earliest(request: pytest.FixtureRequest) -> None:
    """A scheduler reads the first due schedule (limit 1) to know when to look next: an early entry
    in front (a lost step) is put right and read past, not taken for the whole answer."""
    with redis_for(request, "standalone") as redis:
        store = RedisScheduleStore(pooled_client(redis.url, 2.0), redis.prefix)
        try:
            early = await store.create(schedule("acme", "early", 1000))
            early.next_fire_ms = 9000
            await store.update(early, None)
            await store.create(schedule("acme", "next", 3000))
            await store._redis.zadd(store._due, {store._member("acme", "early"): 1000})  # the lost step
            assert [s.schedule_id for s in await store.due(5000, 1)] == ["next"]
            assert await store._redis.zscore(store._due, store._member("acme", "early")) == 9000
            await store.put_run(run("acme", "next", 1, lease_ms=9000))
            await store.put_run(run("acme", "next", 2, lease_ms=4000))
            await store._redis.zadd(store._stale, {store._member("acme", "next", "1"): 100})
            assert [r.run_id for r in await store.stale(5000, 1)] == ["2"]
        finally:
            await store.close()


async def test_a_store_on_a_shared_client_leaves_it_open(request: pytest.FixtureRequest) -> None:
    """The sessions process may hand its one Redis client to the schedule store: closing the store
    must not close the client its owner still uses (a store on a client of its own closes it)."""
    with redis_for(request, "standalone") as redis:
        client = pooled_client(redis.url, 2.0)
        close = client.aclose
        closed: list[bool] = []

        async def counted() -> None:
            closed.append(True)

        client.aclose = counted  # type: ignore[method-assign]
        try:
            store = RedisScheduleStore(client, redis.prefix, owns_client=False)
            await store.create(schedule("acme", "s1", 1000))
            await store.close()
            assert closed == []
            assert [s.schedule_id for s in await store.due(1000, 10)] == ["s1"]
            await RedisScheduleStore(client, redis.prefix).close()
            assert closed == [True]
        finally:
            await close()
