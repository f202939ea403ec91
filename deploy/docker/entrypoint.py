"""Entry point of the cogmesh image: one image, one service per container.

    entrypoint.py <service> [--flag value ...]   run gateway, runtime, policy, context, sessions or models
    entrypoint.py health [address] [service]     grpc.health.v1 check; exit 0 when SERVING

The service replaces this process (exec), so it is PID 1 and gets SIGTERM directly
to drain. Inside a container a service binds all interfaces on its default port
unless COGMESH_LISTEN says otherwise. The health check asks COGMESH_HEALTH_ADDR,
else the port of COGMESH_LISTEN on loopback, else the gateway's port.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from services.kit.config import DEFAULT_PORTS as PORTS
from services.suite.supervisor import MODULES

HEALTH_TIMEOUT_S = 2.0
USAGE = f"usage: entrypoint.py {{{'|'.join(MODULES)}}} [flags] | entrypoint.py health [address] [service]"


def health_address(environ: dict[str, str]) -> str:
    if environ.get("COGMESH_HEALTH_ADDR"):
        return environ["COGMESH_HEALTH_ADDR"]
    listen = environ.get("COGMESH_LISTEN", "")
    port = listen.rsplit(":", 1)[1] if ":" in listen else str(PORTS["gateway"])
    return f"127.0.0.1:{port}"


def health(args: list[str]) -> int:
    """Exit 0 when the server (or `service`) answers SERVING, 1 otherwise: Docker's HEALTHCHECK contract."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    address = args[0] if args else health_address(dict(os.environ))
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
    os.execv(sys.executable, [sys.executable, "-m", MODULES[name], *rest])
    return 0  # unreachable: execv replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
