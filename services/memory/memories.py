"""The memory service's domain: put, get, delete, list and search over any store.

Search runs per namespace under the prefix, on that namespace's index: BM25 over the
indexed text (services.memory.index), equality filters on top-level value fields, and
with an embedder cosine similarity; hybrid fuses the text and vector ranks by
reciprocal rank fusion (score = sum of 1 / (RRF_K + rank)), which needs no tuning of
the two scores' scales against each other. Results of several namespaces merge by score.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import heapq
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from services.kit.errors import FailedPrecondition, InvalidArgument
from services.kit.logging import log
from services.memory.embeddings import Embedder, EmbeddingFailed
from services.memory.index import NamespaceIndex, tokenize
from services.memory.model import JsonObject, Limits, MemoryNotFound, Namespace, Record, index_text
from services.memory.store import MemoryStore

RRF_K = 60
MAX_SEARCH_NAMESPACES = 1_000  # a search reads every namespace under its prefix: a tenant-wide one is bounded
FUSION_DEPTH = 4  # hybrid fuses the best limit * FUSION_DEPTH of each ranking


class Mode(enum.Enum):
    AUTO = "auto"
    TEXT = "text"
    VECTOR = "vector"
    HYBRID = "hybrid"


@dataclass
class Hit:
    namespace: Namespace
    record: Record
    score: float


@dataclass
class SearchOutcome:
    hits: list[Hit]
    mode: Mode
    fallback_reason: str = ""


def encode_token(position: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode()


def decode_token(token: str, field: str = "page_token") -> Any:
    try:
        return json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgument([(field, "is not a token this service returned")]) from exc


def _ranks(scored: list[tuple[str, float]]) -> dict[str, int]:
    best = sorted(scored, key=lambda pair: -pair[1])
    return {key: rank for rank, (key, _) in enumerate(best, start=1)}


class Memories:
    def __init__(self, store: MemoryStore, limits: Limits, embedder: Embedder | None = None):
        self.store = store
        self.limits = limits
        self.embedder = embedder

    async def put(
        self, namespace: Namespace, key: str, value: JsonObject, text: str, ttl_s: float | None
    ) -> tuple[Record, bool]:
        indexed = index_text(value, text)
        embedding = None
        if self.embedder is not None and indexed.strip():
            embedding = (await self.embedder.embed([indexed]))[0]
        ttl = self.limits.default_ttl_s if ttl_s is None else ttl_s
        return await self.store.put(namespace, key, value, indexed, embedding, int(ttl * 1000))

    async def get(self, namespace: Namespace, key: str) -> Record:
        record = await self.store.get(namespace, key)
        if record is None:
            raise MemoryNotFound(namespace.labels, key)
        return record

    async def delete(self, namespace: Namespace, key: str) -> bool:
        return await self.store.delete(namespace, key)

    async def list_page(
        self, tenant: str, prefix: tuple[str, ...], page_size: int, page_token: str
    ) -> tuple[list[tuple[Namespace, Record]], str]:
        after_labels: tuple[str, ...] = ()
        after_key = ""
        if page_token:
            position = decode_token(page_token)
            if not (isinstance(position, list) and len(position) == 2 and isinstance(position[1], str)):
                raise InvalidArgument([("page_token", "is not a token this service returned")])
            after_labels, after_key = tuple(position[0]), position[1]
        page: list[tuple[Namespace, Record]] = []
        for namespace in await self.store.namespaces(tenant, prefix):
            if namespace.labels < after_labels:
                continue
            index = await self.store.reader(namespace)
            keys = index.sorted_keys(after_key if namespace.labels == after_labels else "")
            for key in keys[: page_size + 1 - len(page)]:
                page.append((namespace, index.records[key]))
            if len(page) > page_size:
                break
        if len(page) <= page_size:
            return page, ""
        last_namespace, last = page[page_size - 1]
        return page[:page_size], encode_token([list(last_namespace.labels), last.key])

    async def namespaces(
        self, tenant: str, prefix: tuple[str, ...], max_depth: int, page_size: int, page_token: str
    ) -> tuple[list[tuple[str, ...]], str]:
        after: tuple[str, ...] | None = None
        if page_token:
            position = decode_token(page_token)
            if not (isinstance(position, list) and all(isinstance(label, str) for label in position)):
                raise InvalidArgument([("page_token", "is not a token this service returned")])
            after = tuple(position)
        candidates = await self.store.namespaces(tenant, prefix)
        counts = await asyncio.gather(*(self.store.count(ns) for ns in candidates))
        held = [ns for ns, count in zip(candidates, counts, strict=True) if count]
        found = sorted({ns.labels[:max_depth] if max_depth else ns.labels for ns in held})
        if after is not None:
            found = [labels for labels in found if labels > after]
        if len(found) <= page_size:
            return found, ""
        return found[:page_size], encode_token(list(found[page_size - 1]))

    async def search(
        self, tenant: str, prefix: tuple[str, ...], query: str, filter: JsonObject, limit: int, mode: Mode
    ) -> SearchOutcome:
        if mode in (Mode.VECTOR, Mode.HYBRID) and self.embedder is None:
            raise FailedPrecondition(
                f"{mode.value} search needs an embedding model; set COGMESH_MEMORY_EMBEDDING_MODEL on the memory "
                "service, or search in text mode"
            )
        if mode is Mode.AUTO:
            mode = Mode.HYBRID if self.embedder is not None else Mode.TEXT
        outcome = SearchOutcome([], mode)
        words = tokenize([query])[0] if query else []
        vector = None
        if query and mode is not Mode.TEXT:
            assert self.embedder is not None
            try:
                vector = (await self.embedder.embed([query]))[0]
            except EmbeddingFailed as exc:
                if mode is Mode.VECTOR:
                    raise
                log.warning("memory search falls back to text ranking", error=exc.message)
                outcome.mode, outcome.fallback_reason = Mode.TEXT, exc.message
        namespaces = await self.store.namespaces(tenant, prefix)
        if len(namespaces) > MAX_SEARCH_NAMESPACES:
            raise FailedPrecondition(
                f"namespace_prefix {list(prefix)} covers {len(namespaces)} namespaces; a search reads at most "
                f"{MAX_SEARCH_NAMESPACES}: give a longer prefix",
                metadata={"namespaces": str(len(namespaces)), "limit": str(MAX_SEARCH_NAMESPACES)},
            )
        hits: list[Hit] = []
        for namespace in namespaces:
            index = await self.store.reader(namespace)
            scored = await self._rank(index, query, words, vector, filter, limit, outcome.mode)
            hits.extend(Hit(namespace, index.records[key], score) for key, score in scored if key in index.records)
        outcome.hits = heapq.nlargest(limit, hits, key=lambda hit: (hit.score, hit.record.updated_ms, hit.record.key))
        return outcome

    async def _rank(
        self,
        index: NamespaceIndex,
        query: str,
        words: list[str],
        vector: Any,
        filter: JsonObject,
        limit: int,
        mode: Mode,
    ) -> Iterable[tuple[str, float]]:
        if not query:
            return [(record.key, 0.0) for record in index.newest(filter, limit)]
        depth = limit if mode is not Mode.HYBRID else limit * FUSION_DEPTH
        text = await index.text_scores(words, filter, depth) if mode in (Mode.TEXT, Mode.HYBRID) else []
        if mode is Mode.TEXT:
            return text
        similar = index.vector_scores(vector, filter, depth)
        if mode is Mode.VECTOR:
            return similar
        fused: dict[str, float] = {}
        for ranks in (_ranks(text), _ranks(similar)):
            for key, rank in ranks.items():
                fused[key] = fused.get(key, 0.0) + 1.0 / (RRF_K + rank)
        return heapq.nlargest(limit, fused.items(), key=lambda pair: pair[1])
