"""A paused turn survives its runtime: every service a real process, sessions and the event log in Redis.

The turn pauses for an approval on runtime A; A is killed (SIGKILL, no cleanup); the approval then
resumes the turn on a freshly started runtime process, or on another replica through the other
gateway, and the turn completes with its own turn_id in the same event log.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.lib.agents import DEFAULT_AGENTS_DIR
from tests.e2e.test_cogmesh_up import free_ports
from tests.e2e.test_replicas import wait_serving

CAREFUL = """
name: careful
prompts_dir: default
model: local
tools: [calculator]
interrupt_on: {calculator: true}
default_role: assistant
"""
PROCESSES = [  # name, module, the runtime a gateway talks to
    ("models", "services.models", ""),
    ("sessions", "services.sessions", ""),
    ("context", "services.context", ""),
    ("policy", "services.policy", ""),
    ("runtime_a", "services.runtime", ""),
    ("runtime_b", "services.runtime", ""),
    ("gateway_a", "gateway", "runtime_a"),
    ("gateway_b", "gateway", "runtime_b"),
]
TIMEOUT_S = 30


@dataclass
class Cluster:
    addresses: dict[str, str]
    env: dict[str, str]
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    files: list[IO[bytes]] = field(default_factory=list)

    def spawn(self, name: str, module: str, runtime: str = "") -> None:
        env = self.env | ({"COGMESH_RUNTIME_ADDR": self.addresses[runtime]} if runtime else {})
        log = (self.logs / f"{name}-{len(self.files)}.log").open("wb")
        self.files.append(log)
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", module, "--listen", self.addresses[name]], env=env, stdout=log, stderr=log
        )
        wait_serving(self.addresses[name])

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(TIMEOUT_S)

    def gateway(self, name: str) -> tuple[grpc.aio.Channel, gateway_pb2_grpc.GatewayServiceStub]:
        channel = grpc.aio.insecure_channel(self.addresses[name])
        return channel, gateway_pb2_grpc.GatewayServiceStub(channel)


@pytest.fixture(scope="module")
def cluster(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("resume")
    agents = tmp / "agents"
    shutil.copytree(DEFAULT_AGENTS_DIR, agents)
    (agents / "careful.yaml").write_text(CAREFUL)
    ports = dict(zip([p[0] for p in PROCESSES], free_ports(len(PROCESSES)), strict=True))
    addresses = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    env = dict(os.environ) | {
        "COGMESH_REDIS_URL": redis_url,
        "COGMESH_REDIS_KEY_PREFIX": f"cogmesh-resume-{os.getpid()}:",
        "COGMESH_DEV_MODE": "true",
        "COGMESH_LOG_LEVEL": "warning",
        "COGMESH_AGENTS_DIR": str(agents),
        **{f"COGMESH_{n.upper()}_ADDR": addresses[n] for n in ("models", "sessions", "context", "policy")},
    }
    cluster = Cluster(addresses, env, tmp)
    try:
        for name, module, runtime in PROCESSES:
            cluster.spawn(name, module, runtime)
        yield cluster
    finally:
        for process in cluster.processes.values():
            process.terminate()
        for process in cluster.processes.values():
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in cluster.files:
            log.close()


async def events_of(call: grpc.aio.UnaryStreamCall) -> list[events_pb2.RuntimeEvent]:  # type: ignore[type-arg]
    async def read() -> list[events_pb2.RuntimeEvent]:
        return [event async for response in call for event in response.events]

    return await asyncio.wait_for(read(), TIMEOUT_S)


async def pause(gateway: gateway_pb2_grpc.GatewayServiceStub) -> tuple[str, events_pb2.RuntimeEvent]:
    session = (await gateway.CreateSession(gateway_pb2.CreateSessionRequest(agent="careful"), timeout=10)).session
    request = gateway_pb2.SendMessageRequest(session_id=session.session_id, content="What is 17 * 23?")
    events = await events_of(gateway.SendMessage(request, timeout=TIMEOUT_S))
    assert events[-1].status.state == events_pb2.TURN_STATE_PAUSED, events[-1]
    assert events[-2].HasField("approval_required")
    return session.session_id, events[-2]


def approve(session_id: str, approval: events_pb2.RuntimeEvent) -> gateway_pb2.ResolveApprovalRequest:
    return gateway_pb2.ResolveApprovalRequest(
        session_id=session_id,
        interrupt_id=approval.approval_required.interrupt_id,
        decision=events_pb2.APPROVAL_DECISION_APPROVE,
    )


async def whole_log(gateway: gateway_pb2_grpc.GatewayServiceStub, session_id: str) -> list[events_pb2.RuntimeEvent]:
    request = gateway_pb2.SubscribeRequest(session_id=session_id, stop_when_idle=True)
    return await events_of(gateway.Subscribe(request, timeout=TIMEOUT_S))


async def resolve_retrying(
    gateway: gateway_pb2_grpc.GatewayServiceStub, request: gateway_pb2.ResolveApprovalRequest
) -> list[events_pb2.RuntimeEvent]:
    """ResolveApproval, retried on UNAVAILABLE as a client should: the gateway's channel to a
    restarted runtime may still be in its reconnect backoff (up to 1 s) when the answer arrives."""
    for _ in range(10):
        try:
            return await events_of(gateway.ResolveApproval(request, timeout=TIMEOUT_S))
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            await asyncio.sleep(0.5)
    return await events_of(gateway.ResolveApproval(request, timeout=TIMEOUT_S))


async def test_pause_kill_the_runtime_start_a_new_one_resume(cluster: Cluster) -> None:
    channel, gateway = cluster.gateway("gateway_a")
    async with channel:
        session_id, approval = await pause(gateway)
        cluster.kill("runtime_a")  # the process that paused the turn is gone, with all its memory
        cluster.spawn("runtime_a", "services.runtime")  # a new process on the same address

        resumed = await resolve_retrying(gateway, approve(session_id, approval))
        assert resumed[-1].final.text == "17 * 23 = 391."
        assert {e.turn_id for e in resumed} == {approval.turn_id}

        log = await whole_log(gateway, session_id)
        assert [e.seq for e in log] == list(range(1, len(log) + 1))
        assert {e.turn_id for e in log} == {approval.turn_id}
        assert [e.WhichOneof("payload") for e in log].count("final") == 1
        session = (await gateway.GetSession(gateway_pb2.GetSessionRequest(session_id=session_id))).session
        assert (session.message_count, session.active_turn_id) == (4, "")


async def test_the_answer_reaches_another_gateway_and_another_runtime(cluster: Cluster) -> None:
    channel_a, gateway_a = cluster.gateway("gateway_a")
    channel_b, gateway_b = cluster.gateway("gateway_b")
    async with channel_a, channel_b:
        session_id, approval = await pause(gateway_a)
        cluster.kill("runtime_a")
        try:
            # Gateway B drives the resume on runtime B; a watcher on gateway A sees it.
            watcher = gateway_a.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=approval.seq))
            resumed = await events_of(gateway_b.ResolveApproval(approve(session_id, approval), timeout=TIMEOUT_S))
            assert resumed[-1].final.text == "17 * 23 = 391."
            seen: list[events_pb2.RuntimeEvent] = []
            while not seen or not seen[-1].HasField("final"):
                seen += (await asyncio.wait_for(watcher.read(), TIMEOUT_S)).events
            watcher.cancel()
            assert [e.seq for e in seen if e.seq > approval.seq + 1] == [e.seq for e in resumed]
        finally:
            cluster.spawn("runtime_a", "services.runtime")

        # Answering again, anywhere: the turn is done.
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await events_of(gateway_a.ResolveApproval(approve(session_id, approval), timeout=TIMEOUT_S))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
