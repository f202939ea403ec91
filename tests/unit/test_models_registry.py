"""The live catalogue: hot reload, models added at run time, their stores (file and real Redis)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as redis
import yaml

from services.kit.redis_pool import Client, pooled_client
from services.lib.models.catalog import DEFAULT_CATALOG_PATH, ModelCatalog, ModelSpec
from services.models.registry import (
    FileModelStore,
    ModelConflict,
    ModelExists,
    ModelRegistry,
    RedisModelStore,
    StoreError,
)
from tests.support.redis_topologies import RedisUnderTest


def spec(model_id: str, aliases: tuple[str, ...] = (), provider: str = "acme", **extra: Any) -> ModelSpec:
    return ModelSpec.model_validate(
        {
            "id": model_id,
            "provider": provider,
            "aliases": list(aliases),
            "description": f"{model_id} test model",
            "context_window": 8000,
            "max_output_tokens": 1000,
            "capabilities": {"tools": True, "streaming": True, "vision": False, "structured_output": False},
            "pricing": {"input_per_million_usd": 1.5, "output_per_million_usd": 3.0},
            **extra,
        }
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write_catalog(path: Path, *models: ModelSpec, default: str | None = None) -> None:
    existed = path.exists()
    old = path.stat().st_mtime_ns if existed else 0
    document = {"default_model": default or models[0].id, "models": [m.model_dump(mode="json") for m in models]}
    path.write_text(yaml.safe_dump(document))
    if existed:  # a rewrite within one timestamp tick must still be seen as a change
        os.utime(path, ns=(old + 1_000_000_000, old + 1_000_000_000))


def break_file(path: Path) -> None:
    old = path.stat().st_mtime_ns
    path.write_text("default_model: nope\nmodels: [")
    os.utime(path, ns=(old + 10**9, old + 10**9))


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "models.yaml"
    write_catalog(path, spec("base-1", ("b1",)), spec("base-2"))
    return path


async def test_catalogue_file_is_hot_reloaded_after_refresh_interval(catalog_file: Path) -> None:
    clock = Clock()
    registry = ModelRegistry(catalog_file, refresh_s=1.0, clock=clock)
    await registry.start()
    assert (await registry.catalog()).resolve("b1").model.id == "base-1"

    write_catalog(catalog_file, spec("base-1", ("b1",)), spec("base-3", ("b3",)))
    clock.now = 0.5
    assert (await registry.catalog()).get_or_none("base-3") is None  # not yet checked
    clock.now = 1.5
    catalog = await registry.catalog()
    assert catalog.resolve("b3").model.id == "base-3"
    assert catalog.get_or_none("base-2") is None


async def test_unchanged_file_is_not_parsed_again(catalog_file: Path) -> None:
    registry = ModelRegistry(catalog_file, refresh_s=0)
    first = await registry.catalog()
    assert await registry.catalog() is first


async def test_broken_edit_keeps_the_last_good_catalogue(catalog_file: Path) -> None:
    registry = ModelRegistry(catalog_file, refresh_s=0)
    good = await registry.catalog()
    break_file(catalog_file)

    assert await registry.catalog() is good
    assert "YAML syntax error" in registry.last_error

    write_catalog(catalog_file, spec("fixed"))
    assert (await registry.catalog()).default_model.id == "fixed"
    assert registry.last_error == ""


async def test_added_models_resolve_and_survive_a_reload(catalog_file: Path) -> None:
    registry = ModelRegistry(catalog_file, refresh_s=0)
    result = await registry.add(spec("Custom-LLM", ("CL",)))

    assert (result.replaced, result.persisted) == (False, False)
    catalog = await registry.catalog()
    assert catalog.resolve("cl").model.id == "custom-llm"
    assert catalog.resolve("custom").matched_by == "prefix"
    assert catalog.resolve("custom-llm").model.pricing.input_per_million_usd == 1.5

    write_catalog(catalog_file, spec("base-1", ("b1",)), spec("base-9"))
    catalog = await registry.catalog()
    assert catalog.get_or_none("base-9") is not None and catalog.get_or_none("custom-llm") is not None


async def test_add_existing_id_needs_replace(catalog_file: Path) -> None:
    registry = ModelRegistry(catalog_file, refresh_s=0)
    with pytest.raises(ModelExists, match="'base-1' is already in the catalogue"):
        await registry.add(spec("base-1"))

    replaced = await registry.add(spec("base-1", ("one",), context_window=64000), replace=True)
    assert replaced.replaced is True
    catalog = await registry.catalog()
    assert catalog.resolve("one").model.context_window == 64000
    assert catalog.resolve("b1").matched_by == "default"  # the replacement dropped alias b1

    assert await registry.remove("BASE-1") is True  # the file's base-1 is back
    assert (await registry.catalog()).resolve("b1").model.id == "base-1"
    assert await registry.remove("base-1") is False  # file models are not removable


@pytest.mark.parametrize(
    ("model", "field"),
    [
        (spec("new", ("b1",)), "model.aliases[0]"),  # alias taken by base-1
        (spec("new", ("x", "base-2")), "model.aliases[1]"),  # alias equal to a model id
        (spec("b1"), "model.id"),  # id equal to base-1's alias
    ],
)
async def test_conflicts_name_the_field(catalog_file: Path, model: ModelSpec, field: str) -> None:
    registry = ModelRegistry(catalog_file, refresh_s=0)
    with pytest.raises(ModelConflict) as caught:
        await registry.add(model)
    assert caught.value.field == field
    assert (await registry.catalog()).get_or_none(model.id) is None  # nothing half-added


async def test_file_store_persists_across_restarts(catalog_file: Path, tmp_path: Path) -> None:
    store_path = tmp_path / "state" / "added.yaml"
    registry = ModelRegistry(catalog_file, FileModelStore(store_path), refresh_s=0)
    await registry.start()
    assert (await registry.add(spec("persisted", ("p",)))).persisted is True
    assert "persisted" in store_path.read_text()

    restarted = ModelRegistry(catalog_file, FileModelStore(store_path), refresh_s=0)
    await restarted.start()
    assert (await restarted.catalog()).resolve("p").model.id == "persisted"

    assert await restarted.remove("persisted") is True
    again = ModelRegistry(catalog_file, FileModelStore(store_path), refresh_s=0)
    await again.start()
    assert (await again.catalog()).get_or_none("persisted") is None


async def test_broken_store_file_is_reported_and_file_models_keep_serving(catalog_file: Path, tmp_path: Path) -> None:
    store_path = tmp_path / "added.yaml"
    store_path.write_text("models: [{id: x}]")
    store = FileModelStore(store_path)
    with pytest.raises(StoreError, match=r"models\[0\]"):
        await store.load()
    registry = ModelRegistry(catalog_file, store, refresh_s=0)
    await registry.start()
    assert (await registry.catalog()).resolve("b1").model.id == "base-1"


async def test_added_model_that_later_conflicts_with_the_file_is_skipped(catalog_file: Path) -> None:
    registry = ModelRegistry(catalog_file, refresh_s=0)
    await registry.add(spec("extra", ("ex",)))
    await registry.add(spec("other", ("ot",)))
    write_catalog(catalog_file, spec("base-1", ("b1", "ex")))  # the file now claims "ex"

    catalog = await registry.catalog()
    assert catalog.resolve("ex").model.id == "base-1"
    assert catalog.get_or_none("extra") is None
    assert catalog.resolve("ot").model.id == "other"


def test_default_catalogue_path_loads() -> None:
    assert ModelCatalog.from_yaml(DEFAULT_CATALOG_PATH).default_model.id == "cogmesh-local"


# --- Redis store, against the real server ---------------------------------------


@pytest_asyncio.fixture
async def redis_client(any_redis: RedisUnderTest) -> AsyncIterator[Client]:
    """A client of each form of Redis; its `test_prefix` is this test's own (cleaned up by `any_redis`)."""
    client = pooled_client(any_redis.url, 2.0)
    client.test_prefix = any_redis.prefix  # type: ignore[union-attr]
    try:
        yield client
    finally:
        await client.aclose()


async def test_redis_store_shares_added_models_between_replicas(catalog_file: Path, redis_client: Client) -> None:
    prefix = redis_client.test_prefix  # type: ignore[union-attr]
    clock = Clock()
    one = ModelRegistry(catalog_file, RedisModelStore(redis_client, prefix), refresh_s=1.0, clock=clock)
    two = ModelRegistry(catalog_file, RedisModelStore(redis_client, prefix), refresh_s=1.0, clock=clock)
    await one.start()
    await two.start()

    assert (await one.add(spec("shared", ("sh",)))).persisted is True
    assert (await two.catalog()).get_or_none("shared") is None  # within the refresh interval
    clock.now = 2.0
    assert (await two.catalog()).resolve("sh").model.id == "shared"

    assert await two.remove("shared") is True
    clock.now = 4.0
    assert (await one.catalog()).get_or_none("shared") is None

    restarted = ModelRegistry(catalog_file, RedisModelStore(redis_client, prefix), refresh_s=1.0, clock=clock)
    await restarted.add(spec("kept"))
    fresh = ModelRegistry(catalog_file, RedisModelStore(redis_client, prefix), refresh_s=1.0, clock=clock)
    await fresh.start()
    assert (await fresh.catalog()).get_or_none("kept") is not None


async def test_unreachable_redis_is_a_store_error(catalog_file: Path) -> None:
    client = redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    try:
        registry = ModelRegistry(catalog_file, RedisModelStore(client, "x:"), refresh_s=0)
        await registry.start()  # logged, file models still serve
        assert (await registry.catalog()).resolve("b1").model.id == "base-1"
        with pytest.raises(StoreError, match="redis"):
            await registry.add(spec("nope"))
        assert (await registry.catalog()).get_or_none("nope") is None
    finally:
        await client.aclose()
