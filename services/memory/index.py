"""One namespace's memories, indexed for search: BM25 (bm25s), equality filters and vectors.

BM25 comes from bm25s (method "lucene": its idf, log(1 + (N - n + 0.5) / (n + 0.5)), is
positive for every term, so a term found in half of the memories, or a namespace of one
or two memories, still ranks; rank_bm25's Okapi idf scores those zero, issues #39/#43).

bm25s builds an immutable index, at about 50 µs a memory (5 s for 100,000), so the
index here is a snapshot plus a tail:
* the snapshot is built over every memory at some moment; memories changed or deleted
  since are masked out of its scores (bm25s's weight_mask);
* the changed memories (the tail) are scored by the same lucene formula with the
  snapshot's statistics (N, document frequencies, average length), so a memory scores in
  the tail what it would in the snapshot, up to those statistics' drift;
* a namespace of at most INLINE_REBUILD memories rebuilds its snapshot at once, so its
  ranking is exact; a larger one rebuilds in a worker thread once its tail holds
  1/1000 of it (at least 16 memories), searching meanwhile, and waits for a rebuild only
  when the tail grows past TAIL_MAX. A memory saved is found by the very next search.
  The rebuild is Python work holding the GIL between numpy calls, so it is rationed.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import bm25s
import numpy as np

from services.memory.model import Record

INLINE_REBUILD = 256
TAIL_MAX = 1024
REBUILD_MIN, REBUILD_SHARE = 16, 1000  # a background rebuild once the tail holds max(16, N / 1000) memories
K1, B = 1.5, 0.75  # bm25s's defaults, named: the tail is scored with them too


def tokenize(texts: list[str]) -> list[list[str]]:
    """Lower-cased word tokens without English stop words, as bm25s splits them."""
    if not texts:
        return []
    return bm25s.tokenize(texts, return_ids=False, show_progress=False, stopwords="en")  # type: ignore[no-any-return]


def canonical(value: Any) -> str:
    """A filter value as a comparable string: 1 and 1.0 are equal (JSON numbers travel as doubles)."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return f"n:{float(value)!r}"
    if isinstance(value, str):
        return f"s:{value}"
    return "j:" + json.dumps(value, sort_keys=True, separators=(",", ":"))


Filter = dict[str, Any]  # top-level field -> the JSON value it must equal
MAX_CACHED_MASKS = 64  # filter masks kept per snapshot (one per field and value)


@dataclass
class _Rows:
    """Row i of a matrix (BM25 scores, embeddings) is keys[i]; filter masks over the rows, cached.

    A mask is built once per snapshot and filter value: memories changed since the snapshot
    are masked out of it anyway, so it stays right until the snapshot is replaced.
    """

    keys: list[str]
    rows: dict[str, int]
    masks: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, keys: list[str]) -> _Rows:
        return cls(keys, {key: row for row, key in enumerate(keys)})

    def mask(self, index: NamespaceIndex, filter: Filter) -> np.ndarray:
        combined = np.ones(len(self.keys), dtype=bool)
        for name, want in filter.items():
            cached = self.masks.get((name, canonical(want)))
            if cached is None:
                if len(self.masks) >= MAX_CACHED_MASKS:
                    self.masks.clear()
                cached = np.zeros(len(self.keys), dtype=bool)
                cached[[row for key in index.postings(name, want) if (row := self.rows.get(key)) is not None]] = True
                self.masks[(name, canonical(want))] = cached
            combined &= cached
        return combined


@dataclass
class _Bm25:
    """A bm25s index over some memories, and its corpus statistics for scoring the tail alike."""

    rows: _Rows
    retriever: bm25s.BM25 | None  # None: no memories
    doc_freq: Counter[str]
    avg_len: float

    @classmethod
    def build(cls, keys: list[str], corpus: list[list[str]]) -> _Bm25:
        doc_freq = Counter(word for words in corpus for word in set(words))
        avg_len = sum(map(len, corpus)) / len(corpus) if corpus else 0.0
        if not doc_freq:  # bm25s cannot index a corpus without a single token
            return cls(_Rows.of(keys), None, doc_freq, avg_len)
        retriever = bm25s.BM25(k1=K1, b=B, method="lucene")
        retriever.index(corpus, show_progress=False)
        return cls(_Rows.of(keys), retriever, doc_freq, avg_len)

    def scores(self, query: list[str], mask: np.ndarray | None, limit: int) -> list[tuple[str, float]]:
        """(key, score) of the best `limit` memories with a positive score."""
        if self.retriever is None:
            return []
        return top(self.rows.keys, self.retriever.get_scores(query, weight_mask=mask), limit)

    def tail_scores(self, query: list[str], docs: Iterable[tuple[str, list[str]]]) -> list[tuple[str, float]]:
        """Scores of memories outside the snapshot, by bm25s's lucene formula with the snapshot's statistics.

        idf(t) = log(1 + (N - df + 0.5) / (df + 0.5)), tf part = tf / (tf + k1 (1 - b + b dl / avgdl)):
        the scores the snapshot would give them, but for the few memories changed since it was built.
        """
        n, avg = len(self.rows.keys), self.avg_len or 1.0
        idf = {word: math.log(1 + (n - self.doc_freq[word] + 0.5) / (self.doc_freq[word] + 0.5)) for word in query}
        hits = []
        for key, words in docs:
            counts = Counter(word for word in words if word in idf)
            if not counts:
                continue
            norm = K1 * (1 - B + B * len(words) / avg)
            hits.append(
                (key, sum(idf[word] * counts[word] / (counts[word] + norm) for word in query if word in counts))
            )
        return hits


def top(keys: list[str], scores: np.ndarray, limit: int) -> list[tuple[str, float]]:
    """The `limit` best (key, score) pairs with a positive score, selected in numpy (no Python loop over all)."""
    best = np.argpartition(-scores, limit - 1)[:limit] if len(scores) > limit else np.arange(len(scores))
    return [(keys[row], float(scores[row])) for row in best if scores[row] > 0]


class NamespaceIndex:
    """The live memories of one namespace and their search indexes; all on one event loop."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        self.bytes = 0
        self._tokens: dict[str, list[str]] = {}
        self._vocab: dict[str, str] = {}  # one string object per distinct token
        self._expiring: list[tuple[int, str]] = []  # heap of (expire_ms, key); stale entries skipped
        self._sorted: list[str] | None = None
        # BM25: the snapshot and what changed since it (key -> change number), scored as its tail.
        self._changes = 0
        self._snapshot: _Bm25 | None = None
        self._snapshot_as_of = 0
        self._stale: dict[str, int] = {}
        self._rebuild: asyncio.Task[None] | None = None
        # Filters: field -> canonical value -> keys, built per field on its first use.
        self._fields: dict[str, dict[str, set[str]]] = {}
        # Vectors: the matrix of unit embeddings, rebuilt on the first vector search after a change.
        self._matrix: tuple[_Rows, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.records)

    # ------------------------------------------------------------------ changes

    def upsert(self, record: Record, tokens: list[str] | None = None) -> Record | None:
        """Add or replace a memory; returns the one it replaced."""
        old = self.remove(record.key, quiet=True)
        key = record.key
        self.records[key] = record
        self.bytes += record.size
        words = tokens if tokens is not None else tokenize([record.text])[0]
        self._tokens[key] = [self._vocab.setdefault(word, word) for word in words]
        if record.expire_ms:
            heapq.heappush(self._expiring, (record.expire_ms, key))
        for name, values in self._fields.items():
            if name in record.value:
                values.setdefault(canonical(record.value[name]), set()).add(key)
        if old is None:
            self._sorted = None
        if record.embedding is not None or (old is not None and old.embedding is not None):
            self._matrix = None
        self._changed(key)
        return old

    def remove(self, key: str, *, quiet: bool = False) -> Record | None:
        record = self.records.pop(key, None)
        if record is None:
            return None
        self.bytes -= record.size
        del self._tokens[key]
        for name, values in self._fields.items():
            if name in record.value:
                values.get(canonical(record.value[name]), set()).discard(key)
        if not quiet:
            self._sorted = None
            self._changed(key)
            if record.embedding is not None:
                self._matrix = None
        return record

    def expired(self, now_ms: int) -> list[str]:
        """Keys of memories past their expiry (still held: the caller removes them)."""
        due: list[str] = []
        while self._expiring and self._expiring[0][0] <= now_ms:
            expire_ms, key = heapq.heappop(self._expiring)
            record = self.records.get(key)
            if record is not None and record.expire_ms == expire_ms:
                due.append(key)
        return due

    def _changed(self, key: str) -> None:
        self._changes += 1
        self._stale[key] = self._changes

    # ------------------------------------------------------------------ reading

    def sorted_keys(self, after: str = "") -> list[str]:
        if self._sorted is None:
            self._sorted = sorted(self.records)
        return self._sorted[bisect.bisect_right(self._sorted, after) :] if after else self._sorted

    def postings(self, name: str, want: Any) -> set[str]:
        """Keys whose value has `name` equal to `want` (the field's index is built on first use)."""
        values = self._fields.get(name)
        if values is None:
            values = self._fields[name] = {}
            for key, record in self.records.items():
                if name in record.value:
                    values.setdefault(canonical(record.value[name]), set()).add(key)
        return values.get(canonical(want), set())

    def allows(self, key: str, filter: Filter) -> bool:
        record = self.records.get(key)
        return record is not None and all(
            name in record.value and canonical(record.value[name]) == canonical(want) for name, want in filter.items()
        )

    def matching(self, filter: Filter) -> set[str] | None:
        """Keys whose value equals the filter on every field; None: no filter."""
        if not filter:
            return None
        sets = sorted((self.postings(name, want) for name, want in filter.items()), key=len)
        return {key for key in sets[0] if all(key in other for other in sets[1:])}

    def newest(self, filter: Filter, limit: int) -> list[Record]:
        allowed = self.matching(filter)
        candidates: Iterable[Record] = (
            self.records.values() if allowed is None else (self.records[k] for k in allowed if k in self.records)
        )
        return heapq.nlargest(limit, candidates, key=lambda r: (r.updated_ms, r.key))

    async def text_scores(self, query: list[str], filter: Filter, limit: int) -> list[tuple[str, float]]:
        """(key, BM25 score) of the best `limit` memories sharing a term with the query and matching the filter."""
        if not query or not self.records:
            return []
        snapshot = await self._fresh_snapshot()
        rows = snapshot.rows
        mask = None
        if filter or self._stale:
            mask = rows.mask(self, filter).astype(np.float32)
            mask[[row for key in self._stale if (row := rows.rows.get(key)) is not None]] = 0
        hits = snapshot.scores(query, mask, limit)
        if self._stale:
            tail = ((key, self._tokens[key]) for key in self._stale if key in self.records)
            fresh = snapshot.tail_scores(query, tail)
            hits += [(key, score) for key, score in fresh if not filter or self.allows(key, filter)]
        return heapq.nlargest(limit, hits, key=lambda pair: pair[1])

    def vector_scores(self, query: np.ndarray, filter: Filter, limit: int) -> list[tuple[str, float]]:
        """(key, cosine similarity) of the best `limit` memories with an embedding and matching the filter."""
        if self._matrix is None:
            vectors = {key: record.embedding for key, record in self.records.items() if record.embedding is not None}
            matrix = np.stack(list(vectors.values())) if vectors else np.zeros((0, len(query)), np.float32)
            self._matrix = (_Rows.of(list(vectors)), matrix)
        rows, matrix = self._matrix
        if not rows.keys or matrix.shape[1] != len(query):
            return []
        # Shifted to (0, 2]: `top` keeps positive scores, and a filtered-out row is 0.
        similarity = matrix @ query + 1.0
        if filter:
            similarity = np.where(rows.mask(self, filter), similarity, 0.0)
        return [(key, score - 1.0) for key, score in top(rows.keys, similarity, limit)]

    # ------------------------------------------------------------------ BM25 snapshot

    async def _fresh_snapshot(self) -> _Bm25:
        if self._snapshot is not None and not self._stale:
            return self._snapshot
        if len(self.records) <= INLINE_REBUILD:
            self._install(self._corpus())
        elif self._snapshot is None or len(self._stale) > TAIL_MAX:
            await asyncio.shield(self._start_rebuild())
            if self._snapshot is None or len(self._stale) > TAIL_MAX:  # it changed again while that one ran
                await asyncio.shield(self._start_rebuild())
        elif len(self._stale) >= min(TAIL_MAX // 2, max(REBUILD_MIN, len(self.records) // REBUILD_SHARE)):
            self._start_rebuild()  # searches use the snapshot and the tail until it lands
        assert self._snapshot is not None
        return self._snapshot

    def _corpus(self) -> tuple[int, list[str], list[list[str]]]:
        keys = list(self._tokens)
        return self._changes, keys, [self._tokens[key] for key in keys]

    def _install(self, corpus: tuple[int, list[str], list[list[str]]], built: _Bm25 | None = None) -> None:
        as_of, keys, tokens = corpus
        if self._snapshot is not None and as_of < self._snapshot_as_of:
            return  # a newer snapshot landed meanwhile
        self._snapshot = built if built is not None else _Bm25.build(keys, tokens)
        self._snapshot_as_of = as_of
        self._stale = {key: change for key, change in self._stale.items() if change > as_of}

    def _start_rebuild(self) -> asyncio.Task[None]:
        if self._rebuild is None or self._rebuild.done():
            self._rebuild = asyncio.create_task(self._rebuild_once())
        return self._rebuild

    async def _rebuild_once(self) -> None:
        corpus = self._corpus()  # copied on the loop: the thread never sees a dict change under it
        built = await asyncio.to_thread(_Bm25.build, corpus[1], corpus[2])
        self._install(corpus, built)
