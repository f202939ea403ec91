"""The browser edge as one ASGI app: GatewayService over Connect and gRPC-Web, the web console, CORS.

/cogmesh.gateway.v1.GatewayService/<Method>   Connect (JSON or binary) and gRPC-Web, forwarded
/console/                                     the web console (built by `make console`)
/healthz                                      200 while the gateway answers SERVING, else 503
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
from connectrpc.compat import google_protobuf_binary_codec, google_protobuf_json_codec
from grpc_health.v1 import health_pb2, health_pb2_grpc
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from cogmesh.gateway.v1.gateway_connect import GatewayServiceASGIApplication
from gateway.web.forward import GatewayForwarder
from services.kit.clients import open_channel
from services.kit.config import Settings

SERVICE_PATH = "/cogmesh.gateway.v1.GatewayService/"
DEFAULT_CONSOLE_DIR = Path(__file__).resolve().parent / "console" / "dist"
HEALTH_TIMEOUT_S = 2.0

# What a page of another origin may send (Connect's and gRPC-Web's headers, the bearer key, the
# trace) and read (gRPC-Web's status, which a browser hides unless exposed).
CORS_ALLOW_HEADERS = [
    "authorization",
    "content-type",
    "connect-protocol-version",
    "connect-timeout-ms",
    "connect-accept-encoding",
    "connect-content-encoding",
    "grpc-timeout",
    "grpc-accept-encoding",
    "x-grpc-web",
    "x-user-agent",
    "traceparent",
    "tracestate",
]
CORS_EXPOSE_HEADERS = ["grpc-status", "grpc-message", "grpc-status-details-bin", "grpc-encoding"]


def cors_origins(settings: Settings) -> list[str]:
    return [origin.strip().rstrip("/") for origin in settings.web_cors_origins.split(",") if origin.strip()]


def console_routes(directory: Path) -> list[BaseRoute]:
    async def to_console(_: Request) -> Response:
        return RedirectResponse("/console/")

    if (directory / "index.html").is_file():
        console: BaseRoute = Mount("/console", app=StaticFiles(directory=directory, html=True))
    else:

        async def not_built(_: Request) -> Response:
            return PlainTextResponse(
                f"the web console is not built ({directory} has no index.html): run `make console`", 503
            )

        console = Route("/console/{path:path}", not_built)
    return [Route("/", to_console), Route("/console", to_console), console]


def create_app(settings: Settings) -> ASGIApp:
    forwarder = GatewayForwarder()
    # JSON with a field the protos do not have (a typo such as "scopes") is refused, as the
    # protobuf JSON mapping asks, rather than dropped: a dropped scope would create an unscoped session.
    rpc = GatewayServiceASGIApplication(
        forwarder, codecs=[google_protobuf_binary_codec(), google_protobuf_json_codec(ignore_unknown_fields=False)]
    )
    channel: grpc.aio.Channel | None = None

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        nonlocal channel
        # The gateway's address may name replicas (a list or dns:///): calls spread over them like internal ones.
        channel = open_channel(settings.gateway_addr, settings)
        forwarder.attach(channel)
        try:
            yield
        finally:
            forwarder.attach(None)
            await channel.close()

    async def healthz(_: Request) -> Response:
        if channel is None:
            return JSONResponse({"gateway": settings.gateway_addr, "status": "NOT_CONNECTED"}, 503)
        stub: Any = health_pb2_grpc.HealthStub(channel)
        try:
            reply = await stub.Check(health_pb2.HealthCheckRequest(), timeout=HEALTH_TIMEOUT_S)
            status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        except grpc.aio.AioRpcError as exc:
            status = f"{exc.code().name}: {exc.details()}"
        return JSONResponse({"gateway": settings.gateway_addr, "status": status}, 200 if status == "SERVING" else 503)

    console_dir = settings.web_console_dir or DEFAULT_CONSOLE_DIR
    site = Starlette(routes=[Route("/healthz", healthz), *console_routes(console_dir)], lifespan=lifespan)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(SERVICE_PATH):
            await rpc(scope, receive, send)
        else:
            await site(scope, receive, send)

    return CORSMiddleware(
        app,
        allow_origins=cors_origins(settings),
        allow_methods=["GET", "POST"],
        allow_headers=CORS_ALLOW_HEADERS,
        expose_headers=CORS_EXPOSE_HEADERS,
        max_age=7200,
    )
