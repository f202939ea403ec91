"""Keepalive and maximum connection age between real servers and clients of the kit.

* The suite's clients ping as often as its servers accept: an idle connection stays up,
  where a server with gRPC's default policy answers the same pings with too_many_pings.
* A server closes connections older than max_connection_age_s: a stream on one is cut after
  the grace period with UNAVAILABLE, and the Python SDK's subscriber resumes by seq on its
  own, so it sees every event once, in order, across the cuts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from cogmesh.client import GatewayClient
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.kit.clients import open_channel
from services.kit.server import RunningServer, start
from services.models import main as models_main
from services.models.settings import ModelsSettings
from services.suite.inprocess import start_suite
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S

PINGS = ModelsSettings(keepalive_time_s=0.2, keepalive_timeout_s=2.0)
IDLE_PINGS = 15  # an idle connection that sees this many pings in a row was not punished for them


async def idle_until_state_changes(channel: grpc.aio.Channel, timeout_s: float) -> bool:
    """Make one call, then leave the channel idle; True if its connection dropped within `timeout_s`."""
    health_stub = health_pb2_grpc.HealthStub(channel)
    await health_stub.Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S)
    try:
        async with asyncio.timeout(timeout_s):
            await channel.wait_for_state_change(grpc.ChannelConnectivity.READY)
    except TimeoutError:
        return False
    return True


@pytest.fixture
async def models_server() -> AsyncIterator[RunningServer]:
    server = await start(models_main.build, PINGS, "127.0.0.1:0")
    try:
        yield server
    finally:
        await server.stop(0)


async def test_the_suites_pings_never_earn_too_many_pings(models_server: RunningServer) -> None:
    async with open_channel(models_server.address, PINGS) as channel:
        dropped = await idle_until_state_changes(channel, IDLE_PINGS * PINGS.keepalive_time_s)
    assert not dropped, "an idle connection of the suite was dropped"


async def test_a_server_with_grpcs_default_policy_drops_the_same_client() -> None:
    # The control: the same pings at a server that expects one every 5 minutes at most.
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with open_channel(f"127.0.0.1:{port}", PINGS) as channel:
            assert await idle_until_state_changes(channel, 60), "too_many_pings should have dropped it"
    finally:
        await server.stop(0)


AGE = SUITE_SETTINGS.model_copy(update={"max_connection_age_s": 0.5, "max_connection_age_grace_s": 0.5})


async def test_old_connections_are_cut_and_subscribers_resume_by_seq() -> None:
    suite = await start_suite(AGE)
    try:
        async with grpc.aio.insecure_channel(suite.gateway_address) as channel:
            gateway = gateway_pb2_grpc.GatewayServiceStub(channel)
            session_id = (await gateway.CreateSession(gateway_pb2.CreateSessionRequest())).session.session_id
            raw = gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id))
            with pytest.raises(grpc.aio.AioRpcError) as cut:
                async with asyncio.timeout(TIMEOUT_S):
                    async for _ in raw:
                        pass  # heartbeats, until the connection is too old
            assert cut.value.code() == grpc.StatusCode.UNAVAILABLE, cut.value

            async with GatewayClient(suite.gateway_address) as client:
                seen: list[int] = []

                async def watch() -> None:
                    async for event in client.subscribe(session_id):
                        seen.append(event.seq)

                watcher = asyncio.create_task(watch())
                # Turns for several connection lifetimes: the watcher's stream is cut again and again.
                ends: list[int] = []
                started = time.monotonic()
                while time.monotonic() - started < 4 * (AGE.max_connection_age_s + AGE.max_connection_age_grace_s):
                    turn = [e async for e in client.send_message(session_id, "What is 3 * 3?")]  # resumes too
                    assert turn[-1].HasField("final")
                    ends.append(turn[-1].seq)
                    async with asyncio.timeout(TIMEOUT_S):
                        while not seen or seen[-1] < ends[-1]:  # noqa: ASYNC110 - the watcher runs on its task
                            await asyncio.sleep(0.01)
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)
            assert seen == list(range(1, ends[-1] + 1)), "a gap or a duplicate across the cuts"
    finally:
        await suite.stop(0)
