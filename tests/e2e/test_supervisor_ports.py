"""`cogmesh up` and ports it does not own (issue 31): it starts nothing over a port another process
holds, naming the port and the process, and never takes another server's answer for its own child's."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from services.suite.settings import SuiteSettings
from services.suite.supervisor import StartupError, Supervisor
from tests.support.ports import free_port, free_ports

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SERVICES = ["models", "policy", "context", "sessions", "memory", "runtime", "gateway", "web"]
HOLDER = (  # listens on argv[1] until its stdin closes
    "import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); "
    "print('held', flush=True); sys.stdin.read()"
)


@contextlib.contextmanager
def held(port: int) -> Iterator[subprocess.Popen[str]]:
    """Another process listening on `port` until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def test_a_port_another_process_holds_is_refused_and_nothing_starts(tmp_path: Path) -> None:
    ports = free_ports(len(SERVICES) + 1)
    env = dict(os.environ)
    env |= {f"COGMESH_{name.upper()}_ADDR": f"127.0.0.1:{port}" for name, port in zip(SERVICES, ports, strict=False)}
    env["COGMESH_RUNTIME_ADDR"] += f",127.0.0.1:{ports[-1]}"
    sessions = ports[SERVICES.index("sessions")]
    logs = tmp_path / "logs"
    with held(sessions) as holder:
        result = subprocess.run(
            [str(BIN / "cogmesh"), "up", "--json", "--log-dir", str(logs)],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )
    assert result.returncode == 1, result.stderr
    error = " ".join(result.stderr.split())  # rich wraps long lines
    assert f"port {sessions} (sessions, 127.0.0.1:{sessions}) is held by pid {holder.pid}" in error, error
    assert "-c import socket" in error  # the holder's command line
    assert "SERVING" not in result.stdout
    assert not logs.exists() or not list(logs.glob("*.log"))  # no service was started


async def test_a_foreign_server_on_a_childs_port_is_not_taken_for_the_child(tmp_path: Path) -> None:
    """As after a crash, when another process took the port before the restart: its SERVING is not ours."""
    port = free_port()
    foreign = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, foreign)
    foreign.add_insecure_port(f"127.0.0.1:{port}")
    await foreign.start()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    supervisor = Supervisor(SuiteSettings(models_addr=f"127.0.0.1:{port}"), tmp_path, print, ready_timeout_s=120)
    try:
        with pytest.raises(StartupError) as refused:
            await supervisor._start_one(supervisor.children["models"])
        assert f"port {port} is held by pid {os.getpid()}" in str(refused.value)
    finally:
        await supervisor.stop(0.5)
        await foreign.stop(None)
