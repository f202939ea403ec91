"""The whole suite as real processes, one per service, for fault tests.

Each service listens on a fixed port of its own for the life of the cluster, so a
service killed with SIGKILL comes back on the same address. Any link between two
services can go through a `TcpProxy` (tests/support/tcp_proxy.py): the client
service is then told the proxy's address instead of the real one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.suite.supervisor import MODULES, ORDER
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60.0  # the runtime imports every provider SDK: seconds on a busy 2-core machine


def health(address: str, timeout_s: float = 1.0) -> bool:
    """True when the server at address answers SERVING."""
    with grpc.insecure_channel(address) as channel:
        try:
            stub: Any = health_pb2_grpc.HealthStub(channel)
            reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


@dataclass
class Cluster:
    env: dict[str, str]
    logs: Path
    addresses: dict[str, str] = field(default_factory=lambda: {n: f"127.0.0.1:{free_port()}" for n in ORDER})
    routes: dict[tuple[str, str], str] = field(default_factory=dict)  # (caller, dependency) -> address to dial
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _files: list[IO[bytes]] = field(default_factory=list)

    def env_of(self, name: str) -> dict[str, str]:
        env = dict(self.env)
        for dependency in ORDER:
            env[f"COGMESH_{dependency.upper()}_ADDR"] = self.routes.get((name, dependency), self.addresses[dependency])
        return env

    def spawn(self, name: str) -> subprocess.Popen[bytes]:
        """Start the service's process without waiting for it."""
        assert name not in self.processes or self.processes[name].poll() is not None, f"{name} is running"
        log = (self.logs / f"{name}.log").open("ab")
        self._files.append(log)
        process = subprocess.Popen(
            [sys.executable, "-m", MODULES[name], "--listen", self.addresses[name]],
            env=self.env_of(name),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        self.processes[name] = process
        return process

    def wait_serving(self, name: str, timeout_s: float = START_TIMEOUT_S) -> float:
        """Block until the service answers SERVING; returns the seconds waited."""
        started = time.monotonic()
        process = self.processes[name]
        while not health(self.addresses[name]):
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.tail(name)}")
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{name} not SERVING after {timeout_s:g}s:\n{self.tail(name)}")
            time.sleep(0.05)
        return time.monotonic() - started

    def start(self, name: str) -> float:
        """Start the service and wait until it serves; returns the seconds that took."""
        started = time.monotonic()
        self.spawn(name)
        self.wait_serving(name)
        return time.monotonic() - started

    def start_all(self) -> None:
        for name in ORDER:  # all at once: a cold start of the suite is CPU-bound
            self.spawn(name)
        for name in ORDER:
            self.wait_serving(name)

    def kill(self, name: str) -> None:
        """kill -9: no shutdown hook runs, open connections drop."""
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        process.wait(30)

    def alive(self, name: str) -> bool:
        return name in self.processes and self.processes[name].poll() is None

    def ensure_all(self) -> None:
        """Bring back whatever a failed test left down."""
        for name in ORDER:
            if not self.alive(name):
                self.start(name)

    def tail(self, name: str, lines: int = 20) -> str:
        try:
            text = (self.logs / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        for name in reversed(ORDER):
            if self.alive(name):
                self.processes[name].terminate()
        for process in self.processes.values():
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in self._files:
            log.close()


def base_env(redis_url: str, prefix: str, **settings: str) -> dict[str, str]:
    """The environment every service of a fault-test cluster shares."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COGMESH_")}
    env |= {
        "COGMESH_REDIS_URL": redis_url,
        "COGMESH_REDIS_KEY_PREFIX": prefix,
        "COGMESH_DEV_MODE": "true",
        "COGMESH_LOG_LEVEL": "warning",
        "COGMESH_TRACING": "false",
        "PYTHONUNBUFFERED": "1",
    }
    env |= {f"COGMESH_{key.upper()}": value for key, value in settings.items()}
    return env
