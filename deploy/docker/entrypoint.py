"""Entry point of the cogmesh image: one image, one service per container.

    entrypoint.py <service> [--flag value ...]   run gateway, runtime, policy, context, sessions, models, memory or web
    entrypoint.py health [address] [service]     grpc.health.v1 check; exit 0 when SERVING
    entrypoint.py health http://host:port/healthz   the browser edge's check (web); exit 0 on 200

The service replaces this process (exec), so it is PID 1 and gets SIGTERM directly
to drain. Inside a container a service binds all interfaces on its default port
unless COGMESH_LISTEN says otherwise. The health check asks COGMESH_HEALTH_ADDR,
else the port of COGMESH_LISTEN on loopback, else the gateway's port; on the browser edge's
port (50050, HTTP) it asks GET /healthz instead of grpc.health.v1.

Configuration is the defaults shipped in the image (services/defaults, the same files
`cogmesh up` reads), with a deployment's changes layered on top: files mounted in
/etc/cogmesh/overrides/agents replace or add agents (``<name>.yaml``, ``.yml`` or ``.md``
replaces every shipped file of agent ``<name>``), files in .../policy replace the shipped
policy file of the same name, and .../models/models.yaml replaces the catalogue. The
layered folders are written under /tmp before the service starts; a variable the
deployment sets itself (COGMESH_AGENTS_DIR, COGMESH_POLICY_DIR, COGMESH_MODELS_FILE) wins.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from services.kit.config import DEFAULT_PORTS as PORTS
from services.lib.agents import AGENT_FILE_SUFFIXES, DEFAULT_AGENTS_DIR
from services.suite.supervisor import MODULES

HEALTH_TIMEOUT_S = 2.0
DEFAULTS = DEFAULT_AGENTS_DIR.parent  # services/defaults inside the installed package
OVERRIDES = Path("/etc/cogmesh/overrides")
LAYERED = Path("/tmp/cogmesh-config")
USAGE = f"usage: entrypoint.py {{{'|'.join(MODULES)}}} [flags] | entrypoint.py health [address] [service]"


def health_address(environ: dict[str, str]) -> str:
    if environ.get("COGMESH_HEALTH_ADDR"):
        return environ["COGMESH_HEALTH_ADDR"]
    listen = environ.get("COGMESH_LISTEN", "")
    port = listen.rsplit(":", 1)[1] if ":" in listen else str(PORTS["gateway"])
    return f"127.0.0.1:{port}"


def http_health(url: str) -> int:
    """The browser edge's check: GET /healthz answers 200 while the gateway behind it is SERVING."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=HEALTH_TIMEOUT_S) as reply:
            print(f"{url}: {reply.status}")
            return 0
    except (urllib.error.URLError, OSError) as exc:
        print(f"{url}: {exc}", file=sys.stderr)
        return 1


def health(args: list[str]) -> int:
    """Exit 0 when the server (or `service`) answers SERVING, 1 otherwise: Docker's HEALTHCHECK contract."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    address = args[0] if args else health_address(dict(os.environ))
    if address.startswith("http://"):
        return http_health(address)
    if address.rsplit(":", 1)[-1] == str(PORTS["web"]):
        return http_health(f"http://{address}/healthz")
    service = args[1] if len(args) > 1 else ""
    with grpc.insecure_channel(address) as channel:
        try:
            stub: Any = health_pb2_grpc.HealthStub(channel)
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=HEALTH_TIMEOUT_S)
        except grpc.RpcError as exc:
            print(f"{address}: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        print(f"{address}: {status}", file=sys.stderr)
        return 1
    print(f"{address}: {status}")
    return 0


def _override_files(directory: Path) -> list[Path]:
    """Files of an overrides folder; a ConfigMap volume's ..data links and dot-files are not."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if not p.name.startswith(".") and p.is_file())


def layer_config(
    environ: dict[str, str], overrides: Path = OVERRIDES, defaults: Path = DEFAULTS, into: Path = LAYERED
) -> dict[str, str]:
    """The shipped defaults with the overrides on top; returns the variables that point the
    service at them (nothing when there are no overrides: the service reads the defaults)."""
    variables: dict[str, str] = {}
    agents = _override_files(overrides / "agents")
    if agents and "COGMESH_AGENTS_DIR" not in environ:
        target = into / "agents"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(defaults / "agents", target)
        for file in agents:
            for shipped in target.iterdir():
                if shipped.is_file() and shipped.stem == file.stem and shipped.suffix in AGENT_FILE_SUFFIXES:
                    shipped.unlink()
            (target / file.name).write_bytes(file.read_bytes())
        variables["COGMESH_AGENTS_DIR"] = str(target)
    policy = _override_files(overrides / "policy")
    if policy and "COGMESH_POLICY_DIR" not in environ:
        target = into / "policy"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(defaults / "policy", target)
        for file in policy:
            (target / file.name).write_bytes(file.read_bytes())
        variables["COGMESH_POLICY_DIR"] = str(target)
    catalogue = overrides / "models" / "models.yaml"
    if catalogue.is_file() and "COGMESH_MODELS_FILE" not in environ:
        variables["COGMESH_MODELS_FILE"] = str(catalogue)
    return variables


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name == "health":
        return health(rest)
    if name not in MODULES:
        print(f"unknown service {name!r}\n{USAGE}", file=sys.stderr)
        return 2
    os.environ.setdefault("COGMESH_LISTEN", f"0.0.0.0:{PORTS[name]}")
    os.environ.update(layer_config(dict(os.environ)))
    os.execv(sys.executable, [sys.executable, "-m", MODULES[name], *rest])
    return 0  # unreachable: execv replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
