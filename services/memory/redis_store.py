"""The Redis memory store: replicas share memories through Redis; each searches a local index.

Layout: every key of a namespace carries one hash tag, `{tenant/label/...}`, so a
namespace lives on one Redis Cluster slot and each Lua script gets all its keys in
KEYS (no cross-slot operation):

    <prefix>mem:{acme/u1/memories}:items   HASH  key -> "created|updated|expire|<json body>"
    (names from services/lib/redis_keys.py: memory_keys, memory_registry)
    <prefix>mem:{acme/u1/memories}:meta    HASH  epoch, ver, floor, bytes, perm
    <prefix>mem:{acme/u1/memories}:log     ZSET  key -> version of its last change
    <prefix>mem:{acme/u1/memories}:exp     ZSET  key -> expiry (ms), memories with a TTL
    <prefix>mem:{acme/u1/memories}:tomb    ZSET  deleted key -> version of the deletion
    <prefix>mem:{acme}:namespaces          ZSET  "u1/memories" (the tenant's namespaces)

Writes are one script each: caps, TTL and the namespace's version bump are atomic with
the write, times come from Redis's clock. Expired memories are purged by the next
script that touches their namespace (a bounded batch at a time), and a namespace all of
whose memories expire is dropped by Redis a day after the last one.

Search does not pull the namespace per query. Each replica keeps a NamespaceIndex per
namespace it reads (least recently used go past COGMESH_MEMORY_CACHE_ITEMS) and, before
each read, one script call brings it up to date: it answers the version and the memories
changed since the replica's version (from the log). Unchanged namespaces cost one round
trip and no data; a replica too far behind (past the log's floor, after the namespace was
recreated, or more than SYNC_MAX changes) reloads the namespace with HSCAN.
Chosen over an inverted index kept in Redis: scoring there means Lua scripts walking
posting lists on the shared Redis (its one thread busy for every query), and BM25 over a
cached index is what the in-process store does anyway. Measured in BENCHMARKS.md.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

import numpy as np

from services.kit import lua
from services.kit.errors import Unavailable
from services.kit.redis_pool import UNAVAILABLE_ERRORS, Client, pooled_client
from services.kit.redis_url import check_prefix
from services.lib.redis_keys import memory_keys, memory_registry
from services.memory.index import NamespaceIndex, tokenize
from services.memory.model import (
    MAX_BYTES_SETTING,
    MAX_ITEMS_SETTING,
    JsonObject,
    Limits,
    Namespace,
    NamespaceFull,
    Record,
    decode_body,
    encode_body,
)
from services.memory.settings import MemorySettings

SYNC_MAX = 2_000  # changes one sync call returns; past that, a reload
SCAN_BATCH = 1_000
TOMB_MAX = 1_000  # deletions remembered per namespace before the oldest half is forgotten
PURGE_BATCH = 200  # expired memories one script call removes
IDLE_GRACE_MS = 86_400_000  # a namespace of expiring memories outlives its last one by this

# The scripts: services/memory/lua/*.lua (each file's opening comments say what its ARGV hold and it returns),
# each run after preamble.lua.
_LUA = lua.load(
    "services.memory",
    TOMB_MAX=TOMB_MAX,
    TOMB_FORGET_LAST=TOMB_MAX // 2 - 1,  # forgets the oldest half of the deletions
    PURGE_BATCH=PURGE_BATCH,
    IDLE_GRACE_MS=IDLE_GRACE_MS,
)
_PUT, _GET, _DELETE, _SYNC, _COUNT = (_LUA["preamble"] + _LUA[n] for n in ("put", "get", "delete", "sync", "count"))


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_record(key: str, raw: str) -> Record:
    created, updated, expire, body = raw.split("|", 3)
    value, text, embedding = decode_body(body)
    return Record(key, value, text, int(created), int(updated), int(expire), len(body.encode()), embedding)


class _Cached:
    def __init__(self) -> None:
        self.index = NamespaceIndex()
        self.epoch = "-"  # no namespace has this epoch: the first sync reloads
        self.version = 0
        self.lock = asyncio.Lock()


class RedisMemoryStore:
    def __init__(self, client: Client, prefix: str, limits: Limits, cache_items: int = 1_000_000):
        self._redis = client
        self._prefix = check_prefix(prefix)
        self._limits = limits
        self._cache_items = cache_items
        self._cache: OrderedDict[Namespace, _Cached] = OrderedDict()
        self._scripts = {
            name: client.register_script(source)
            for name, source in (("put", _PUT), ("get", _GET), ("delete", _DELETE), ("sync", _SYNC), ("count", _COUNT))
        }

    # ------------------------------------------------------------------ plumbing

    def keys(self, namespace: Namespace) -> list[str]:
        return memory_keys(self._prefix, namespace.path)

    def _registry(self, tenant: str) -> str:
        return memory_registry(self._prefix, tenant)

    async def _call(self, coro: Any) -> Any:
        try:
            return await coro
        except UNAVAILABLE_ERRORS as exc:
            raise Unavailable(
                f"the memory store (Redis) is unavailable: {exc or type(exc).__name__}",
                metadata={"dependency": "redis", "retryable": "true"},
            ) from exc

    async def _run(self, name: str, namespace: Namespace, *args: Any) -> Any:
        return await self._call(self._scripts[name](keys=self.keys(namespace), args=list(args)))

    async def ping(self) -> None:
        await self._call(self._redis.ping())

    # ------------------------------------------------------------------ writes

    async def put(
        self,
        namespace: Namespace,
        key: str,
        value: JsonObject,
        text: str,
        embedding: np.ndarray | None,
        ttl_ms: int,
    ) -> tuple[Record, bool]:
        body = encode_body(value, text, embedding)
        # At once: the namespace is registered with the tenant (a command on the tenant's slot) and the put
        # runs (a script on the namespace's; not in one pipeline, which a cluster cannot give a script).
        # Registered even when the put fails on a cap: a namespace without memories is never listed.
        limits = self._limits
        args: list[str | int | bytes] = [key, body, ttl_ms, limits.max_items, limits.max_bytes]
        _, reply = await self._call(
            asyncio.gather(
                self._redis.zadd(self._registry(namespace.tenant), {"/".join(namespace.labels): 0}),
                self._scripts["put"](self.keys(namespace), args),
            )
        )
        status = _s(reply[0])
        if status == "items":
            raise NamespaceFull(namespace, "items", MAX_ITEMS_SETTING, self._limits.max_items, int(reply[1]))
        if status == "bytes":
            raise NamespaceFull(namespace, "bytes", MAX_BYTES_SETTING, self._limits.max_bytes, int(reply[1]))
        record = parse_record(key, _s(reply[2]))
        record.value, record.embedding = value, embedding  # as given: no need to parse back what we sent
        return record, int(reply[1]) == 1

    async def get(self, namespace: Namespace, key: str) -> Record | None:
        raw = _s(await self._run("get", namespace, key))
        return parse_record(key, raw) if raw else None

    async def delete(self, namespace: Namespace, key: str) -> bool:
        return int(await self._run("delete", namespace, key)) == 1

    # ------------------------------------------------------------------ reads

    async def namespaces(self, tenant: str, prefix: tuple[str, ...]) -> list[Namespace]:
        path = "/".join(prefix).encode()
        if prefix:  # "a/b" and everything under "a/b/" (a byte range; "a/b-c" and the like are filtered below)
            low, high = b"[" + path, b"[" + path + b"/\xff"
            members = await self._call(self._redis.zrangebylex(self._registry(tenant), low, high))
        else:
            members = await self._call(self._redis.zrange(self._registry(tenant), 0, -1))
        found = (Namespace(tenant, tuple(_s(m).split("/"))) for m in members)
        return sorted(ns for ns in found if ns.under(prefix))

    async def count(self, namespace: Namespace) -> int:
        return int(await self._run("count", namespace))

    async def reader(self, namespace: Namespace) -> NamespaceIndex:
        cached = self._cache.get(namespace)
        if cached is None:
            cached = self._cache[namespace] = _Cached()
        self._cache.move_to_end(namespace)
        async with cached.lock:
            await self._sync(namespace, cached)
        self._evict()
        return cached.index

    async def _sync(self, namespace: Namespace, cached: _Cached) -> None:
        reply = await self._run("sync", namespace, cached.epoch, cached.version, SYNC_MAX)
        status, epoch, version, now = _s(reply[0]), _s(reply[1]), int(reply[2]), int(reply[3])
        if status == "reload":
            await self._reload(namespace, cached)
            # Changes made while the scan ran: replayed from the version the reload started at.
            cached.epoch, cached.version = epoch, version
            reply = await self._run("sync", namespace, epoch, version, SYNC_MAX)
            if _s(reply[0]) != "ok":  # changed too much meanwhile: the scan's view stands, the next read syncs
                return
            version, now = int(reply[2]), int(reply[3])
        changed = [(_s(reply[i]), _s(reply[i + 1])) for i in range(5, len(reply), 2)]
        self._apply(cached.index, changed)
        for key in cached.index.expired(now):  # Redis purges a bounded batch per call; the rest go here
            cached.index.remove(key)
        cached.version = version

    def _apply(self, index: NamespaceIndex, changed: list[tuple[str, str]]) -> None:
        records = [parse_record(key, raw) for key, raw in changed if raw]
        for key, raw in changed:
            if not raw:
                index.remove(key)
        for record, tokens in zip(records, tokenize([r.text for r in records]), strict=True):
            index.upsert(record, tokens)

    async def _reload(self, namespace: Namespace, cached: _Cached) -> None:
        fresh = NamespaceIndex()
        items = self.keys(namespace)[0]
        cursor = 0
        while True:
            cursor, batch = await self._call(self._redis.hscan(items, cursor, count=SCAN_BATCH))
            self._apply(fresh, [(_s(k), _s(v)) for k, v in batch.items()])
            if int(cursor) == 0:
                break
        cached.index = fresh

    def _evict(self) -> None:
        total = sum(len(c.index) for c in self._cache.values())
        while total > self._cache_items and len(self._cache) > 1:
            _, oldest = self._cache.popitem(last=False)
            total -= len(oldest.index)

    async def close(self) -> None:
        self._cache.clear()
        await self._redis.aclose()


async def open_redis_store(settings: MemorySettings, limits: Limits) -> RedisMemoryStore:
    client = pooled_client(settings.redis_url, settings.redis_timeout_s, health_check_interval=15)
    store = RedisMemoryStore(client, settings.redis_key_prefix, limits, settings.memory_cache_items)
    try:
        await store.ping()  # fail at boot with a clear message rather than on the first call
    except Unavailable as exc:
        await store.close()
        raise SystemExit(f"memory: cannot reach Redis: {exc.message}") from exc
    return store
