"""The ModelsService API over a catalogue, shared by the models service and every snapshot holder.

ResolveModel is answered the same way by the service (over its live registry) and
by a runtime or gateway (over the CatalogSnapshot it holds), so a local resolution
is the one the RPC would give. The snapshot also carries the agents folder as the
service loaded it (the one process that reads it).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import ValidationError

from cogmesh.common.v1 import errors_pb2, resources_pb2
from cogmesh.models.v1 import models_pb2
from services.kit.errors import InvalidArgument, NotFound
from services.lib.agents import AgentLoadError, AgentRegistry, agent_to_json, agents_of_snapshot
from services.lib.models.catalog import ModelCatalog, ModelSpec, UnknownModelError, format_validation_error

MATCH = {
    "alias": models_pb2.MATCH_KIND_ALIAS,
    "full_name": models_pb2.MATCH_KIND_FULL_NAME,
    "prefix": models_pb2.MATCH_KIND_PREFIX,
    "default": models_pb2.MATCH_KIND_DEFAULT,
}


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


def resolve_model(
    catalog: ModelCatalog, request: models_pb2.ResolveModelRequest, strict: bool = False
) -> models_pb2.ResolveModelResponse:
    """ResolveModel's answer: `strict` is the service's own setting, or-ed with the request's."""
    strict = request.strict or strict  # (the name's length is the request's rule: models.proto)
    if strict and not request.name.strip():
        raise InvalidArgument([("name", "is required in strict mode")])
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
        matched_by=MATCH[found.matched_by],
        fallback_reason=found.fallback_reason,
    )


def snapshot_of(
    catalog: ModelCatalog, strict: bool, agents: AgentRegistry | None = None, agents_dir: Path | None = None
) -> models_pb2.CatalogSnapshot:
    """The catalogue and the agents as a snapshot whose version is a digest of its content (agents included)."""
    snapshot = models_pb2.CatalogSnapshot(
        models=[model_to_proto(m) for m in catalog.models], default_model=catalog.default_model.id, strict=strict
    )
    if agents is not None:
        snapshot.agents.extend(
            models_pb2.AgentSnapshot(name=agent.name, definition_json=agent_to_json(agent))
            for agent in agents.list(include_hidden=True)
        )
        snapshot.agent_problems.extend(
            models_pb2.AgentLoadProblem(file=_relative(error, agents_dir), problem=error.message)
            for error in agents.errors
        )
    snapshot.version = hashlib.sha256(snapshot.SerializeToString(deterministic=True)).hexdigest()[:16]
    return snapshot


def _relative(error: AgentLoadError, agents_dir: Path | None) -> str:
    if agents_dir is not None and error.path.is_relative_to(agents_dir):
        return str(error.path.relative_to(agents_dir))
    return error.path.name


def catalog_of(snapshot: models_pb2.CatalogSnapshot) -> ModelCatalog:
    """The catalogue a snapshot carries, validated as the service validated it (CatalogError if not)."""
    specs = [model_from_proto(m) for m in snapshot.models]
    return ModelCatalog(specs, snapshot.default_model, source=f"catalogue snapshot {snapshot.version}")


def agents_of(snapshot: models_pb2.CatalogSnapshot) -> AgentRegistry:
    """The agents a snapshot carries; ValueError naming the first that does not load (refuse the snapshot)."""
    return agents_of_snapshot(
        ((agent.name, agent.definition_json) for agent in snapshot.agents),
        ((problem.file, problem.problem) for problem in snapshot.agent_problems),
    )
