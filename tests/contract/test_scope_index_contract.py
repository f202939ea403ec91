"""Listing sessions filtered by scope, on every store (the backends of test_session_store_contract.py).

A filtered listing reads an index of the filter's scope, not the tenant: its pages are the
unfiltered listing's sessions that hold the filter, in the same order and under the same
page cursors, and a filtered page costs what an unfiltered one does (counted in session
records read, never in time). Sessions made before the Redis store had scope indexes are
put in them by the tenant's first filtered listing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import redis

from services.kit.redis_url import parse_redis_url
from services.lib.redis_keys import TenantKeys
from services.sessions.model import SessionNotFound
from services.sessions.redis_store import RedisSessionStore
from services.sessions.store import SessionStore
from tests.contract import test_session_store_contract as contract
from tests.contract.test_session_store_contract import ACME, GLOBEX, MakeStore, new_session
from tests.support.redis_server import RedisServer, admin_client, delete_prefix, unique_prefix

# The contract suite's backends: the memory store and the Redis store on each form of Redis.
make_store, store = contract.make_store, contract.store


async def scoped(store: SessionStore, scope: Mapping[str, str], tenant: str = ACME, user: str = "") -> str:
    return await new_session(store, tenant, user, scope=dict(scope))


async def every_page(
    store: SessionStore, size: int, scope_filter: Mapping[str, str] | None, tenant: str = ACME
) -> list[list[str]]:
    pages: list[list[str]] = []
    cursor: int | None = None
    while True:
        page = await store.list_sessions(tenant, cursor, size, scope_filter)
        assert len(page.items) <= size
        pages.append([r.session_id for r in page.items])
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


async def test_a_filter_pages_newest_first_through_its_sessions_once(store: SessionStore) -> None:
    made: list[tuple[str, dict[str, str]]] = []
    for i in range(12):
        scope = {"end_user": "a" if i % 3 == 0 else "b", "project": f"p{i % 2}"}
        if i == 5:
            scope = {}
        made.append((await scoped(store, scope), scope))
    await scoped(store, {"end_user": "a", "project": "p0"}, tenant=GLOBEX)  # another tenant's: never listed
    newest_first = list(reversed(made))
    for scope_filter in ({"end_user": "a"}, {"end_user": "b", "project": "p1"}, {"project": "p0"}):
        wanted = [sid for sid, scope in newest_first if all(scope.get(k) == v for k, v in scope_filter.items())]
        for size in (1, 2, 5, 50):
            pages = await every_page(store, size, scope_filter)
            assert [sid for page in pages for sid in page] == wanted, (scope_filter, size)
            assert all(len(page) == size for page in pages[:-1]), "every page but the last is full"
    assert await every_page(store, 5, {"end_user": "nobody"}) == [[]]
    assert await every_page(store, 5, {"end_user": "a", "project": "p9"}) == [[]]


async def test_a_filtered_page_cursor_is_the_unfiltered_listings(store: SessionStore) -> None:
    """The cursor of a filtered page means "older than the last session shown", as an unfiltered one does."""
    ids = [await scoped(store, {"end_user": "ab"[i % 2]}) for i in range(6)]
    page = await store.list_sessions(ACME, None, 2, {"end_user": "a"})
    assert [r.session_id for r in page.items] == [ids[4], ids[2]]
    rest = await store.list_sessions(ACME, page.next_cursor, 10)
    assert [r.session_id for r in rest.items] == [ids[1], ids[0]]
    unfiltered = await store.list_sessions(ACME, None, 3)
    assert [r.session_id for r in unfiltered.items] == [ids[5], ids[4], ids[3]]
    filtered = await store.list_sessions(ACME, unfiltered.next_cursor, 10, {"end_user": "a"})
    assert [r.session_id for r in filtered.items] == [ids[2], ids[0]]


async def test_deleted_and_closed_sessions_leave_the_filtered_listing(store: SessionStore) -> None:
    alice = [await scoped(store, {"end_user": "alice"}, user="u1") for _ in range(3)]
    bob = await scoped(store, {"end_user": "bob"}, user="u2")
    assert await store.delete(ACME, alice[1])
    assert await every_page(store, 10, {"end_user": "alice"}) == [[alice[2], alice[0]]]
    assert await store.close_all(ACME, "u1") == 2
    assert await every_page(store, 10, {"end_user": "alice"}) == [[]]
    assert await every_page(store, 10, {"end_user": "bob"}) == [[bob]]


async def test_expired_sessions_leave_the_filtered_listing(make_store: MakeStore) -> None:
    store = await make_store(session_ttl_s=0.3)
    gone = await scoped(store, {"end_user": "alice"})
    for _ in range(200):  # until its TTL has passed (the store's clock; Redis's for the Redis store)
        try:
            await store.get(ACME, gone)
        except SessionNotFound:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("the session never expired")
    kept = await scoped(store, {"end_user": "alice"})
    assert await every_page(store, 10, {"end_user": "alice"}) == [[kept]]


# --------------------------------------------------------------------------- Redis: the indexes themselves


def redis_of(store: SessionStore) -> tuple[RedisSessionStore, str]:
    assert isinstance(store, RedisSessionStore)
    return store, store._prefix


async def test_the_scope_indexes_hold_only_live_sessions(store: SessionStore) -> None:
    if not isinstance(store, RedisSessionStore):
        pytest.skip("the Redis store's keys")
    red, prefix = redis_of(store)
    tenant = TenantKeys(prefix, ACME)
    sids = [await scoped(store, {"end_user": "alice", "project": f"p{i}"}) for i in range(3)]
    index = tenant.scope_index("end_user", "alice")
    members: Any = await red._redis.zrange(index, 0, -1)
    assert [s.decode() for s in members] == sids
    scores = await red._redis.zrange(tenant.index, 0, -1, withscores=True)
    assert await red._redis.zrange(index, 0, -1, withscores=True) == scores, "the tenant index's scores"
    for sid in sids[:2]:
        assert await store.delete(ACME, sid)
    assert await store.close_all(ACME, "") == 1
    for key in (index, *(tenant.scope_index("project", f"p{i}") for i in range(3)), tenant.index):
        assert not await red._redis.exists(key), key
    assert await red._redis.hgetall(tenant.scopes) == {b"*": b"done"}


# --------------------------------------------------------------------------- Redis: sessions from before


async def test_sessions_listed_before_scope_indexes_are_backfilled(make_store: MakeStore) -> None:
    first = await make_store()
    if not isinstance(first, RedisSessionStore):
        pytest.skip("the memory store keeps no sessions across versions")
    red, prefix = redis_of(first)
    tenant = TenantKeys(prefix, ACME)
    made = [await scoped(first, {"end_user": "a" if i % 3 == 0 else "b"} if i != 4 else {}) for i in range(250)]
    gone = made[3]
    # What the store before scope indexes left: the tenant's index and counter, no scope index or scope-of hash.
    await red._redis.delete(tenant.scopes, tenant.scope_index("end_user", "a"), tenant.scope_index("end_user", "b"))
    await red._redis.delete(red._keys(gone)[0])  # and a session that expired, still in the tenant's index

    store = await make_store()
    wanted = [sid for i, sid in reversed(list(enumerate(made))) if i % 3 == 0 and sid != gone]
    assert [sid for page in await every_page(store, 7, {"end_user": "a"}) for sid in page] == wanted
    assert await red._redis.hget(tenant.scopes, "*") == b"done"
    assert gone.encode() not in await red._redis.zrange(tenant.scope_index("end_user", "a"), 0, -1)
    later = await scoped(store, {"end_user": "a"})
    assert [r.session_id for r in (await store.list_sessions(ACME, None, 2, {"end_user": "a"})).items] == [
        later,
        wanted[0],
    ]
    b_count = sum(1 for i in range(250) if i % 3 != 0 and i != 4)
    assert sum(len(p) for p in await every_page(store, 50, {"end_user": "b"})) == b_count


async def test_an_interrupted_backfill_goes_on_where_it_stopped(make_store: MakeStore) -> None:
    first = await make_store()
    if not isinstance(first, RedisSessionStore):
        pytest.skip("the memory store keeps no sessions across versions")
    red, prefix = redis_of(first)
    tenant = TenantKeys(prefix, ACME)
    made = [await scoped(first, {"end_user": "a"}) for _ in range(5)]
    await red._redis.delete(tenant.scopes, tenant.scope_index("end_user", "a"))
    listed: Any = await red._redis.zrange(tenant.index, 0, -1, withscores=True)
    scores = [int(score) for _, score in listed]
    await red._redis.hset(tenant.scopes, "*", scores[1])  # a backfill that got through the two oldest
    await red._redis.zadd(tenant.scope_index("end_user", "a"), {made[0]: scores[0], made[1]: scores[1]})
    assert [r.session_id for r in (await first.list_sessions(ACME, None, 10, {"end_user": "a"})).items] == list(
        reversed(made)
    )


# --------------------------------------------------------------------------- what a filtered page costs

TENANT_SIZE, IN_SCOPE, PAGE = 2000, 10, 10


@pytest.fixture(params=["standalone", "cluster"])
def counted_redis(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """A Redis whose INFO commandstats only this test moves: a private server, or this run's cluster."""
    if request.param == "standalone":
        server = RedisServer().start()
        try:
            yield server.url, "count:"
        finally:
            server.close()
        return
    url: str = request.getfixturevalue("redis_cluster_url")
    prefix = unique_prefix("count")
    try:
        yield url, prefix
    finally:
        delete_prefix(url, prefix)


def records_read(url: str) -> int:
    """HGETALL calls on every node, scripts' included: a session record is read with one."""
    if parse_redis_url(url).kind == "cluster":
        nodes = parse_redis_url(url).nodes
        clients = [redis.Redis(host=host, port=port, socket_timeout=5) for host, port in nodes]
    else:
        clients = [admin_client(url)]
    total = 0
    for client in clients:
        stats: Any = client.info("commandstats")
        total += int(stats.get("cmdstat_hgetall", {}).get("calls", 0))
        client.close()
    return total


async def test_a_filtered_page_reads_its_scope_not_the_tenant(counted_redis: tuple[str, str]) -> None:
    url, prefix = counted_redis
    store = RedisSessionStore.from_url(url, prefix, 0.0, 10.0)
    try:
        spread = TENANT_SIZE // IN_SCOPE
        for first in range(0, TENANT_SIZE, 100):
            await asyncio.gather(
                *(
                    scoped(store, {"end_user": "target" if i % spread == spread // 2 else f"u{i}"})
                    for i in range(first, first + 100)
                )
            )
        before = records_read(url)
        unfiltered = await store.list_sessions(ACME, None, PAGE)
        unfiltered_reads = records_read(url) - before
        assert len(unfiltered.items) == PAGE

        before = records_read(url)
        page = await store.list_sessions(ACME, None, PAGE, {"end_user": "target"})
        filtered_reads = records_read(url) - before
        assert [r.scope["end_user"] for r in page.items] == ["target"] * IN_SCOPE
        assert filtered_reads <= unfiltered_reads, (
            f"a filtered page of {PAGE} read {filtered_reads} session records of a {TENANT_SIZE}-session tenant;"
            f" an unfiltered page read {unfiltered_reads}"
        )
    finally:
        await store.close()
