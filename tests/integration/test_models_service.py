"""ModelsService over gRPC: resolution with fallback reporting, strict mode, aliases,
AddModel/RemoveModel with persistence, and hot reload of a custom catalogue path."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
import yaml

from cogmesh.common.v1 import resources_pb2
from cogmesh.models.v1 import models_pb2, models_pb2_grpc
from services.kit.server import RunningServer, start
from services.models import main as models_main
from services.models.settings import ModelsSettings
from tests.integration.conftest import status_details
from tests.unit.test_models_catalog import SEED_ALIASES

pytestmark = pytest.mark.asyncio(loop_scope="module")


def model(model_id: str, aliases: tuple[str, ...] = (), **extra: Any) -> resources_pb2.Model:
    fields: dict[str, Any] = {
        "id": model_id,
        "provider": "acme",
        "aliases": list(aliases),
        "description": f"{model_id}: a test model",
        "context_window": 32000,
        "max_output_tokens": 4000,
        "capabilities": resources_pb2.ModelCapabilities(tools=True, streaming=True, structured_output=True),
        "pricing": resources_pb2.ModelPricing(input_per_million_usd=0.5, output_per_million_usd=1.5),
    }
    fields.update(extra)
    return resources_pb2.Model(**fields)


async def running(
    settings: ModelsSettings,
) -> tuple[RunningServer, grpc.aio.Channel, models_pb2_grpc.ModelsServiceStub]:
    server = await start(models_main.build, settings, "127.0.0.1:0")
    channel = grpc.aio.insecure_channel(server.address)
    return server, channel, models_pb2_grpc.ModelsServiceStub(channel)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def default_models() -> AsyncIterator[models_pb2_grpc.ModelsServiceStub]:
    server, channel, stub = await running(ModelsSettings())
    try:
        yield stub
    finally:
        await channel.close()
        await server.stop(0)


async def test_every_seed_alias_resolves_over_grpc(default_models: models_pb2_grpc.ModelsServiceStub) -> None:
    listed = await default_models.ListAliases(models_pb2.ListAliasesRequest())
    table = {a.alias: a.model_id for a in listed.aliases}
    for alias, model_id in SEED_ALIASES:
        assert table[alias] == model_id
        reply = await default_models.ResolveModel(models_pb2.ResolveModelRequest(name=alias))
        assert (reply.model.id, reply.matched_by, reply.fallback_reason) == (model_id, models_pb2.MATCH_KIND_ALIAS, "")
    assert [a.alias for a in listed.aliases] == sorted(table)
    google = await default_models.ListAliases(models_pb2.ListAliasesRequest(provider="google"))
    assert {a.model_id for a in google.aliases} == {"gemini-2.5-pro", "gemini-2.5-flash"}


async def test_resolution_order_and_model_facts(default_models: models_pb2_grpc.ModelsServiceStub) -> None:
    async def resolve(name: str) -> models_pb2.ResolveModelResponse:
        return await default_models.ResolveModel(models_pb2.ResolveModelRequest(name=name))

    full = await resolve("gpt-4o")
    assert full.matched_by == models_pb2.MATCH_KIND_FULL_NAME
    assert full.model.provider == "openai" and full.model.context_window == 128000
    assert full.model.pricing.input_per_million_usd == 2.5 and full.model.pricing.output_per_million_usd == 10.0
    assert full.model.capabilities.vision and full.model.capabilities.tools
    prefix = await resolve("claude-sonnet-4")
    assert (prefix.model.id, prefix.matched_by) == ("claude-sonnet-4-20250514", models_pb2.MATCH_KIND_PREFIX)
    assert "Sonnet" in prefix.model.description
    fallback = await resolve("gpt-9")
    assert (fallback.model.id, fallback.matched_by) == ("cogmesh-local", models_pb2.MATCH_KIND_DEFAULT)
    assert fallback.fallback_reason == (
        "no alias, model id or id prefix matches 'gpt-9'; using the default model 'cogmesh-local'"
    )
    empty = await resolve("")
    assert "no model name given" in empty.fallback_reason


async def test_strict_request_is_not_found(default_models: models_pb2_grpc.ModelsServiceStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await default_models.ResolveModel(models_pb2.ResolveModelRequest(name="gpt-9", strict=True))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    info, _ = status_details(caught.value)
    assert info is not None and info.reason == "MODEL_NOT_FOUND"


async def test_list_models_and_providers(default_models: models_pb2_grpc.ModelsServiceStub) -> None:
    everything = await default_models.ListModels(models_pb2.ListModelsRequest())
    assert everything.default_model == "cogmesh-local"
    assert [m.id for m in everything.models] == sorted(m.id for m in everything.models)
    assert all(m.description and m.context_window > 0 for m in everything.models)
    anthropic = await default_models.ListModels(models_pb2.ListModelsRequest(provider="Anthropic"))
    assert {m.id for m in anthropic.models} == {
        "claude-sonnet-4-20250514",
        "claude-opus-4-20250514",
        "claude-haiku-3-20250307",
    }
    providers = await default_models.ListProviders(models_pb2.ListProvidersRequest())
    assert list(providers.providers) == ["anthropic", "deepseek", "google", "local", "openai"]


@pytest.mark.parametrize(
    ("request_model", "fields"),
    [
        (None, ["model"]),
        (model("x", context_window=0), ["model.context_window"]),
        (model("x", max_output_tokens=64000), ["model.max_output_tokens"]),
        (model("x", description="", provider=""), ["model.provider", "model.description"]),
        (model("has space"), ["model.id"]),
        (
            model("x", pricing=resources_pb2.ModelPricing(input_per_million_usd=-1)),
            ["model.pricing.input_per_million_usd"],
        ),
        (model("x", aliases=("sonnet",)), ["model.aliases[0]"]),
    ],
)
async def test_add_model_bad_input_names_the_field(
    default_models: models_pb2_grpc.ModelsServiceStub, request_model: resources_pb2.Model | None, fields: list[str]
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await default_models.AddModel(models_pb2.AddModelRequest(model=request_model))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    info, violations = status_details(caught.value)
    assert info is not None and info.reason == "INVALID_ARGUMENT"
    assert sorted(f for f, _ in violations) == sorted(fields)


async def test_add_existing_model_is_already_exists(default_models: models_pb2_grpc.ModelsServiceStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await default_models.AddModel(models_pb2.AddModelRequest(model=model("gpt-4o")))
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS
    _, violations = status_details(caught.value)
    assert [f for f, _ in violations] == ["model.id"]


async def test_remove_model_bad_input(default_models: models_pb2_grpc.ModelsServiceStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await default_models.RemoveModel(models_pb2.RemoveModelRequest())
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    gone = await default_models.RemoveModel(models_pb2.RemoveModelRequest(id="gpt-4o"))
    assert gone.removed is False  # file models are edited in the file


def _write(path: Path, document: dict[str, Any]) -> None:
    old = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(yaml.safe_dump(document))
    if old:
        os.utime(path, ns=(old + 10**9, old + 10**9))


def _catalog_doc(*ids: str) -> dict[str, Any]:
    return {
        "default_model": ids[0],
        "models": [
            {
                "id": model_id,
                "provider": "acme",
                "aliases": [f"{model_id}-alias"],
                "description": "file model",
                "context_window": 1000,
                "max_output_tokens": 100,
                "capabilities": {"tools": True, "streaming": True, "vision": False, "structured_output": False},
                "pricing": {"input_per_million_usd": 1, "output_per_million_usd": 2},
            }
            for model_id in ids
        ],
    }


async def test_custom_catalogue_hot_reload_added_models_persist_and_strict_mode(tmp_path: Path) -> None:
    catalog = tmp_path / "models.yaml"
    store = tmp_path / "added.yaml"
    _write(catalog, _catalog_doc("alpha"))
    settings = ModelsSettings(models_file=catalog, models_store_file=store, models_refresh_s=0, models_strict=True)

    server, channel, stub = await running(settings)
    try:
        assert (await stub.ResolveModel(models_pb2.ResolveModelRequest(name="alpha-alias"))).model.id == "alpha"
        # Server-wide strict mode: unknown names are NOT_FOUND even without the request flag.
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.ResolveModel(models_pb2.ResolveModelRequest(name="gpt-4o"))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND

        added = await stub.AddModel(models_pb2.AddModelRequest(model=model("My-Model", ("MM",))))
        assert (added.model.id, list(added.model.aliases), added.persisted) == ("my-model", ["mm"], True)
        resolved = await stub.ResolveModel(models_pb2.ResolveModelRequest(name="mm"))
        assert resolved.model.pricing.output_per_million_usd == 1.5

        _write(catalog, _catalog_doc("alpha", "beta"))  # edited while serving
        assert (await stub.ResolveModel(models_pb2.ResolveModelRequest(name="beta-alias"))).model.id == "beta"
    finally:
        await channel.close()
        await server.stop(0)

    # A restarted service finds the added model in its store.
    server, channel, stub = await running(settings)
    try:
        assert (await stub.ResolveModel(models_pb2.ResolveModelRequest(name="mm"))).model.id == "my-model"
        assert (await stub.RemoveModel(models_pb2.RemoveModelRequest(id="my-model"))).removed is True
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.ResolveModel(models_pb2.ResolveModelRequest(name="mm"))
    finally:
        await channel.close()
        await server.stop(0)
