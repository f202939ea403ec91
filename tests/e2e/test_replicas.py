"""Two gateways and two runtimes as real processes sharing one Redis: what a watcher, a
canceller and a reconnecting client see does not depend on the replica they talk to. Each
gateway spreads its turns over both runtimes (round_robin over the list of their addresses)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from tests.e2e.test_cogmesh_up import free_ports
from tests.support.replica_processes import PROCESSES, wait_serving

LONG = "w " * 9_000  # about 3,000 streamed deltas, 1 ms apart: a turn still running when the test acts on it


@dataclass
class Replicas:
    addresses: dict[str, str]


@pytest.fixture(scope="module")
def replicas(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    prefix = f"cogmesh-replicas-{os.getpid()}:"
    ports = dict(zip([p[0] for p in PROCESSES], free_ports(len(PROCESSES)), strict=True))
    addresses = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    base = dict(os.environ) | {
        "COGMESH_REDIS_URL": redis_url,
        "COGMESH_REDIS_KEY_PREFIX": prefix,
        "COGMESH_DEV_MODE": "true",
        "COGMESH_LOG_LEVEL": "warning",
        "COGMESH_LOCAL_DELAY_MS": "1",
        "COGMESH_HEARTBEAT_S": "1",  # a watcher's first answer, before any turn, is a heartbeat
        **{f"COGMESH_{n.upper()}_ADDR": addresses[n] for n in ("models", "sessions", "context", "policy")},
        "COGMESH_RUNTIME_ADDR": f"{addresses['runtime_a']},{addresses['runtime_b']}",
    }
    logs = tmp_path_factory.mktemp("replica-logs")
    started: list[subprocess.Popen[bytes]] = []
    try:
        for name, module in PROCESSES:
            log = (logs / f"{name}.log").open("wb")
            started.append(
                subprocess.Popen(
                    [sys.executable, "-m", module, "--listen", addresses[name]], env=base, stdout=log, stderr=log
                )
            )
            wait_serving(addresses[name])
        yield Replicas(addresses)
    finally:
        for process in reversed(started):
            process.terminate()
        for process in started:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()


def stub(replicas: Replicas, name: str) -> tuple[grpc.aio.Channel, gateway_pb2_grpc.GatewayServiceStub]:
    channel = grpc.aio.insecure_channel(replicas.addresses[name])
    return channel, gateway_pb2_grpc.GatewayServiceStub(channel)


async def test_a_watcher_on_b_sees_a_turn_started_on_a(replicas: Replicas) -> None:
    ca, a = stub(replicas, "gateway_a")
    cb, b = stub(replicas, "gateway_b")
    async with ca, cb:
        session = (await a.CreateSession(gateway_pb2.CreateSessionRequest())).session
        watcher = b.Subscribe(gateway_pb2.SubscribeRequest(session_id=session.session_id))
        first = await asyncio.wait_for(watcher.read(), 30)  # the watch is open before the turn starts
        assert first.heartbeat and not first.events
        sent = [
            e
            async for r in a.SendMessage(
                gateway_pb2.SendMessageRequest(session_id=session.session_id, content="What is 12 * 12?")
            )
            for e in r.events
        ]
        seen: list[events_pb2.RuntimeEvent] = []
        while not seen or not seen[-1].HasField("final"):
            seen += (await asyncio.wait_for(watcher.read(), 10)).events
        watcher.cancel()
        assert [(e.seq, e.WhichOneof("payload")) for e in seen] == [(e.seq, e.WhichOneof("payload")) for e in sent]
        assert "144" in seen[-1].final.text


async def test_cancel_through_the_other_gateway(replicas: Replicas) -> None:
    ca, a = stub(replicas, "gateway_a")
    cb, b = stub(replicas, "gateway_b")
    async with ca, cb:
        session = (await a.CreateSession(gateway_pb2.CreateSessionRequest())).session
        call = a.SendMessage(gateway_pb2.SendMessageRequest(session_id=session.session_id, content=LONG))
        events: list[events_pb2.RuntimeEvent] = []
        while not any(e.HasField("assistant_delta") for e in events):
            events += (await asyncio.wait_for(call.read(), 30)).events
        reply = await b.CancelTurn(gateway_pb2.CancelTurnRequest(session_id=session.session_id), timeout=10)
        assert reply.cancelled and reply.turn_id == events[0].turn_id
        while (response := await asyncio.wait_for(call.read(), 30)) is not grpc.aio.EOF:
            events += response.events
        assert events[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
        assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_a_client_that_loses_its_stream_resumes_on_the_other_gateway(replicas: Replicas) -> None:
    ca, a = stub(replicas, "gateway_a")
    cb, b = stub(replicas, "gateway_b")
    async with ca, cb:
        session = (await a.CreateSession(gateway_pb2.CreateSessionRequest())).session
        call = a.SendMessage(gateway_pb2.SendMessageRequest(session_id=session.session_id, content=LONG))
        events: list[events_pb2.RuntimeEvent] = []
        while len(events) < 50:
            events += (await asyncio.wait_for(call.read(), 30)).events
        call.cancel()  # the client's connection to gateway A drops mid-turn
        resumed = b.Subscribe(gateway_pb2.SubscribeRequest(session_id=session.session_id, after_seq=events[-1].seq))
        while not events[-1].HasField("final"):
            events += (await asyncio.wait_for(resumed.read(), 30)).events
        resumed.cancel()
        assert [e.seq for e in events] == list(range(1, len(events) + 1))  # no gap, no duplicate
        streamed = "".join(e.assistant_delta.text for e in events if e.HasField("assistant_delta"))
        assert streamed == events[-1].final.text
