"""ModelsService over the ModelRegistry: proto in, catalogue lookup, proto out.

WatchCatalog also carries the agents folder: the models service is the one process that
reads it, and every other process takes its agents from the snapshot."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from cogmesh.models.v1 import models_pb2, models_pb2_grpc
from services.kit.errors import InvalidArgument, Unavailable
from services.kit.snapshots import SnapshotFeed
from services.lib.agents import ReloadingAgentRegistry
from services.lib.models.api import model_from_proto, model_to_proto, resolve_model, snapshot_of
from services.lib.models.catalog import ModelCatalog
from services.models.registry import ModelConflict, ModelExists, ModelRegistry, StoreError


class AlreadyExists(InvalidArgument):
    """ALREADY_EXISTS with the offending field named, as for bad input."""

    code = grpc.StatusCode.ALREADY_EXISTS


class CatalogPublisher:
    """Publishes the catalogue and the agents to watchers whenever either changes.

    The catalogue changes on a reload of its file, AddModel and RemoveModel; the agents
    when `refresh(look_at_files=True)` finds the folder changed (the publish loop, woken by a change).
    """

    def __init__(self, registry: ModelRegistry, strict: bool, agents: ReloadingAgentRegistry | None = None) -> None:
        self.registry, self.strict, self.agents = registry, strict, agents
        self.feed: SnapshotFeed[models_pb2.WatchCatalogResponse] = SnapshotFeed()
        self._published: tuple[ModelCatalog, int] | None = None  # the catalogue and the agents' reload count

    async def refresh(self, look_at_files: bool = False) -> None:
        if look_at_files and self.agents is not None:
            self.agents.reload_now()
        catalog = await self.registry.catalog(look=look_at_files)
        held = self._published
        if held is not None and held[0] is catalog and held[1] == self._agents_reloads():
            return
        agents_dir = self.agents.directory if self.agents is not None else None
        snapshot = snapshot_of(catalog, self.strict, self.agents, agents_dir)
        self._published = (catalog, self._agents_reloads())  # after the snapshot: its reads may have reloaded
        await self.feed.publish(snapshot.version, models_pb2.WatchCatalogResponse(snapshot=snapshot))

    def _agents_reloads(self) -> int:
        return self.agents.reloads if self.agents is not None else 0


class ModelsServicer(models_pb2_grpc.ModelsServiceServicer):
    def __init__(self, registry: ModelRegistry, *, strict: bool = False, agents: ReloadingAgentRegistry | None = None):
        self.registry = registry
        self.strict = strict
        self.publisher = CatalogPublisher(registry, strict, agents)

    async def WatchCatalog(
        self, request: models_pb2.WatchCatalogRequest, context: Any
    ) -> AsyncIterator[models_pb2.WatchCatalogResponse]:
        await self.publisher.refresh()
        async for message in self.publisher.feed.watch(request.known_version):
            yield message

    async def ResolveModel(
        self, request: models_pb2.ResolveModelRequest, context: Any
    ) -> models_pb2.ResolveModelResponse:
        return resolve_model(await self.registry.catalog(), request, self.strict)

    async def ListModels(self, request: models_pb2.ListModelsRequest, context: Any) -> models_pb2.ListModelsResponse:
        catalog = await self.registry.catalog()
        models = catalog.list_models(request.provider.strip().lower() or None)
        return models_pb2.ListModelsResponse(
            models=[model_to_proto(m) for m in models], default_model=catalog.default_model.id
        )

    async def ListProviders(
        self, request: models_pb2.ListProvidersRequest, context: Any
    ) -> models_pb2.ListProvidersResponse:
        return models_pb2.ListProvidersResponse(providers=(await self.registry.catalog()).list_providers())

    async def ListAliases(self, request: models_pb2.ListAliasesRequest, context: Any) -> models_pb2.ListAliasesResponse:
        catalog = await self.registry.catalog()
        provider = request.provider.strip().lower()
        return models_pb2.ListAliasesResponse(
            aliases=[
                models_pb2.Alias(alias=alias, model_id=model_id)
                for alias, model_id in catalog.list_aliases().items()
                if not provider or catalog.get(model_id).provider == provider
            ]
        )

    async def AddModel(self, request: models_pb2.AddModelRequest, context: Any) -> models_pb2.AddModelResponse:
        spec = model_from_proto(request.model)
        try:
            added = await self.registry.add(spec, replace=request.replace)
        except ModelExists as exc:
            raise AlreadyExists([("model.id", str(exc))]) from exc
        except ModelConflict as exc:
            raise InvalidArgument([(exc.field, exc.problem)]) from exc
        except StoreError as exc:
            raise Unavailable(f"the model store is unavailable: {exc}", metadata={"retryable": "true"}) from exc
        await self.publisher.refresh()
        return models_pb2.AddModelResponse(
            model=model_to_proto(added.model), replaced=added.replaced, persisted=added.persisted
        )

    async def RemoveModel(self, request: models_pb2.RemoveModelRequest, context: Any) -> models_pb2.RemoveModelResponse:
        try:
            removed = await self.registry.remove(request.id)
        except StoreError as exc:
            raise Unavailable(f"the model store is unavailable: {exc}", metadata={"retryable": "true"}) from exc
        if removed:
            await self.publisher.refresh()
        return models_pb2.RemoveModelResponse(removed=removed)
