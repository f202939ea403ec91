"""The suite as separate processes with two runtime and two gateway replicas on one Redis,
each startable and killable (SIGKILL: no goodbye) on its own: the stage of the takeover
tests and of the durable-turns fault suite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.e2e.test_cogmesh_up import free_ports

PROCESSES = [  # name, module
    ("models", "services.models"),
    ("sessions", "services.sessions"),
    ("context", "services.context"),
    ("policy", "services.policy"),
    ("runtime_a", "services.runtime"),
    ("runtime_b", "services.runtime"),
    ("gateway_a", "gateway"),
    ("gateway_b", "gateway"),
]
RUNTIMES, GATEWAYS = ["runtime_a", "runtime_b"], ["gateway_a", "gateway_b"]


def wait_serving(address: str, timeout_s: float = 30) -> None:
    """Until the process at `address` answers its health check SERVING (blocking)."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        grpc.channel_ready_future(channel).result(timeout=timeout_s)
        assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING


@dataclass
class ReplicaProcesses:
    addresses: dict[str, str]
    env: dict[str, str]
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @classmethod
    def on(cls, redis_url: str, prefix: str, logs: Path, **settings: str) -> ReplicaProcesses:
        """Addresses for every process and their shared environment (dev mode, `settings` as COGMESH_*)."""
        names = [name for name, _ in PROCESSES]
        addresses = {name: f"127.0.0.1:{port}" for name, port in zip(names, free_ports(len(names)), strict=True)}
        env = {k: v for k, v in os.environ.items() if not k.startswith("COGMESH_")} | {
            "COGMESH_REDIS_URL": redis_url,
            "COGMESH_REDIS_KEY_PREFIX": prefix,
            "COGMESH_DEV_MODE": "true",
            "COGMESH_LOG_LEVEL": "warning",
            "COGMESH_TRACING": "false",
            **{f"COGMESH_{n.upper()}_ADDR": addresses[n] for n in ("models", "sessions", "context", "policy")},
            "COGMESH_RUNTIME_ADDR": ",".join(addresses[n] for n in RUNTIMES),
            **{f"COGMESH_{key.upper()}": value for key, value in settings.items()},
        }
        return cls(addresses, env, logs)

    def start(self, name: str) -> None:
        """Start `name` and wait until it serves (blocking: call it in a thread from async code)."""
        module = dict(PROCESSES)[name]
        out = (self.logs / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", module, "--listen", self.addresses[name]], env=self.env, stdout=out, stderr=out
        )
        wait_serving(self.addresses[name], timeout_s=120)  # a loaded CI machine starts processes slowly

    def start_all(self) -> None:
        for name, _ in PROCESSES:
            self.start(name)

    def kill(self, name: str) -> None:
        process = self.processes[name]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(15)

    def terminate(self, name: str, timeout_s: float = 60) -> int:
        """SIGTERM (a deploy's or a drain's stop): the process shuts down gracefully; its exit code."""
        process = self.processes[name]
        process.send_signal(signal.SIGTERM)
        return process.wait(timeout_s)

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for process in reversed(self.processes.values()):
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
