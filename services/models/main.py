"""Models service entry point: `python -m services.models`.

It owns the model catalogue and the agents folder: both are published to every other
process as one versioned snapshot (WatchCatalog), on change."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from cogmesh.models.v1 import models_pb2, models_pb2_grpc
from services.kit.clients import Clients
from services.kit.filewatch import FolderWatch
from services.kit.logging import log
from services.kit.redis_pool import pooled_client
from services.kit.server import App, mount, run
from services.lib.agents import load_agents
from services.lib.models.catalog import DEFAULT_CATALOG_PATH
from services.models.registry import FileModelStore, ModelRegistry, ModelStore, RedisModelStore
from services.models.servicer import ModelsServicer
from services.models.settings import ModelsSettings

# With Redis, other replicas' AddModel/RemoveModel are announced (pub/sub); the store's version
# is still read this often in case an announcement was lost.
STORE_RECHECK_S = 60.0


async def build(settings: ModelsSettings, clients: Clients) -> App:
    on_close: list[Callable[[], Awaitable[None]]] = []
    store: ModelStore | None = None
    redis_url = settings.redis_url
    if redis_url:
        timeout = settings.redis_timeout_s
        client = pooled_client(redis_url, timeout)
        store = RedisModelStore(client, settings.redis_key_prefix)

        async def close() -> None:
            await client.aclose()

        on_close.append(close)
    elif settings.models_store_file is not None:
        store = FileModelStore(settings.models_store_file)
    registry = ModelRegistry(settings.models_file or DEFAULT_CATALOG_PATH, store, refresh_s=settings.models_refresh_s)
    if isinstance(store, RedisModelStore):
        registry.store_announces_changes(max(STORE_RECHECK_S, settings.models_refresh_s))
    await registry.start()
    # The one process that reads the agents folder: the others take the agents from the snapshot.
    agents = load_agents(settings.agents_dir)
    servicer = ModelsServicer(registry, strict=settings.models_strict, agents=agents)
    await servicer.publisher.refresh()

    # The catalogue (file stamp, store version) and the agents folder (its files' stamps) are looked
    # at when their folders change (or on a clock where the platform does not say), pushed on change.
    catalogue = registry.path
    files = [catalogue] if settings.models_store_file is None else [catalogue, settings.models_store_file]
    watch = FolderWatch.of_files(files, trees=[agents.directory], poll_s=settings.models_refresh_s or 1.0)

    async def publish() -> None:
        while True:
            await watch.wait()
            try:
                await servicer.publisher.refresh(look_at_files=True)
            except Exception as exc:  # noqa: BLE001 - one bad refresh must not end the publishing for good
                log.error("publishing the model catalogue failed; watchers keep the last version", error=repr(exc))

    tasks = [asyncio.create_task(publish())]
    if isinstance(store, RedisModelStore):

        async def store_changed() -> None:
            try:
                await registry.store_changed()
                await servicer.publisher.refresh()
            except Exception as exc:  # noqa: BLE001 - the next announcement or recheck tries again
                log.error("publishing the model catalogue failed; watchers keep the last version", error=repr(exc))

        tasks.append(asyncio.create_task(store.follow(store_changed)))

    async def stop_publishing() -> None:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        watch.close()

    on_close.insert(0, stop_publishing)
    return App("models", [mount(servicer, models_pb2, models_pb2_grpc, "ModelsService")], on_close)


def main() -> None:
    run("models", build, ModelsSettings)
