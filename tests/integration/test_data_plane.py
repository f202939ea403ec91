"""The data plane of a turn: the catalogue pushed as snapshots, models resolved in the runtime,
and a turn started from what its lease grant read (no session re-read, no history call).

Calls are counted with the servers' own RPC metrics: the suite runs in this process.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from cogmesh.common.v1 import resources_pb2
from cogmesh.models.v1 import models_pb2, models_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2
from services.kit.metrics import RPC_SECONDS
from services.kit.server import start
from services.models import main as models_main
from services.models.settings import ModelsSettings
from services.suite.inprocess import Suite
from tests.integration.conftest import TIMEOUT_S, new_session, payload, send

pytestmark = pytest.mark.asyncio(loop_scope="module")


def served() -> Counter[str]:
    """Calls every in-process server has ended so far, as "Service/Method"."""
    calls: Counter[str] = Counter()
    for metric in RPC_SECONDS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count"):
                service = sample.labels["grpc_service"].rpartition(".")[2]
                calls[f"{service}/{sample.labels['grpc_method']}"] += int(sample.value)
    return calls


def model(model_id: str) -> resources_pb2.Model:
    return resources_pb2.Model(
        id=model_id,
        provider="local",
        description="a model added by the test",
        context_window=32000,
        max_output_tokens=4000,
        pricing=resources_pb2.ModelPricing(input_per_million_usd=1.0, output_per_million_usd=2.0),
    )


async def first(stream: Any) -> models_pb2.CatalogSnapshot:
    reply = await asyncio.wait_for(stream.read(), TIMEOUT_S)
    assert reply is not grpc.aio.EOF
    return reply.snapshot  # type: ignore[no-any-return]


async def models_service(settings: ModelsSettings) -> AsyncIterator[models_pb2_grpc.ModelsServiceStub]:
    server = await start(models_main.build, settings, "127.0.0.1:0")
    channel = grpc.aio.insecure_channel(server.address)
    try:
        yield models_pb2_grpc.ModelsServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(0)


async def test_the_catalogue_is_pushed_as_versioned_snapshots(tmp_path: Any) -> None:
    settings = ModelsSettings(models_store_file=tmp_path / "added.yaml")
    replicas = [models_service(settings), models_service(ModelsSettings())]
    one, two = [await anext(replica) for replica in replicas]
    try:
        watch = one.WatchCatalog(models_pb2.WatchCatalogRequest())
        current = await first(watch)
        assert current.version and current.default_model and {m.id for m in current.models} >= {"cogmesh-local"}
        # The version is a digest of the content: a replica serving the same catalogue names it the same.
        other = two.WatchCatalog(models_pb2.WatchCatalogRequest())
        assert (await first(other)).version == current.version
        other.cancel()

        # A watcher that holds the current version hears nothing until the catalogue changes:
        # the first message it gets is the version with the added model.
        held = one.WatchCatalog(models_pb2.WatchCatalogRequest(known_version=current.version))
        await one.AddModel(models_pb2.AddModelRequest(model=model("test-pushed-1")), timeout=TIMEOUT_S)
        added = await first(held)
        assert added.version != current.version and "test-pushed-1" in {m.id for m in added.models}
        assert (await first(watch)).version == added.version  # the open watch got it too
        await one.RemoveModel(models_pb2.RemoveModelRequest(id="test-pushed-1"), timeout=TIMEOUT_S)
        removed = await first(held)
        assert "test-pushed-1" not in {m.id for m in removed.models}
        assert removed.version == current.version  # same content, same version
        held.cancel()
        watch.cancel()
    finally:
        for replica in replicas:
            await replica.aclose()


async def test_a_turn_resolves_its_model_in_the_runtime_and_starts_from_the_grant(
    suite: Suite, gateway: Any, models: models_pb2_grpc.ModelsServiceStub, sessions: Any
) -> None:
    link = suite.servers["runtime"].app.mounts[0].servicer.builder.models
    assert await link.watcher.wait_synced(TIMEOUT_S), "the runtime got no catalogue snapshot"
    session_id = await new_session(gateway)
    first_turn = await send(gateway, session_id, "hello there")
    before = served()
    second_turn = await send(gateway, session_id, "and again")
    assert payload(second_turn[-1]) == "final"
    calls = served() - before
    # No ResolveModel (the runtime holds the catalogue), no GetSession to re-check the lease (the
    # token fences every write) and no history read (the grant carried it).
    for method in ("ResolveModel", "GetSession", "GetRehydrationPayload", "ListMessages"):
        assert not [name for name in calls if name.endswith(f"/{method}")], calls
    assert calls["SessionsService/AcquireTurnLease"] == 1 and calls["RuntimeService/StartTurn"] == 1

    # The model saw the first turn: its prompt grew by at least that turn's messages.
    def input_tokens(events: list[Any]) -> int:
        return sum(e.usage.input_tokens for e in events if payload(e) == "usage")

    first_text = "".join(e.assistant_delta.text for e in first_turn if payload(e) == "assistant_delta")
    assert input_tokens(second_turn) - input_tokens(first_turn) >= (len(first_text) + len("and again")) // 4

    # A model added to the catalogue is usable as soon as the runtime holds the new version.
    await models.AddModel(models_pb2.AddModelRequest(model=model("test-local-added")), timeout=TIMEOUT_S)
    assert await link.watcher.wait_until(
        lambda held: any(m.id == "test-local-added" for m in held[0].models), TIMEOUT_S
    ), "the runtime never got the catalogue with the added model"
    used = await send(gateway, session_id, "which model?", model="test-local-added")
    assert payload(used[-1]) == "final", used[-1]
    assert any(e.usage.model == "test-local-added" for e in used if payload(e) == "usage")
    await models.RemoveModel(models_pb2.RemoveModelRequest(id="test-local-added"), timeout=TIMEOUT_S)
    state = await sessions.GetSession(
        sessions_pb2.GetSessionRequest(tenant_id="default", session_id=session_id), timeout=TIMEOUT_S
    )
    assert state.session.message_count == 6
