"""The browser edge as one ASGI app: GatewayService over Connect and gRPC-Web, the web console, CORS.

/cogmesh.gateway.v1.GatewayService/<Method>   Connect (JSON or binary) and gRPC-Web, forwarded
/cogmesh.gateway.v1.AgentService/<Method>     the same, for the tenant's agents (forward_agents.py)
/console/                                     the web console (built by `make console`)
/healthz                                      200 while the gateway answers SERVING, else 503
/v1/{chat/completions,responses,models}       OpenAI-compatible API over the agents (openai/)
/mcp                                          exposed agents as MCP tools, streamable HTTP (mcp_server.py)
/agui/{agent}                                 AG-UI: a run of the agent, its events over SSE (agui.py)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import grpc
from connectrpc.codec import Codec
from connectrpc.compat import google_protobuf_binary_codec, google_protobuf_json_codec
from connectrpc.errors import ConnectError, ErrorDetail
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from protobuf.wkt import Any as AnyDetail
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from cogmesh.common.v1 import errors_pb2
from cogmesh.gateway.v1.gateway_connect import GatewayServiceASGIApplication
from gateway.settings import GatewaySettings
from gateway.web import mcp_server
from gateway.web.agui import routes as agui_routes
from gateway.web.forward import GatewayForwarder, connect_code
from gateway.web.forward_agents import AGENT_SERVICE_PATH, AgentForwarder, AgentServiceASGIApplication
from gateway.web.openai import routes as openai_routes
from services.kit.clients import open_channel
from services.kit.errors import CogmeshError, InvalidArgument

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

M = TypeVar("M", bound=Message)


class BadBody(CogmeshError):
    """A request body that is not a message at all (no field of it to name)."""

    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = errors_pb2.ERROR_REASON_INVALID_ARGUMENT


def refusal(error: CogmeshError) -> ConnectError:
    """The error as the gateway would answer it: the same code, message and google.rpc details."""
    status = error.to_status()
    details = [ErrorDetail(AnyDetail(type_url=d.type_url, value=d.value)) for d in status.details]
    return ConnectError(connect_code(error.code), status.message, details)


def json_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    return "null" if value is None else "a number"


def misshapen(value: Any, descriptor: Any, path: str = "") -> tuple[str, Descriptor, Any] | None:
    """The first message in `value` given as something other than a JSON object: (field path, type, value).

    The protobuf JSON parser reads any iterable as a message: `[]` or `[[]]` becomes an empty
    message instead of an error.
    """
    if not isinstance(value, dict):
        return path, descriptor, value
    fields = {name: f for f in descriptor.fields for name in (f.name, f.json_name)}
    for key, item in value.items():
        field = fields.get(key)
        if field is None or field.message_type is None or item is None:
            continue  # unknown names and scalars: the parser's to refuse; null: the field unset
        for at, element, target in messages_in(field, item, f"{path}.{field.name}" if path else field.name):
            if found := misshapen(element, target, at):
                return found
    return None


def messages_in(field: Any, item: Any, name: str) -> Iterator[tuple[str, Any, Descriptor]]:
    """(path, JSON value, type) of each message a message field's JSON value holds."""
    target = field.message_type
    if target.GetOptions().map_entry:
        values = target.fields_by_name["value"].message_type
        if values is not None and not is_well_known(values) and isinstance(item, dict):
            yield from ((f"{name}[{key!r}]", v, values) for key, v in item.items() if v is not None)
    elif is_well_known(target):
        return  # Struct, Value, Timestamp...: JSON forms of their own, which the parser checks
    elif field.is_repeated:
        if isinstance(item, list):  # else the parser says a repeated field needs an array
            yield from ((f"{name}[{i}]", v, target) for i, v in enumerate(item) if v is not None)
    else:
        yield name, item, target


def is_well_known(descriptor: Descriptor) -> bool:
    return descriptor.full_name.startswith("google.protobuf.")


class ObjectJSONCodec:
    """Protobuf JSON that refuses, as invalid_argument naming where, a message given as anything but an object.

    Without it a body of `[]` is an empty CreateSessionRequest: a session created from no request.
    Connect (unary, streaming and GET) and gRPC-Web with +json all decode requests through this codec.
    """

    def __init__(self, parser: Codec[Message, Any]) -> None:
        self._parser = parser

    def name(self) -> str:
        return self._parser.name()

    def encode(self, message: Message) -> bytes:
        return self._parser.encode(message)

    def decode(self, data: bytes | bytearray, message_class: type[M]) -> M:
        try:
            value = json.loads(data)
        except ValueError as exc:
            raise refusal(BadBody(f"the request is not JSON: {exc}")) from None
        found = misshapen(value, message_class.DESCRIPTOR)
        if found is not None:
            path, descriptor, given = found
            wanted = f"a JSON object (a {descriptor.full_name}), not {json_kind(given)}"
            if not path:
                raise refusal(BadBody(f"the request must be {wanted}"))
            raise refusal(InvalidArgument([(path, f"must be {wanted}")]))
        decoded: M = self._parser.decode(data, message_class)
        return decoded


def cors_origins(settings: GatewaySettings) -> list[str]:
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


def create_app(settings: GatewaySettings) -> ASGIApp:
    forwarder = GatewayForwarder()
    agent_forwarder = AgentForwarder()
    # JSON with a field the protos do not have (a typo such as "scopes") is refused, as the
    # protobuf JSON mapping asks, rather than dropped: a dropped scope would create an unscoped session.
    codecs = [
        google_protobuf_binary_codec(),
        ObjectJSONCodec(google_protobuf_json_codec(ignore_unknown_fields=False)),
    ]
    rpc = GatewayServiceASGIApplication(forwarder, codecs=codecs)
    agents_rpc = AgentServiceASGIApplication(agent_forwarder, codecs=codecs)
    mcp = mcp_server.McpEdge()
    channel: grpc.aio.Channel | None = None

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        nonlocal channel
        # The gateway's address may name replicas (a list or dns:///): calls spread over them like internal ones.
        channel = open_channel(settings.gateway_addr, settings)
        forwarder.attach(channel)
        agent_forwarder.attach(channel)
        try:
            async with mcp.serving(channel):  # the MCP session manager's run(), for the app's life
                yield
        finally:
            forwarder.attach(None)
            agent_forwarder.attach(None)
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
    site = Starlette(
        routes=[
            Route("/healthz", healthz),
            *mcp_server.routes(mcp),
            *console_routes(console_dir),
            *agui_routes(lambda: channel),
            *openai_routes(lambda: channel),
        ],
        lifespan=lifespan,
    )

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(SERVICE_PATH):
            await rpc(scope, receive, send)
        elif scope["type"] == "http" and scope["path"].startswith(AGENT_SERVICE_PATH):
            await agents_rpc(scope, receive, send)
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
