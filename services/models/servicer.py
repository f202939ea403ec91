"""ModelsService over the ModelRegistry: proto in, catalogue lookup, proto out."""

from __future__ import annotations

from typing import Any

import grpc
from pydantic import ValidationError

from cogmesh.common.v1 import errors_pb2, resources_pb2
from cogmesh.models.v1 import models_pb2, models_pb2_grpc
from services.kit.errors import InvalidArgument, NotFound, Unavailable, Violations
from services.models.catalog import ModelSpec, UnknownModelError, format_validation_error
from services.models.registry import ModelConflict, ModelExists, ModelRegistry, StoreError

_MATCH = {
    "alias": models_pb2.MATCH_KIND_ALIAS,
    "full_name": models_pb2.MATCH_KIND_FULL_NAME,
    "prefix": models_pb2.MATCH_KIND_PREFIX,
    "default": models_pb2.MATCH_KIND_DEFAULT,
}
_MAX_NAME = 256


class AlreadyExists(InvalidArgument):
    """ALREADY_EXISTS with the offending field named, as for bad input."""

    code = grpc.StatusCode.ALREADY_EXISTS


def model_to_proto(spec: ModelSpec) -> resources_pb2.Model:
    caps, price = spec.capabilities, spec.pricing
    return resources_pb2.Model(
        id=spec.id,
        provider=spec.provider,
        aliases=list(spec.aliases),
        description=spec.description,
        context_window=spec.context_window,
        max_output_tokens=spec.max_output_tokens,
        capabilities=resources_pb2.ModelCapabilities(
            tools=caps.tools, streaming=caps.streaming, vision=caps.vision, structured_output=caps.structured_output
        ),
        pricing=resources_pb2.ModelPricing(
            input_per_million_usd=price.input_per_million_usd, output_per_million_usd=price.output_per_million_usd
        ),
    )


def model_from_proto(model: resources_pb2.Model) -> ModelSpec:
    """Validate a proto model; every problem is reported as ``model.<field>``."""
    try:
        return ModelSpec.model_validate(
            {
                "id": model.id,
                "provider": model.provider,
                "aliases": list(model.aliases),
                "description": model.description,
                "context_window": model.context_window,
                "max_output_tokens": model.max_output_tokens,
                "capabilities": {
                    "tools": model.capabilities.tools,
                    "streaming": model.capabilities.streaming,
                    "vision": model.capabilities.vision,
                    "structured_output": model.capabilities.structured_output,
                },
                "pricing": {
                    "input_per_million_usd": model.pricing.input_per_million_usd,
                    "output_per_million_usd": model.pricing.output_per_million_usd,
                },
            }
        )
    except ValidationError as exc:
        raise InvalidArgument(
            [(f"model.{field}" if field else "model", p) for field, p in format_validation_error(exc)]
        ) from exc


class ModelsServicer(models_pb2_grpc.ModelsServiceServicer):
    def __init__(self, registry: ModelRegistry, *, strict: bool = False):
        self.registry = registry
        self.strict = strict

    async def ResolveModel(
        self, request: models_pb2.ResolveModelRequest, context: Any
    ) -> models_pb2.ResolveModelResponse:
        strict = request.strict or self.strict
        if len(request.name) > _MAX_NAME:
            raise InvalidArgument([("name", f"must be at most {_MAX_NAME} characters")])
        if strict and not request.name.strip():
            raise InvalidArgument([("name", "is required in strict mode")])
        catalog = await self.registry.catalog()
        try:
            found = catalog.resolve(request.name, strict=strict)
        except UnknownModelError as exc:
            raise NotFound(
                f"model {request.name!r} is not in the catalogue (strict mode)",
                reason=errors_pb2.ERROR_REASON_MODEL_NOT_FOUND,
                metadata={"name": request.name},
            ) from exc
        return models_pb2.ResolveModelResponse(
            model=model_to_proto(found.model),
            matched_by=_MATCH[found.matched_by],
            fallback_reason=found.fallback_reason,
        )

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
        problems = Violations()
        problems.check(request.HasField("model"), "model", "is required")
        problems.raise_if_any()
        spec = model_from_proto(request.model)
        try:
            added = await self.registry.add(spec, replace=request.replace)
        except ModelExists as exc:
            raise AlreadyExists([("model.id", str(exc))]) from exc
        except ModelConflict as exc:
            raise InvalidArgument([(exc.field, exc.problem)]) from exc
        except StoreError as exc:
            raise Unavailable(f"the model store is unavailable: {exc}", metadata={"retryable": "true"}) from exc
        return models_pb2.AddModelResponse(
            model=model_to_proto(added.model), replaced=added.replaced, persisted=added.persisted
        )

    async def RemoveModel(self, request: models_pb2.RemoveModelRequest, context: Any) -> models_pb2.RemoveModelResponse:
        problems = Violations()
        problems.require(request.id, "id")
        problems.check(len(request.id) <= _MAX_NAME, "id", f"must be at most {_MAX_NAME} characters")
        problems.raise_if_any()
        try:
            removed = await self.registry.remove(request.id)
        except StoreError as exc:
            raise Unavailable(f"the model store is unavailable: {exc}", metadata={"retryable": "true"}) from exc
        return models_pb2.RemoveModelResponse(removed=removed)
