"""Where memories are kept: the store interface and the in-process store (the default).

A store keeps each namespace's memories, applies TTLs and the namespace caps
atomically with the write, and hands out a namespace's index (services.memory.index)
for reading: search and listing run on it, whichever store holds the data.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from services.memory.index import NamespaceIndex
from services.memory.model import (
    MAX_BYTES_SETTING,
    MAX_ITEMS_SETTING,
    JsonObject,
    Limits,
    Namespace,
    NamespaceFull,
    Record,
    encode_body,
)


def now_ms() -> int:
    return int(time.time() * 1000)


class MemoryStore(Protocol):
    async def put(
        self,
        namespace: Namespace,
        key: str,
        value: JsonObject,
        text: str,
        embedding: np.ndarray | None,
        ttl_ms: int,
    ) -> tuple[Record, bool]:
        """Store a memory (ttl_ms 0: no expiry); returns it as stored and whether the key was new.

        Raises NamespaceFull when the namespace would go over a cap."""
        ...

    async def get(self, namespace: Namespace, key: str) -> Record | None: ...

    async def delete(self, namespace: Namespace, key: str) -> bool: ...

    async def namespaces(self, tenant: str, prefix: tuple[str, ...]) -> list[Namespace]:
        """The tenant's namespaces under `prefix`, in label order: every one that holds memories, and
        perhaps some that held them once (`count` tells)."""
        ...

    async def count(self, namespace: Namespace) -> int:
        """Live memories in the namespace."""
        ...

    async def reader(self, namespace: Namespace) -> NamespaceIndex:
        """The namespace's live memories, indexed; read it before the next await."""
        ...

    async def close(self) -> None: ...


def check_caps(namespace: Namespace, index: NamespaceIndex, old: Record | None, size: int, limits: Limits) -> None:
    """Raise NamespaceFull when storing `size` bytes (replacing `old`) goes over a cap."""
    if old is None and len(index) >= limits.max_items:
        raise NamespaceFull(namespace, "items", MAX_ITEMS_SETTING, limits.max_items, len(index))
    if index.bytes - (old.size if old else 0) + size > limits.max_bytes:
        raise NamespaceFull(namespace, "bytes", MAX_BYTES_SETTING, limits.max_bytes, index.bytes)


class InProcessMemoryStore:
    """Memories in this process's memory: fast, lost on restart, not shared between replicas."""

    def __init__(self, limits: Limits, clock_ms: Callable[[], int] = now_ms):
        self._limits = limits
        self._clock_ms = clock_ms
        self._namespaces: dict[Namespace, NamespaceIndex] = {}

    def _live(self, namespace: Namespace) -> NamespaceIndex:
        index = self._namespaces.get(namespace)
        if index is None:
            return NamespaceIndex()
        for key in index.expired(self._clock_ms()):
            index.remove(key)
        if not len(index):
            del self._namespaces[namespace]
        return index

    async def put(
        self,
        namespace: Namespace,
        key: str,
        value: JsonObject,
        text: str,
        embedding: np.ndarray | None,
        ttl_ms: int,
    ) -> tuple[Record, bool]:
        index = self._live(namespace)
        old = index.records.get(key)
        size = len(encode_body(value, text, embedding).encode())
        check_caps(namespace, index, old, size, self._limits)
        now = self._clock_ms()
        record = Record(
            key, value, text, old.created_ms if old else now, now, now + ttl_ms if ttl_ms else 0, size, embedding
        )
        index.upsert(record)
        self._namespaces[namespace] = index
        return record, old is None

    async def get(self, namespace: Namespace, key: str) -> Record | None:
        return self._live(namespace).records.get(key)

    async def delete(self, namespace: Namespace, key: str) -> bool:
        index = self._live(namespace)
        removed = index.remove(key) is not None
        if not len(index):
            self._namespaces.pop(namespace, None)
        return removed

    async def namespaces(self, tenant: str, prefix: tuple[str, ...]) -> list[Namespace]:
        return sorted(ns for ns in self._namespaces if ns.tenant == tenant and ns.under(prefix))

    async def count(self, namespace: Namespace) -> int:
        return len(self._live(namespace))

    async def reader(self, namespace: Namespace) -> NamespaceIndex:
        return self._live(namespace)

    async def close(self) -> None:
        self._namespaces.clear()
