"""Memory service entry point: `python -m services.memory`.

The store follows the settings: COGMESH_REDIS_URL (or --redis-url) selects the Redis
store that every replica shares; without it memories live in this process's memory.
COGMESH_MEMORY_EMBEDDING_MODEL turns on vector search through its provider.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from cogmesh.memory.v1 import memory_pb2, memory_pb2_grpc
from services.kit.clients import Clients
from services.kit.logging import log
from services.kit.server import App, mount, run
from services.memory.embeddings import Embedder
from services.memory.memories import Memories
from services.memory.model import Limits
from services.memory.servicer import MemoryServicer
from services.memory.settings import MemorySettings
from services.memory.store import InProcessMemoryStore, MemoryStore


def limits_of(settings: MemorySettings) -> Limits:
    return Limits(
        max_items=settings.memory_max_items,
        max_bytes=settings.memory_max_bytes,
        max_value_bytes=settings.memory_max_value_bytes,
        default_ttl_s=settings.memory_ttl_s,
    )


async def open_store(settings: MemorySettings, limits: Limits) -> MemoryStore:
    if not settings.redis_url:
        return InProcessMemoryStore(limits)
    from services.memory.redis_store import open_redis_store

    return await open_redis_store(settings, limits)


async def build(settings: MemorySettings, clients: Clients) -> App:
    limits = limits_of(settings)
    embedder = Embedder.from_settings(settings)
    store = await open_store(settings, limits)
    on_close: list[Callable[[], Awaitable[None]]] = [store.close]
    if embedder is not None:
        on_close.append(embedder.close)
    log.info(
        "memory store",
        kind="redis" if settings.redis_url else "memory",
        embeddings=f"{embedder.provider}/{embedder.model}" if embedder else "off",
    )
    servicer = MemoryServicer(Memories(store, limits, embedder))
    return App("memory", [mount(servicer, memory_pb2, memory_pb2_grpc, "MemoryService")], on_close)


def main() -> None:
    run("memory", build, MemorySettings)
