"""A gateway process killed mid-turn: once the turn's lease expires, a surviving replica
ends the turn in the shared log with one retryable error, and the session takes new turns."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from tests.e2e.test_cogmesh_up import free_ports
from tests.e2e.test_replicas import wait_serving

LONG = "w " * 49_999  # about 16,000 streamed deltas: still streaming when its gateway dies
LEASE_TTL_S = 3  # short lease, renewals and sweeps: the test takes seconds, not the production 30 s
PROCESSES = ["models", "sessions", "context", "policy", "runtime", "gateway_a", "gateway_b", "gateway_c"]


@pytest.fixture(scope="module")
def addresses(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    ports = dict(zip(PROCESSES, free_ports(len(PROCESSES)), strict=True))
    addresses = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    env = dict(os.environ) | {
        "COGMESH_REDIS_URL": redis_url,
        "COGMESH_REDIS_KEY_PREFIX": f"cogmesh-reaper-{os.getpid()}:",
        "COGMESH_DEV_MODE": "true",
        "COGMESH_LOG_LEVEL": "warning",
        "COGMESH_TURN_LEASE_TTL_S": str(LEASE_TTL_S),
        "COGMESH_TURN_LEASE_RENEW_S": "1.0",
        "COGMESH_REAPER_INTERVAL_S": "0.5",
        **{f"COGMESH_{n.upper()}_ADDR": addresses[n] for n in ("models", "sessions", "context", "policy", "runtime")},
    }
    logs: Path = tmp_path_factory.mktemp("reaper-logs")
    started: list[subprocess.Popen[bytes]] = []
    try:
        for name in PROCESSES:
            command = ["-m", "gateway" if name.startswith("gateway") else f"services.{name}"]
            out = (logs / f"{name}.log").open("wb")
            process = subprocess.Popen(
                [sys.executable, *command, "--listen", addresses[name]], env=env, stdout=out, stderr=out
            )
            started.append(process)
            wait_serving(addresses[name], timeout_s=120)  # a loaded CI machine starts processes slowly
        addresses["_pid_gateway_a"] = str(started[PROCESSES.index("gateway_a")].pid)
        yield addresses
    finally:
        for process in reversed(started):
            process.terminate()
        for process in started:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()


async def test_a_turn_whose_gateway_died_ends_with_one_retryable_error(addresses: dict[str, str]) -> None:
    async with (
        grpc.aio.insecure_channel(addresses["gateway_a"]) as ca,
        grpc.aio.insecure_channel(addresses["gateway_b"]) as cb,
    ):
        a, b = gateway_pb2_grpc.GatewayServiceStub(ca), gateway_pb2_grpc.GatewayServiceStub(cb)
        session_id = (await b.CreateSession(gateway_pb2.CreateSessionRequest(), timeout=10)).session.session_id
        call = a.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content=LONG))
        events: list[events_pb2.RuntimeEvent] = []
        while len(events) < 20:
            events += (await asyncio.wait_for(call.read(), 30)).events
        turn_id = events[0].turn_id
        os.kill(int(addresses["_pid_gateway_a"]), signal.SIGKILL)  # no goodbye: no end event, no release

        # A watcher on B, from the client's cursor, gets the rest of the turn and then its end.
        watcher = b.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=events[-1].seq))
        while not events[-1].HasField("error"):
            events += (await asyncio.wait_for(watcher.read(), LEASE_TTL_S + 20)).events
        watcher.cancel()
        end = events[-1]
        assert end.turn_id == turn_id
        assert end.error.kind == events_pb2.ERROR_KIND_UNAVAILABLE and end.error.retryable
        assert "gateway lost" in end.error.message and turn_id in end.error.message
        assert [e.seq for e in events] == list(range(1, len(events) + 1))

        # Two replicas sweep (B and C): the whole log still holds exactly one end for the turn.
        await asyncio.sleep(2.0)
        log = b.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, stop_when_idle=True))
        replay = [e async for r in log for e in r.events]
        ends = [e for e in replay if e.turn_id == turn_id and e.WhichOneof("payload") in ("final", "error")]
        assert ends == [end]

        # The client retries, and the session takes the turn.
        retried = [
            e
            async for r in b.SendMessage(
                gateway_pb2.SendMessageRequest(session_id=session_id, content="What is 6 * 7?")
            )
            for e in r.events
        ]
        assert retried[-1].HasField("final") and "42" in retried[-1].final.text
