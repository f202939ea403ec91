"""Memory search: latency and memory per stored item at 10k and 100k memories in one namespace.

Measured in one run on one machine, side by side:

- cogmesh: `Memories.search` (what SearchMemories runs) on the in-process store and on
  the Redis store (a private redis-server), text mode (BM25), limit 10, with and
  without an equality filter; the Redis store's per-search sync round trip included;
- baselines: the library's raw BM25 call on the same corpus (`bm25s` get_scores plus
  a top-10 selection on a prebuilt index: the floor for BM25 in Python) and a plain
  Python substring scan (every text checked for the query's words, first 10 kept,
  no ranking: what a store without an index does per query);
- vectors: cosine search over 256-dimension unit embeddings (the index's matrix)
  against a raw numpy `matrix @ query` plus top-10;
- memory per memory: the in-process index (values, texts, tokens, BM25 snapshot),
  measured with tracemalloc, against the same memories as plain Python objects; and
  Redis's used_memory per memory (values, texts, the version log).

Also timed: building the BM25 index of a whole namespace (what the first search of a
replica, or the background rebuild after writes, costs) and the first search after a
write (served from the snapshot plus the changed memories' own small index).

    python -m bench.memory [--sizes 10000,100000] [--queries 200]
"""

from __future__ import annotations

import os

# One BLAS thread: OpenBLAS's idle threads spin on the 2 shared cores after each matrix product and
# would slow the Redis server and the rows measured after a vector search, not just the vector rows.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import asyncio
import gc
import platform
import sys
import time
import tracemalloc
import zlib
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import bm25s
import numpy as np
import redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from bench.harness import percentile, table, write_result
from bench.sessions import private_redis, redis_version
from services.kit.redis_pool import pooled_client
from services.memory.index import tokenize
from services.memory.memories import Memories, Mode
from services.memory.model import Limits, Namespace
from services.memory.redis_store import RedisMemoryStore
from services.memory.store import InProcessMemoryStore, MemoryStore

NAMESPACE = Namespace("bench", ("user-1", "memories"))
KINDS = ("preference", "fact", "event", "person", "task")
VOCABULARY = 20_000
WORDS_PER_MEMORY = 18
DIMENSIONS = 256
LIMIT = 10


def corpus(size: int, seed: int = 7) -> list[tuple[str, dict[str, Any], str]]:
    """Memories whose words follow a Zipf law over a 20,000-word vocabulary, as text does."""
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.15, size=(size, WORDS_PER_MEMORY)), VOCABULARY)
    out = []
    for i in range(size):
        text = " ".join(f"w{rank}" for rank in ranks[i])
        out.append((f"m{i:06d}", {"kind": KINDS[i % len(KINDS)], "source": "bench"}, text))
    return out


def queries(count: int, seed: int = 11) -> list[str]:
    """Two or three words each, drawn from the same law, so common and rare terms both occur."""
    rng = np.random.default_rng(seed)
    return [
        " ".join(f"w{min(int(r), VOCABULARY)}" for r in rng.zipf(1.15, size=rng.integers(2, 4))) for _ in range(count)
    ]


def raw_bm25(memories: list[tuple[str, dict[str, Any], str]]) -> tuple[Callable[[str], Awaitable[object]], float]:
    tokens = tokenize([text for _, _, text in memories])
    started = time.perf_counter()
    retriever = bm25s.BM25(method="lucene")
    retriever.index(tokens, show_progress=False)
    build_s = time.perf_counter() - started

    async def search(query: str) -> object:
        scores = retriever.get_scores(tokenize([query])[0])
        top = np.argpartition(-scores, LIMIT)[:LIMIT]
        return top[np.argsort(-scores[top])]

    return search, build_s


def substring_scan(memories: list[tuple[str, dict[str, Any], str]]) -> Callable[[str], Awaitable[object]]:
    texts = [(key, text.lower()) for key, _, text in memories]

    async def search(query: str) -> object:
        words = query.lower().split()
        found = []
        for key, text in texts:
            if any(word in text for word in words):
                found.append(key)
                if len(found) == LIMIT:
                    break
        return found

    return search


async def load(store: MemoryStore, memories: list[tuple[str, dict[str, Any], str]], vectors: np.ndarray | None) -> None:
    batch = 200  # puts in flight at once, as many clients would send them
    for start in range(0, len(memories), batch):
        chunk = memories[start : start + batch]
        await asyncio.gather(
            *(
                store.put(NAMESPACE, key, value, text, None if vectors is None else vectors[start + i], 0)
                for i, (key, value, text) in enumerate(chunk)
            )
        )


def python_bytes(build: Callable[[], object]) -> tuple[object, int]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    made = build()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return made, after - before


def query_vector(vectors: np.ndarray, query: str) -> np.ndarray:
    """A stored memory's embedding as the query vector, picked by the query text (stable across runs)."""
    return vectors[zlib.crc32(query.encode()) % len(vectors)]


async def open_store(kind: str, limits: Limits, redis_url: str) -> MemoryStore:
    if kind == "memory":
        return InProcessMemoryStore(limits)
    return RedisMemoryStore(pooled_client(redis_url, 10.0, Retry(NoBackoff(), 1)), "bench:", limits)


async def measure(size: int, texts: list[str], redis_url: str) -> dict[str, Any]:
    """Every search of every system per query, in turn: a busy machine slows them alike, so ratios hold."""
    memories = corpus(size)
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((size, DIMENSIONS)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    figures: dict[str, Any] = {"size": size}
    _, figures["plain_bytes"] = python_bytes(lambda: [(k, dict(v), t) for k, v, t in memories])
    figures["index_bytes"] = await index_bytes(memories)

    raw, figures["bm25s_build_s"] = raw_bm25(memories)

    async def raw_vectors(query: str) -> object:
        scores = vectors @ query_vector(vectors, query)
        return np.argpartition(-scores, LIMIT)[:LIMIT]

    ops: dict[str, Callable[[str], Awaitable[object]]] = {
        "raw_bm25": raw,
        "substring": substring_scan(memories),
        "raw_vectors": raw_vectors,
    }
    limits = Limits(max_items=size + 100, max_bytes=2**40, max_value_bytes=2**20)
    stores: dict[str, MemoryStore] = {}
    admin = redis.Redis.from_url(redis_url)
    admin.flushall()  # a private server of this bench alone
    used_before = int(admin.info("memory")["used_memory"])
    for kind in ("memory", "redis"):
        store = stores[kind] = await open_store(kind, limits, redis_url)
        started = time.perf_counter()
        await load(store, memories, vectors)
        figures[f"{kind}_load_s"] = time.perf_counter() - started
        started = time.perf_counter()
        index = await store.reader(NAMESPACE)
        await index.text_scores(tokenize(["w1"])[0], {}, LIMIT)  # builds the BM25 snapshot
        figures[f"{kind}_first_search_s"] = time.perf_counter() - started
        api = Memories(store, limits)
        ops[f"{kind}_text"] = partial(api.search, "bench", (), filter={}, limit=LIMIT, mode=Mode.TEXT)
        ops[f"{kind}_filtered"] = partial(api.search, "bench", (), filter={"kind": "fact"}, limit=LIMIT, mode=Mode.TEXT)

        async def vector_search(query: str, store: MemoryStore = store) -> object:
            return (await store.reader(NAMESPACE)).vector_scores(query_vector(vectors, query), {}, LIMIT)

        ops[f"{kind}_vector"] = vector_search
    figures["redis_bytes"] = int(admin.info("memory")["used_memory"]) - used_before
    admin.close()
    ping_client = pooled_client(redis_url, 10.0, Retry(NoBackoff(), 1))

    async def ping(query: str) -> object:
        return await ping_client.ping()

    ops["redis_ping"] = ping

    latencies: dict[str, list[float]] = {name: [] for name in ops}
    for op in ops.values():
        await op(texts[0])  # warm
    for text in texts:
        for name, op in ops.items():
            started = time.perf_counter()
            await op(text)
            latencies[name].append((time.perf_counter() - started) * 1000)
    figures.update(latencies)

    # A write, then a search: the snapshot plus the changed memory as its tail.
    for kind, store in stores.items():
        after_write = []
        for i, query in enumerate(texts[:20]):
            await store.put(NAMESPACE, f"new{i}", {"kind": "fact"}, f"{query} fresh", None, 0)
            started = time.perf_counter()
            await ops[f"{kind}_text"](query)
            after_write.append((time.perf_counter() - started) * 1000)
        figures[f"{kind}_after_write"] = after_write
        await store.close()
    await ping_client.aclose()
    return figures


async def index_bytes(memories: list[tuple[str, dict[str, Any], str]]) -> int:
    """Python memory of one in-process namespace of these memories, BM25 snapshot built (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    store = InProcessMemoryStore(Limits(max_items=len(memories) + 1, max_bytes=2**40))
    await load(store, memories, None)
    await (await store.reader(NAMESPACE)).text_scores(["w1"], {}, LIMIT)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    await store.close()
    return used


def p(values: list[float], q: float) -> str:
    return f"{percentile(values, q):,.2f}"


def ratio(a: list[float], b: list[float]) -> str:
    return f"{percentile(a, 50) / percentile(b, 50):,.1f}x"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000", help="memories in the namespace, comma-separated")
    parser.add_argument("--queries", type=int, default=200, help="searches timed per row")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    texts = queries(args.queries)
    results = []
    with private_redis() as url:
        for size in sizes:
            print(f"memory bench: {size:,} memories", file=sys.stderr)
            results.append(await measure(size, texts, url))

    latency_rows = []
    memory_rows = []
    for f in results:
        n = f"{f['size']:,}"
        for label, key, base in (
            ("raw bm25s get_scores + top 10 (baseline)", "raw_bm25", "raw_bm25"),
            ("substring scan, no ranking (baseline)", "substring", "raw_bm25"),
            ("cogmesh BM25, in-process store", "memory_text", "raw_bm25"),
            ("cogmesh BM25 + filter, in-process store", "memory_filtered", "raw_bm25"),
            ("Redis PING round trip, same client kind (baseline of the Redis rows)", "redis_ping", "raw_bm25"),
            ("cogmesh BM25, Redis store", "redis_text", "raw_bm25"),
            ("cogmesh BM25 + filter, Redis store", "redis_filtered", "raw_bm25"),
            ("first search after a write, in-process", "memory_after_write", "raw_bm25"),
            ("first search after a write, Redis", "redis_after_write", "raw_bm25"),
            ("raw numpy matrix @ query + top 10 (baseline)", "raw_vectors", "raw_vectors"),
            ("cogmesh vectors (256 dims), in-process", "memory_vector", "raw_vectors"),
            ("cogmesh vectors (256 dims), Redis", "redis_vector", "raw_vectors"),
        ):
            values = f[key]
            latency_rows.append(
                [n, label, p(values, 50), p(values, 99), ratio(values, f[base]), ratio(values, f["substring"])]
            )
        size = f["size"]
        memory_rows.append(
            [
                n,
                f"{f['plain_bytes'] / size:,.0f}",
                f"{f['index_bytes'] / size:,.0f}",
                f"{f['index_bytes'] / f['plain_bytes']:.1f}x",
                f"{f['redis_bytes'] / size:,.0f}",
                f"{f['redis_bytes'] / f['plain_bytes']:.1f}x",
                f"{f['bm25s_build_s']:.2f}",
                f"{f['memory_first_search_s']:.2f} / {f['redis_first_search_s']:.2f}",
                f"{f['memory_load_s']:.1f} / {f['redis_load_s']:.1f}",
            ]
        )
    report = "\n".join(
        [
            "# Memory search: 10k and 100k memories in one namespace",
            "",
            f"One run; {args.queries} two-or-three-word queries (Zipf-distributed words, so common and rare terms"
            f" both occur) over memories of {WORDS_PER_MEMORY} words from a {VOCABULARY:,}-word vocabulary, limit"
            f" {LIMIT}, text mode unless stated. Redis: a private redis-server {redis_version()}, no persistence."
            f" Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()},"
            f" bm25s {bm25s.__version__}. Each query runs every search below in turn (interleaved), so a busy"
            " machine slows them alike; ratios are p50 against the raw bm25s call and against the substring scan.",
            "",
            "## Search latency",
            "",
            table(["memories", "search", "p50 ms", "p99 ms", "p50 vs raw", "p50 vs substring scan"], latency_rows),
            "",
            "## Memory per stored memory",
            "",
            "Bytes per memory. `plain`: the memories as Python tuples (key, value dict, text), the baseline."
            " `index`: one in-process namespace with its tokens and BM25 snapshot (no embeddings)."
            " `Redis`: used_memory growth per memory, 256-dimension embeddings included (1 KiB of float32,"
            " stored base64). The BM25 build and first search are what a replica pays for a namespace it has"
            " not indexed yet (and, in the background, after writes).",
            "",
            table(
                [
                    "memories",
                    "plain B",
                    "index B",
                    "index vs plain",
                    "Redis B",
                    "Redis vs plain",
                    "raw bm25s build s",
                    "first search s (in-process / Redis)",
                    "load s (in-process / Redis)",
                ],
                memory_rows,
            ),
            "",
        ]
    )
    print(report)
    path = write_result("memory", report)
    print(f"written to {path}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
