"""Control planes going away and coming back (issue 14, item 6; the data plane of issue 32).

The runtime decides from snapshots: the catalogue and the policy pushed to it, the prompt built
from the agents folder it reads. With the models, policy or context service killed, turns go on
as before from the last snapshot; once the service is back, the runtime's watch reconnects by
itself (backoff, quoting the version it holds), and what changed there reaches the next turns:
a model added to the restarted models service becomes usable without any client action.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from cogmesh.common.v1 import resources_pb2
from cogmesh.models.v1 import models_pb2, models_pb2_grpc
from tests.reliability.conftest import Suite
from tests.reliability.helpers import calc_request, kind, messages, new_session, run_turn

RESYNC_S = 60.0  # the watch's backoff is at most 5 s; a loaded 2-core machine restarts processes slowly


@pytest.mark.parametrize("victim", ["models", "policy", "context"])
async def test_turns_go_on_while_a_control_plane_is_down_and_after_it_returns(healthy: Suite, victim: str) -> None:
    cluster = healthy.cluster
    session_id = await new_session(cluster)
    warm = await run_turn(cluster, calc_request(session_id))
    assert kind(warm[-1]) == "final", warm[-1]

    cluster.kill(victim)
    down = await run_turn(cluster, calc_request(session_id))
    assert kind(down[-1]) == "final", down[-1]  # decided from the snapshot the runtime holds

    cluster.start(victim)  # returns once the new process answers SERVING
    events = await run_turn(cluster, calc_request(session_id))
    assert kind(events[-1]) == "final", events[-1]
    assert len(await messages(cluster, session_id)) == 12  # three good turns, stored once each


async def test_a_model_added_after_a_restart_reaches_the_runtime(healthy: Suite) -> None:
    cluster = healthy.cluster
    session_id = await new_session(cluster)
    cluster.kill("models")
    cluster.start("models")
    added = resources_pb2.Model(
        id="restart-added",
        provider="local",
        description="added after a restart",
        context_window=8000,
        max_output_tokens=1000,
    )
    async with grpc.aio.insecure_channel(cluster.addresses["models"]) as channel:
        stub = models_pb2_grpc.ModelsServiceStub(channel)  # type: ignore[no-untyped-call]
        await stub.AddModel(models_pb2.AddModelRequest(model=added), timeout=10)
    try:
        request = calc_request(session_id)
        request.model = "restart-added"
        deadline = time.monotonic() + RESYNC_S
        # Until the gateway's and the runtime's watches have reconnected and hold the catalogue with the
        # model: the gateway checks the name against its snapshot (NOT_FOUND until then), the runtime runs it.
        while True:
            try:
                events = await run_turn(cluster, request)
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.NOT_FOUND or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
                continue
            if kind(events[-1]) == "final" or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert kind(events[-1]) == "final", events[-1]
        assert any(e.usage.model == "restart-added" for e in events if kind(e) == "usage")
    finally:
        async with grpc.aio.insecure_channel(cluster.addresses["models"]) as channel:
            stub = models_pb2_grpc.ModelsServiceStub(channel)  # type: ignore[no-untyped-call]
            await stub.RemoveModel(models_pb2.RemoveModelRequest(id="restart-added"), timeout=10)
