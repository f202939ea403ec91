"""The models service's catalogue held in the runtime: models resolved in process, no round trip.

The models service pushes the catalogue as versioned snapshots (WatchCatalog); the
runtime answers ResolveModel from the last one with the service's own rules
(services/lib/models). Until the first snapshot arrives, and only then, a turn
asks the service (ResolveModel), so a turn never waits for the watch to sync. The
same watcher feeds the runtime's agents (services/runtime/main.py): one stream.
"""

from __future__ import annotations

from cogmesh.models.v1 import models_pb2
from services.kit.clients import Clients, call
from services.lib.models.watch import CatalogWatcher, catalog_watcher, resolve_held


class ModelCatalogLink:
    def __init__(self, clients: Clients) -> None:
        self.clients = clients
        self.watcher: CatalogWatcher = catalog_watcher(clients)

    @property
    def version(self) -> str:
        """The catalogue version decisions are made with; "" while the service is asked instead."""
        return self.watcher.version

    def start(self) -> None:
        self.watcher.start()

    async def close(self) -> None:
        await self.watcher.close()

    async def resolve(self, request: models_pb2.ResolveModelRequest) -> models_pb2.ResolveModelResponse:
        self.watcher.start()  # idempotent: the first turn of a replica built outside `build` starts it
        reply = resolve_held(self.watcher, request)
        if reply is None:
            return await call("models", self.clients.models.ResolveModel, request)  # type: ignore[no-any-return]
        return reply
