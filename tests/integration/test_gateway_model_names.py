"""The gateway checks a turn's model name against the catalogue snapshot it holds (issue 32, item 2).

No ResolveModel per turn: a known name passes, an unknown one is NOT_FOUND (MODEL_NOT_FOUND,
naming the field) before the lease, and a model added to the catalogue is accepted as soon
as the gateway holds the version with it. Calls are counted with the servers' RPC metrics.
"""

from __future__ import annotations

from collections import Counter

import grpc
import pytest

from cogmesh.common.v1 import resources_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.models.v1 import models_pb2
from services.kit.metrics import RPC_SECONDS
from tests.integration.conftest import TIMEOUT_S, new_session, payload, running_suite, send, status_details

pytestmark = pytest.mark.asyncio(loop_scope="module")


def resolve_calls() -> int:
    """ResolveModel calls every in-process server has ended so far."""
    calls: Counter[str] = Counter()
    for metric in RPC_SECONDS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count") and sample.labels["grpc_method"] == "ResolveModel":
                calls["ResolveModel"] += int(sample.value)
    return calls["ResolveModel"]


async def test_a_named_model_is_checked_against_the_snapshot() -> None:
    async with running_suite() as (suite, stubs):
        gateway = stubs["gateway"]
        catalogue = suite.servers["gateway"].app.mounts[0].servicer.catalog
        assert await catalogue.wait_synced(TIMEOUT_S), "the gateway got no catalogue snapshot"
        session_id = await new_session(gateway)
        before = resolve_calls()

        known = await send(gateway, session_id, "hello", model="cogmesh-local")
        assert payload(known[-1]) == "final", known[-1]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await send(gateway, session_id, "hello", model="test-added-later")
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
        info, _ = status_details(caught.value)
        assert info is not None and info.reason == "MODEL_NOT_FOUND"
        assert dict(info.metadata) == {"field": "model", "model": "test-added-later"}
        assert caught.value.details() == (
            "model: model 'test-added-later' is not in the catalogue (no alias, model id or id prefix matches)"
        )

        model = resources_pb2.Model(
            id="test-added-later", provider="local", description="added", context_window=32000, max_output_tokens=4000
        )
        await stubs["models"].AddModel(models_pb2.AddModelRequest(model=model), timeout=TIMEOUT_S)
        assert await catalogue.wait_until(
            lambda held: held.catalog.get_or_none("test-added-later") is not None, TIMEOUT_S
        ), "the gateway never got the catalogue with the added model"
        added = await send(gateway, session_id, "hello", model="test-added-later")
        assert payload(added[-1]) == "final", added[-1]
        assert resolve_calls() == before, "no ResolveModel: the gateway and the runtime hold the catalogue"

        listed = await gateway.ListModels(gateway_pb2.ListModelsRequest(), timeout=TIMEOUT_S)
        assert "test-added-later" in {m.id for m in listed.models}
