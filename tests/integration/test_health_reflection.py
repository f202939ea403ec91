"""grpc.health.v1 and server reflection on every service, and health during graceful shutdown."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from cogmesh.context.v1 import context_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.memory.v1 import memory_pb2
from cogmesh.models.v1 import models_pb2, models_pb2_grpc
from cogmesh.policy.v1 import policy_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit.server import start
from services.models import main as models_main
from services.suite.inprocess import Suite
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S

pytestmark = pytest.mark.asyncio(loop_scope="module")

SERVICE_NAMES = {
    "gateway": gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"],
    "runtime": runtime_pb2.DESCRIPTOR.services_by_name["RuntimeService"],
    "policy": policy_pb2.DESCRIPTOR.services_by_name["PolicyService"],
    "context": context_pb2.DESCRIPTOR.services_by_name["ContextService"],
    "sessions": sessions_pb2.DESCRIPTOR.services_by_name["SessionsService"],
    "models": models_pb2.DESCRIPTOR.services_by_name["ModelsService"],
    "memory": memory_pb2.DESCRIPTOR.services_by_name["MemoryService"],
}
# Services a process serves besides its own: the gateway serves the memory API to applications.
ALSO_SERVED = {"gateway": {"memory"}}
HEALTH = "grpc.health.v1.Health"
REFLECTION = "grpc.reflection.v1alpha.ServerReflection"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def check(channel: grpc.aio.Channel, service: str) -> int:
    reply = await health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT_S
    )
    return reply.status  # type: ignore[no-any-return]


async def list_services(channel: grpc.aio.Channel) -> list[str]:
    call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(timeout=TIMEOUT_S)
    await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
    reply = await call.read()
    await call.done_writing()
    assert reply.WhichOneof("message_response") == "list_services_response", reply
    return [s.name for s in reply.list_services_response.service]


def resolve_with_reflection(address: str, full_name: str) -> tuple[list[str], list[tuple[str, str, str]]]:
    """What grpcurl does: list services, then fetch the service's file and its dependencies by reflection.

    Runs on a synchronous channel, so call it in a thread (the servers share the test's event loop).
    """
    with grpc.insecure_channel(address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = list(database.get_services())
        pool = descriptor_pool.DescriptorPool(database)
        service = pool.FindServiceByName(full_name)
        methods = [(m.name, m.input_type.full_name, m.output_type.full_name) for m in service.methods]
        return services, methods


@pytest.mark.parametrize("name", list(SERVICE_NAMES))
async def test_health_serving(suite: Suite, channels: dict[str, grpc.aio.Channel], name: str) -> None:
    channel = channels[name]
    assert await check(channel, "") == SERVING
    assert await check(channel, SERVICE_NAMES[name].full_name) == SERVING
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await check(channel, "cogmesh.nothing.v1.NoSuchService")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("name", list(SERVICE_NAMES))
async def test_reflection_lists_services(channels: dict[str, grpc.aio.Channel], name: str) -> None:
    listed = await list_services(channels[name])
    assert SERVICE_NAMES[name].full_name in listed
    assert HEALTH in listed
    assert REFLECTION in listed
    # Each process serves only its own cogmesh service (and the gateway the memory API).
    others = {d.full_name for n, d in SERVICE_NAMES.items() if n != name and n not in ALSO_SERVED.get(name, set())}
    assert {SERVICE_NAMES[n].full_name for n in ALSO_SERVED.get(name, set())} <= set(listed)
    assert others.isdisjoint(listed)


@pytest.mark.parametrize("name", list(SERVICE_NAMES))
async def test_reflection_resolves_full_descriptors(suite: Suite, name: str) -> None:
    expected = SERVICE_NAMES[name]
    services, methods = await asyncio.wait_for(
        asyncio.to_thread(resolve_with_reflection, suite.servers[name].address, expected.full_name), TIMEOUT_S
    )
    assert expected.full_name in services
    assert HEALTH in services
    assert methods == [(m.name, m.input_type.full_name, m.output_type.full_name) for m in expected.methods]


async def _started_models_server() -> Any:
    return await start(models_main.build, SUITE_SETTINGS, "127.0.0.1:0")


async def test_health_not_serving_on_graceful_shutdown() -> None:
    server = await _started_models_server()
    name = SERVICE_NAMES["models"].full_name
    channel = grpc.aio.insecure_channel(server.address)
    try:
        assert await check(channel, "") == SERVING
        assert await check(channel, name) == SERVING

        await server._health.enter_graceful_shutdown()  # what RunningServer.stop does first
        assert await check(channel, "") == NOT_SERVING
        assert await check(channel, name) == NOT_SERVING
        # Still answering real RPCs while draining.
        reply = await models_pb2_grpc.ModelsServiceStub(channel).ListProviders(
            models_pb2.ListProvidersRequest(), timeout=TIMEOUT_S
        )
        assert "local" in reply.providers

        await server.stop(0)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await check(channel, "")
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await channel.close()
        await server.stop(0)


async def test_health_watch_sees_not_serving_when_stop_begins() -> None:
    """RunningServer.stop(grace) flips health before draining: a watcher sees SERVING, then NOT_SERVING."""
    server = await _started_models_server()
    channel = grpc.aio.insecure_channel(server.address)
    stopping: asyncio.Task[None] | None = None
    try:
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""))
        first = await asyncio.wait_for(watch.read(), TIMEOUT_S)
        assert first is not grpc.aio.EOF
        assert first.status == SERVING
        stopping = asyncio.create_task(server.stop(0.5))
        second = await asyncio.wait_for(watch.read(), TIMEOUT_S)
        assert second is not grpc.aio.EOF
        assert second.status == NOT_SERVING
        watch.cancel()
    finally:
        if stopping is not None:
            await asyncio.wait_for(stopping, TIMEOUT_S)
        await channel.close()
        await server.stop(0)
