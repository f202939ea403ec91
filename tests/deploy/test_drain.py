"""Rolling out without dropping streams: a draining gateway reports NOT_SERVING at once, keeps
serving during its drain window, then hands its Subscribe streams off (UNAVAILABLE, reason
SHUTTING_DOWN) instead of holding them for the grace period, and the client resumes on
another replica by cursor (the event log is in Redis), missing nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway import main as gateway_main
from services.kit.server import start
from services.suite.inprocess import start_suite
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session, send, status_details

DRAIN_S = 0.6
GRACE_S = 600.0  # for calls in flight: none is left once the subscribers are handed off


async def serving_status(channel: grpc.aio.Channel) -> int:
    stub: Any = health_pb2_grpc.HealthStub(channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S)
    return int(reply.status)


async def test_a_draining_gateway_finishes_then_hands_off_by_cursor(redis_url: str, redis_prefix: str) -> None:
    settings = SUITE_SETTINGS.model_copy(update={"redis_url": redis_url, "redis_key_prefix": redis_prefix})
    suite = await start_suite(settings)
    addresses = {f"{name}_addr": server.address for name, server in suite.servers.items()}
    replica_b = await start(gateway_main.build, settings.model_copy(update=addresses), "127.0.0.1:0")
    replica_a = suite.servers["gateway"]
    replica_a.drain_s = DRAIN_S
    channel_a = grpc.aio.insecure_channel(replica_a.address)
    channel_b = grpc.aio.insecure_channel(replica_b.address)
    try:
        gateway_a = gateway_pb2_grpc.GatewayServiceStub(channel_a)
        gateway_b = gateway_pb2_grpc.GatewayServiceStub(channel_b)
        session_id = await new_session(gateway_a)
        first = await send(gateway_a, session_id, "What is 2 + 3?")
        watcher = gateway_a.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=0))
        seen: list[events_pb2.RuntimeEvent] = []

        async def watch() -> tuple[grpc.StatusCode, str]:
            try:
                async for message in watcher:
                    seen.extend(message.events)
            except grpc.aio.AioRpcError as exc:
                info, _ = status_details(exc)
                return exc.code(), info.reason if info else ""
            return grpc.StatusCode.OK, ""

        watching = asyncio.create_task(watch())
        async with asyncio.timeout(TIMEOUT_S):
            while len(seen) < len(first):  # noqa: ASYNC110 - replay reaches the watcher
                await asyncio.sleep(0.01)

        stopping = asyncio.create_task(replica_a.stop(GRACE_S))
        await asyncio.sleep(0.05)
        # 1. Drain: NOT_SERVING at once, so probes and balancers route new calls elsewhere...
        assert await serving_status(channel_a) == health_pb2.HealthCheckResponse.NOT_SERVING
        # 2. ...while calls that still arrive (endpoints update late) are served in full.
        during = await send(gateway_a, session_id, "What is 4 * 5?")
        assert during[-1].WhichOneof("payload") == "final"
        async with asyncio.timeout(TIMEOUT_S):
            while seen[-1].seq < during[-1].seq:  # noqa: ASYNC110 - the open stream still delivers
                await asyncio.sleep(0.01)
        # 3. Then the drain ends: the watcher's stream is handed off with UNAVAILABLE, which clients
        # resume on, and the stop does not wait its 600 s grace for a stream that would never end.
        code = await asyncio.wait_for(watching, TIMEOUT_S)
        assert code == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN"), code
        await asyncio.wait_for(stopping, TIMEOUT_S)
        cursor = seen[-1].seq

        # 4. Hand-off: the client resumes on another replica from its cursor; nothing is lost or repeated.
        resumed = gateway_b.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=cursor))
        later = await send(gateway_b, session_id, "What is 6 * 7?")
        tail: list[events_pb2.RuntimeEvent] = []
        async with asyncio.timeout(TIMEOUT_S):
            async for message in resumed:
                tail.extend(message.events)
                if tail and tail[-1].seq >= later[-1].seq:
                    break
        resumed.cancel()
        seqs = [e.seq for e in seen] + [e.seq for e in tail]
        assert seqs == list(range(1, later[-1].seq + 1)), "a gap or a duplicate across the hand-off"
        assert [e.seq for e in tail] == [e.seq for e in later]
    finally:
        await channel_a.close()
        await channel_b.close()
        await replica_b.stop(0)
        await suite.stop(0)
