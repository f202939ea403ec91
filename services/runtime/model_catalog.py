"""The models service's catalogue held in the runtime: models resolved in process, no round trip.

The models service pushes the catalogue as versioned snapshots (WatchCatalog); the
runtime answers ResolveModel from the last one with the service's own rules
(services/lib/models). Until the first snapshot arrives, and only then, a turn
asks the service (ResolveModel), so a turn never waits for the watch to sync.
"""

from __future__ import annotations

from cogmesh.models.v1 import models_pb2
from services.kit.clients import Clients, call
from services.kit.snapshots import SnapshotWatcher, stream_of
from services.lib.models.api import catalog_of, resolve_model
from services.lib.models.catalog import ModelCatalog

Held = tuple[ModelCatalog, bool]  # the catalogue and whether the service resolves strictly


def _apply(message: models_pb2.WatchCatalogResponse) -> Held:
    return catalog_of(message.snapshot), message.snapshot.strict


class ModelCatalogLink:
    def __init__(self, clients: Clients) -> None:
        self.clients = clients
        self.watcher: SnapshotWatcher[Held, models_pb2.WatchCatalogResponse] = SnapshotWatcher(
            "models",
            stream_of(
                lambda: clients.models.WatchCatalog, lambda known: models_pb2.WatchCatalogRequest(known_version=known)
            ),
            _apply,
            lambda message: message.snapshot.version,
        )

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
        held = self.watcher.current_or_none()
        if held is None:
            return await call("models", self.clients.models.ResolveModel, request)  # type: ignore[no-any-return]
        catalog, strict = held
        return resolve_model(catalog, request, strict)
