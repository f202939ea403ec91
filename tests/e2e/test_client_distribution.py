"""clients/python is its own distribution: it installs into a clean virtualenv
without the servers and is enough to talk to the gateway."""

from __future__ import annotations

import subprocess
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib.util, sys
from cogmesh.client import GatewayClient
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.common.v1 import events_pb2
from cogmesh.tools.v1 import tools_pb2_grpc
from cogmesh.policy.v1 import hooks_pb2_grpc
event = events_pb2.RuntimeEvent(seq=3)
event.final.text = "ok"
assert events_pb2.RuntimeEvent.FromString(event.SerializeToString()).final.text == "ok"
for server_package in ("services", "gateway", "grpc_health", "pydantic"):
    assert importlib.util.find_spec(server_package) is None, server_package
print("client-only install OK")
"""


def test_client_installs_alone(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(ROOT / "clients" / "python")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr
    # Run from tmp_path so the repository's own folders are not on sys.path.
    probe = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert "client-only install OK" in probe.stdout
