"""One contract, two memory stores: every test runs against the in-process store and the Redis store.

The Redis store talks to a real redis-server under a key prefix of its own
(tests/support/redis_server.py). Expiry is real time (Redis's clock): a test waits for
the condition (the memory gone), never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from services.kit.errors import FailedPrecondition
from services.kit.redis_pool import pooled_client
from services.memory import memories as memories_module
from services.memory import redis_store
from services.memory.index import tokenize
from services.memory.memories import Memories, Mode
from services.memory.model import MAX_BYTES_SETTING, MAX_ITEMS_SETTING, Limits, Namespace, NamespaceFull
from services.memory.redis_store import RedisMemoryStore
from services.memory.store import InProcessMemoryStore, MemoryStore
from tests.support.redis_server import admin_client
from tests.support.redis_topologies import REDIS_TOPOLOGIES, RedisUnderTest, redis_for

MakeStore = Callable[..., Awaitable[MemoryStore]]
ALICE = Namespace("acme", ("alice", "memories"))
BOB = Namespace("acme", ("bob", "memories"))
GLOBEX_ALICE = Namespace("globex", ("alice", "memories"))


@pytest.fixture(params=["memory", *REDIS_TOPOLOGIES])
async def make_store(request: pytest.FixtureRequest) -> AsyncIterator[MakeStore]:
    """Stores of the parametrised kind; Redis ones (replicas, when several) share this test's prefix."""
    made: list[MemoryStore] = []
    with contextlib.ExitStack() as stack:
        redis = None if request.param == "memory" else stack.enter_context(redis_for(request, request.param))

        async def make(limits: Limits | None = None, cache_items: int = 1_000_000) -> MemoryStore:
            limits = limits or Limits()
            store: MemoryStore
            if redis is None:
                store = InProcessMemoryStore(limits)
            else:
                store = RedisMemoryStore(pooled_client(redis.url, 2.0), redis.prefix, limits, cache_items)
            made.append(store)
            return store

        make.kind = "memory" if redis is None else "redis"  # type: ignore[attr-defined]
        yield make
        for store in made:
            await store.close()


async def put(store: MemoryStore, ns: Namespace, key: str, text: str, ttl_ms: int = 0, **value: object) -> None:
    await store.put(ns, key, dict(value), text, None, ttl_ms)


async def search(store: MemoryStore, ns: Namespace, query: str, **filter: object) -> list[str]:
    index = await store.reader(ns)
    hits = await index.text_scores(tokenize([query])[0], dict(filter), 100)
    return [key for key, _ in sorted(hits, key=lambda pair: -pair[1])]


async def wait_for(condition: Callable[[], Awaitable[bool]], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_put_get_replace_delete(make_store: MakeStore) -> None:
    store = await make_store()
    first, created = await store.put(ALICE, "k1", {"kind": "pref", "n": 1.5}, "likes dark roast coffee", None, 0)
    assert created and first.value == {"kind": "pref", "n": 1.5} and first.expire_ms == 0
    again, created = await store.put(ALICE, "k1", {"kind": "pref"}, "likes tea now", None, 0)
    assert not created and again.created_ms == first.created_ms and again.updated_ms >= first.updated_ms
    got = await store.get(ALICE, "k1")
    assert got is not None and got.value == {"kind": "pref"} and got.text == "likes tea now"
    assert got.created_ms == first.created_ms
    assert await store.get(BOB, "k1") is None
    assert await store.get(GLOBEX_ALICE, "k1") is None
    assert await store.delete(ALICE, "k1") is True
    assert await store.delete(ALICE, "k1") is False
    assert await store.get(ALICE, "k1") is None


async def test_namespaces_are_per_tenant_and_filtered_by_prefix(make_store: MakeStore) -> None:
    store = await make_store()
    for ns in (ALICE, BOB, GLOBEX_ALICE, Namespace("acme", ("alice", "notes")), Namespace("acme", ("alice-x",))):
        await put(store, ns, "k", "hello")
    labels = [ns.labels for ns in await store.namespaces("acme", ())]
    assert labels == [("alice", "memories"), ("alice", "notes"), ("alice-x",), ("bob", "memories")]
    assert [ns.labels for ns in await store.namespaces("acme", ("alice",))] == [
        ("alice", "memories"),
        ("alice", "notes"),
    ]
    assert [ns.labels for ns in await store.namespaces("globex", ())] == [("alice", "memories")]
    await store.delete(BOB, "k")
    assert await store.count(BOB) == 0 and await store.count(ALICE) == 1
    listed, _ = await Memories(store, Limits()).namespaces("acme", (), 0, 100, "")
    assert ("bob", "memories") not in listed and ("alice", "memories") in listed


async def test_search_sees_every_write_at_once(make_store: MakeStore) -> None:
    store = await make_store()
    await put(store, ALICE, "coffee", "prefers dark roast coffee", kind="pref")
    assert await search(store, ALICE, "coffee") == ["coffee"]
    await put(store, ALICE, "city", "lives in Lyon and drinks coffee daily", kind="fact")
    assert set(await search(store, ALICE, "coffee")) == {"coffee", "city"}
    assert await search(store, ALICE, "coffee", kind="fact") == ["city"]
    assert await search(store, ALICE, "lyon") == ["city"]
    await put(store, ALICE, "city", "lives in Paris", kind="fact")
    assert await search(store, ALICE, "lyon") == []
    await store.delete(ALICE, "coffee")
    assert await search(store, ALICE, "coffee") == []
    assert await search(store, BOB, "coffee") == []


async def test_tiny_namespaces_still_rank(make_store: MakeStore) -> None:
    """rank_bm25 #39/#43: with Okapi idf a term in half the documents, or a corpus of one or two, scores 0."""
    store = await make_store()
    await put(store, ALICE, "only", "allergic to peanuts")
    index = await store.reader(ALICE)
    (hit,) = await index.text_scores(tokenize(["peanuts"])[0], {}, 10)
    assert hit[0] == "only" and hit[1] > 0
    await put(store, ALICE, "other", "likes hiking")
    index = await store.reader(ALICE)
    hits = await index.text_scores(tokenize(["peanuts allergy hiking"])[0], {}, 10)
    assert {key for key, score in hits if score > 0} == {"only", "other"}  # each term in exactly half


async def test_caps_name_the_setting(make_store: MakeStore) -> None:
    store = await make_store(Limits(max_items=2, max_bytes=400))
    await put(store, ALICE, "a", "one")
    await put(store, ALICE, "b", "two")
    with pytest.raises(NamespaceFull) as full:
        await put(store, ALICE, "c", "three")
    assert full.value.metadata["setting"] == MAX_ITEMS_SETTING and full.value.metadata["current"] == "2"
    assert MAX_ITEMS_SETTING in full.value.message
    await put(store, ALICE, "a", "replacing at the cap is fine")
    await put(store, BOB, "c", "another namespace has its own cap")
    with pytest.raises(NamespaceFull) as over:
        await put(store, BOB, "d", "x" * 400)
    assert over.value.metadata["setting"] == MAX_BYTES_SETTING and over.value.metadata["limit"] == "bytes"
    assert await store.get(BOB, "d") is None


async def test_ttl_expires_memories(make_store: MakeStore) -> None:
    store = await make_store()
    stored, _ = await store.put(ALICE, "short", {}, "fleeting thought", None, 300)
    await put(store, ALICE, "long", "lasting thought")
    assert stored.expire_ms >= stored.updated_ms + 300

    async def gone() -> bool:
        return await store.get(ALICE, "short") is None

    await wait_for(gone)
    assert await search(store, ALICE, "thought") == ["long"]
    assert (await store.get(ALICE, "long")) is not None
    await put(store, ALICE, "short", "back, without a ttl")
    assert (await store.get(ALICE, "short")).expire_ms == 0  # type: ignore[union-attr]


async def test_search_lists_and_filters_across_namespaces(make_store: MakeStore) -> None:
    store = await make_store()
    memories = Memories(store, Limits())
    await put(store, ALICE, "a1", "alice likes coffee", kind="pref")
    await put(store, Namespace("acme", ("alice", "notes")), "n1", "coffee meeting notes", kind="note")
    await put(store, BOB, "b1", "bob likes coffee too", kind="pref")
    outcome = await memories.search("acme", ("alice",), "coffee", {}, 10, Mode.AUTO)
    assert {(hit.namespace.labels, hit.record.key) for hit in outcome.hits} == {
        (("alice", "memories"), "a1"),
        (("alice", "notes"), "n1"),
    }
    outcome = await memories.search("acme", (), "coffee", {"kind": "pref"}, 10, Mode.AUTO)
    assert {hit.record.key for hit in outcome.hits} == {"a1", "b1"}
    assert (await memories.search("globex", (), "coffee", {}, 10, Mode.AUTO)).hits == []
    everything = await memories.search("acme", (), "", {}, 10, Mode.AUTO)
    assert len(everything.hits) == 3 and all(hit.score == 0 for hit in everything.hits)
    newest = await memories.search("acme", (), "", {}, 2, Mode.AUTO)  # without a query: newest first
    assert [hit.record.key for hit in newest.hits] == [hit.record.key for hit in everything.hits[:2]]
    stamps = [(hit.record.updated_ms, hit.record.key) for hit in everything.hits]
    assert stamps == sorted(stamps, reverse=True)


async def test_a_search_over_too_many_namespaces_asks_for_a_longer_prefix(
    make_store: MakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memories_module, "MAX_SEARCH_NAMESPACES", 2)
    store = await make_store()
    for user in ("u1", "u2", "u3"):
        await put(store, Namespace("acme", (user, "memories")), "k", "hello")
    memories = Memories(store, Limits())
    with pytest.raises(FailedPrecondition, match="covers 3 namespaces; a search reads at most 2"):
        await memories.search("acme", (), "hello", {}, 10, Mode.TEXT)
    assert len((await memories.search("acme", ("u1",), "hello", {}, 10, Mode.TEXT)).hits) == 1


async def test_list_pages_in_namespace_then_key_order(make_store: MakeStore) -> None:
    store = await make_store()
    memories = Memories(store, Limits())
    for ns in (BOB, ALICE):
        for key in ("k3", "k1", "k2"):
            await put(store, ns, key, f"{key} of {ns.labels[0]}")
    seen: list[tuple[str, str]] = []
    token = ""
    while True:
        page, token = await memories.list_page("acme", (), 2, token)
        assert len(page) <= 2
        seen += [(ns.labels[0], record.key) for ns, record in page]
        if not token:
            break
    assert seen == [("alice", "k1"), ("alice", "k2"), ("alice", "k3"), ("bob", "k1"), ("bob", "k2"), ("bob", "k3")]
    names, token = await memories.namespaces("acme", (), 1, 10, "")
    assert names == [("alice",), ("bob",)] and token == ""


async def test_replicas_share_memories(make_store: MakeStore) -> None:
    """Two stores on one Redis (two replicas): each sees the other's writes on its next read."""
    if make_store.kind != "redis":  # type: ignore[attr-defined]
        pytest.skip("the in-process store is one replica by design")
    one, two = await make_store(), await make_store()
    await put(one, ALICE, "k1", "prefers window seats")
    assert await search(two, ALICE, "window") == ["k1"]
    await put(one, ALICE, "k2", "window cleaning on fridays")
    await one.delete(ALICE, "k1")
    assert await search(two, ALICE, "window") == ["k2"]
    await put(two, ALICE, "k2", "no longer relevant")
    assert await search(one, ALICE, "window") == []


async def test_a_replica_far_behind_reloads(make_store: MakeStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past SYNC_MAX changes, or past the forgotten deletions (the log's floor), a replica reloads."""
    if make_store.kind != "redis":  # type: ignore[attr-defined]
        pytest.skip("Redis replicas only")
    monkeypatch.setattr(redis_store, "SYNC_MAX", 3)
    one, two = await make_store(), await make_store()
    await put(one, ALICE, "seed", "seed memory")
    assert await search(two, ALICE, "seed") == ["seed"]
    for i in range(10):
        await put(one, ALICE, f"m{i}", f"memory number {i} about parrots")
    assert len(await search(two, ALICE, "parrots")) == 10
    for i in range(redis_store.TOMB_MAX + 5):  # forgets the oldest deletions: the floor moves past `two`
        await put(one, ALICE, f"gone{i}", "temporary")
        await one.delete(ALICE, f"gone{i}")
    await one.delete(ALICE, "m0")
    hits = await search(two, ALICE, "parrots")
    assert len(hits) == 9 and "m0" not in hits
    assert len((await two.reader(ALICE)).records) == 10


async def test_cache_evicts_least_recently_used(make_store: MakeStore) -> None:
    if make_store.kind != "redis":  # type: ignore[attr-defined]
        pytest.skip("the Redis store's per-replica cache")
    store = await make_store(cache_items=3)
    for ns in (ALICE, BOB, GLOBEX_ALICE):
        await put(store, ns, "a", "apples")
        await put(store, ns, "b", "bananas")
        assert await search(store, ns, "apples") == ["a"]
    assert isinstance(store, RedisMemoryStore)
    assert list(store._cache) == [GLOBEX_ALICE]  # evicted down to the cap, the newest kept
    assert await search(store, ALICE, "bananas") == ["b"]  # reloaded on demand


async def test_redis_keys_of_a_namespace_share_one_hash_tag(any_redis: RedisUnderTest) -> None:
    redis_prefix = any_redis.prefix
    store = RedisMemoryStore(pooled_client(any_redis.url, 2.0), redis_prefix, Limits())
    admin = admin_client(any_redis.url)
    try:
        await put(store, ALICE, "k", "hello", ttl_ms=60_000)
        await store.delete(ALICE, "k")
        keys = sorted(k.decode() for k in admin.scan_iter(match=f"{redis_prefix}*"))
        tags = {key[key.index("{") : key.index("}") + 1] for key in keys}
        assert tags == {"{acme}", "{acme/alice/memories}"}, keys
        assert all(key.startswith(f"{redis_prefix}mem:") for key in keys)
    finally:
        admin.close()
        await store.close()
