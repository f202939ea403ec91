"""Browser edge entry point: `python -m gateway.web [--listen host:port] [--gateway-addr host:port]`.

Binds COGMESH_LISTEN, else COGMESH_WEB_ADDR (default 127.0.0.1:50050), and forwards to
COGMESH_GATEWAY_ADDR over plaintext gRPC: run it beside the gateway.
"""

from __future__ import annotations

import uvicorn

from gateway.main import is_loopback
from gateway.settings import GatewaySettings
from gateway.web.app import create_app
from services.kit.config import load_settings
from services.kit.logging import configure_logging, log


def listen_address(settings: GatewaySettings) -> tuple[str, int]:
    """host and port to bind; a gateway without API keys (dev mode) is only put on loopback."""
    listen = settings.listen or settings.web_addr
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"web: the listen address must be host:port, got {listen!r}")
    if settings.api_keys_file is None and not is_loopback(listen):
        raise SystemExit(
            f"web: without API keys (COGMESH_API_KEYS_FILE) the gateway runs in dev mode, unauthenticated; "
            f"its browser edge binds loopback only, not {listen}"
        )
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> None:
    settings = load_settings(GatewaySettings, argv, prog="cogmesh-web")
    configure_logging("web", settings)
    host, port = listen_address(settings)
    log.info("browser edge", listen=f"{host}:{port}", gateway=settings.gateway_addr, console="/console/")
    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        lifespan="on",
        log_config=None,  # structlog's handlers, set up above
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=max(int(settings.shutdown_grace_s), 1),
    )
    uvicorn.Server(config).run()
