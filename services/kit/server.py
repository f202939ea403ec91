"""The one way every cogmesh service boots: grpc.aio server, health, reflection,
tracing, metrics, request-scoped logs, error mapping, keepalive and graceful
shutdown (drain) on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import signal
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from services.kit.clients import Clients
from services.kit.config import Settings, load_settings
from services.kit.errors import ErrorMappingInterceptor
from services.kit.logging import configure_logging, debug_enabled, log
from services.kit.metrics import MetricsServer, RpcRecorder, current_recorder, serve_metrics
from services.kit.telemetry import configure_tracing
from services.kit.validation import ValidationInterceptor

HEALTH = health.SERVICE_NAME
_HEALTH_PREFIX = f"/{HEALTH}/"


def server_options(settings: Settings, public: bool = False) -> list[tuple[str, Any]]:
    """Keepalive matched to the suite's clients (clients.channel_options) and a maximum connection age.

    Clients ping every keepalive_time_s, with or without calls; the server accepts pings down to
    half that (timers drift) and at least every 10 s (the shortest keepalive grpc-go allows, for
    clients outside the suite), so it never answers too_many_pings. After max_connection_age_s
    (gRPC adds +-10% jitter, so replicas do not all reconnect at once) the server sends GOAWAY:
    new calls open a new connection, re-resolving a dns: address and reaching replicas that
    came up. Calls on the old connection get max_connection_age_grace_s, then are cut: every
    stream of the suite resumes (Subscribe and SendMessage by seq on any replica; a runtime's
    append stream and a watch of the catalogue or of sessions' logs are opened again).
    """
    keepalive_ms = int(settings.keepalive_time_s * 1000)
    options: list[tuple[str, Any]] = [
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", int(settings.keepalive_timeout_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", min(keepalive_ms // 2, 10_000)),  # pings accepted
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.so_reuseport", 0),  # a second process on the same port must fail, not share it
    ]
    if not public:  # peers send tool results, journals and long replies; clients keep gRPC's 4 MiB
        options.append(("grpc.max_receive_message_length", settings.max_message_bytes))
    if settings.max_connection_age_s > 0:
        options += [
            ("grpc.max_connection_age_ms", int(settings.max_connection_age_s * 1000)),
            ("grpc.max_connection_age_grace_ms", int(settings.max_connection_age_grace_s * 1000)),
        ]
    return options


@dataclass
class Mount:
    """One servicer and how to add it: `add` is the generated add_XServicer_to_server."""

    add: Callable[[Any, grpc.aio.Server], None]
    servicer: Any
    service_name: str


def mount(servicer: Any, pb2: ModuleType, pb2_grpc: ModuleType, service: str) -> Mount:
    """Mount for a generated service, e.g. `mount(s, models_pb2, models_pb2_grpc, "ModelsService")`."""
    return Mount(
        getattr(pb2_grpc, f"add_{service}Servicer_to_server"),
        servicer,
        pb2.DESCRIPTOR.services_by_name[service].full_name,
    )


@dataclass
class App:
    """What a service contributes to the shared server: servicers and cleanup."""

    name: str
    mounts: list[Mount]
    # Run in this order once the server has stopped (the runtime hands its turns over before
    # it closes the tool and model clients those turns use).
    on_close: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    # Run inside the kit's own interceptors, so errors they raise are mapped like any other.
    interceptors: list[grpc.aio.ServerInterceptor] = field(default_factory=list)
    # Faces clients: keeps gRPC's 4 MiB limit on what they send.
    public: bool = False
    # TLS of a public port (server_credentials); internal hops get mTLS from the service mesh.
    credentials: grpc.ServerCredentials | None = None
    # Told the address other replicas reach this one at, once the server is bound and serving.
    on_serving: list[Callable[[str], None]] = field(default_factory=list)
    # Run when the drain ends, before calls in flight get their grace period: e.g. end streams
    # whose clients resume them on another replica, rather than hold the stop until the grace ends.
    on_drained: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


S = TypeVar("S", bound=Settings)
# A service's build takes its own settings class (services/<name>/settings.py); the in-process suite
# passes its class that has every service's fields.
Build = Callable[[S, Clients], Awaitable[App]]


# Request fields bound to every log line (and span) of an RPC: field name -> log key.
_REQUEST_IDS = {"tenant_id": "tenant", "session_id": "session_id", "turn_id": "turn_id"}
_ids_of_type: dict[type, tuple[tuple[str, ...], str]] = {}  # type -> (id fields, the wrapped request field)
# Server-side codes that mean the server failed (OpenTelemetry's rule for server spans).
_SERVER_FAULTS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


def _request_ids(request: Any) -> dict[str, str]:
    """The ids of a request, or of the one request it wraps (StartTurnRequest.turn, ...)."""
    kind = type(request)
    found = _ids_of_type.get(kind)
    if found is None:
        descriptor = getattr(request, "DESCRIPTOR", None)
        fields = getattr(descriptor, "fields_by_name", {})
        names = tuple(name for name in _REQUEST_IDS if name in fields)
        wrapped = ""
        if not names and descriptor is not None and descriptor.fields:
            first = descriptor.fields[0]  # a wrapper's request comes first (StartTurnRequest.turn, then .start)
            if first.message_type is not None and not first.is_repeated:
                wrapped = first.name
        found = _ids_of_type[kind] = (names, wrapped)
    names, wrapped = found
    if wrapped:
        return _request_ids(getattr(request, wrapped))
    return {_REQUEST_IDS[name]: value for name in names if (value := getattr(request, name))}


def _pass_bytes(serialize: Callable[[Any], bytes] | None) -> Callable[[Any], bytes] | None:
    """The response serializer, letting a handler write a response it already encoded (bytes)."""
    if serialize is None:
        return None

    def serializer(message: Any) -> bytes:
        return message if type(message) is bytes else serialize(message)

    return serializer


def _rpc_type(handler: Any) -> str:
    if handler.unary_unary:
        return "unary"
    if handler.unary_stream:
        return "server_stream"
    if handler.stream_unary:
        return "client_stream"
    return "bidi_stream"


class ObservabilityInterceptor(grpc.aio.ServerInterceptor):
    """Per RPC, one wrapper for all three signals.

    * Tracing: a SERVER span named after the method, continuing the caller's trace from the
      W3C `traceparent` metadata, with the request's tenant/session/turn ids as attributes and
      the final status code (server faults mark the span as an error). Health checks are not
      traced: probes would drown the traces.
    * Logs: service, method and the request's ids bound to every line the RPC writes.
    * Metrics: latency by method and status, active streams, and what the responses carry
      (see metrics.RpcRecorder).

    Leaner than OpenTelemetry's generic gRPC interceptor (no proxy around the servicer
    context, one wrapper instead of two); spans and attribute names follow its conventions.
    """

    def __init__(self, service: str, metrics: bool, tracing: bool = False) -> None:
        self.service = service
        self.metrics = metrics
        self._tracer = trace.get_tracer("cogmesh.kit.server") if tracing else None

    def _span(self, method: str, context: Any) -> AbstractContextManager[trace.Span]:
        if self._tracer is None or method.startswith(_HEALTH_PREFIX):
            return contextlib.nullcontext(trace.INVALID_SPAN)
        carrier = {key: value for key, value in context.invocation_metadata() or () if isinstance(value, str)}
        service, _, name = method[1:].partition("/")
        return self._tracer.start_as_current_span(
            method,
            context=propagate.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": name},
            record_exception=False,
            set_status_on_exception=False,
        )

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        handler: Any = await continuation(handler_call_details)
        if handler is None:
            return handler
        method: str = handler_call_details.method
        rpc_type = _rpc_type(handler)
        inner = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
        single_request = rpc_type in ("unary", "server_stream")

        def begin(request: Any, span: trace.Span) -> RpcRecorder | None:
            ids = _request_ids(request) if single_request else {}
            # Each RPC runs in its own task, so these bindings end with it.
            structlog.contextvars.bind_contextvars(service=self.service, rpc=method, **ids)
            if ids and span.is_recording():
                span.set_attributes({f"cogmesh.{key}": value for key, value in ids.items()})
            recorder = RpcRecorder(method, rpc_type) if self.metrics else None
            current_recorder.set(recorder)  # for handlers that write their stream themselves
            return recorder

        def finish(
            recorder: RpcRecorder | None, span: trace.Span, context: Any, error: BaseException | None, started: float
        ) -> None:
            if isinstance(error, asyncio.CancelledError | GeneratorExit):
                code = grpc.StatusCode.CANCELLED
            elif error is not None and not isinstance(error, grpc.aio.AbortError):
                code = grpc.StatusCode.UNKNOWN
            else:
                code = context.code() or grpc.StatusCode.OK
            if recorder is not None:
                recorder.end(code.name)
            if span.is_recording():
                span.set_attribute("rpc.grpc.status_code", code.value[0])
                if code in _SERVER_FAULTS:
                    span.set_status(Status(StatusCode.ERROR, code.name))
            if debug_enabled():
                log.debug("rpc", code=code.name, duration_ms=round((time.perf_counter() - started) * 1000, 3))

        if rpc_type in ("unary", "client_stream"):

            async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                with self._span(method, context) as span:
                    started = time.perf_counter()
                    recorder = begin(request, span)
                    error: BaseException | None = None
                    try:
                        response = await inner(request, context)
                        if recorder is not None:
                            recorder.sent(response)
                        return response
                    except BaseException as exc:
                        error = exc
                        raise
                    finally:
                        finish(recorder, span, context, error, started)

            factory = (
                grpc.unary_unary_rpc_method_handler if rpc_type == "unary" else grpc.stream_unary_rpc_method_handler
            )
            return factory(unary, handler.request_deserializer, _pass_bytes(handler.response_serializer))

        streaming: Any
        if inspect.isasyncgenfunction(inner):
            # Written here rather than yielded to grpc: grpc leaves a handler's generator suspended at
            # its `yield` when a write fails (the client cancelled mid-write), and the garbage collector
            # closes it later from another task, where the span's context cannot be detached ("Failed
            # to detach context") and the handler's own cleanup runs late. Here the span, the handler's
            # generator and its cleanup all end in the RPC's task.

            async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
                with self._span(method, context) as span:
                    started = time.perf_counter()
                    recorder = begin(request, span)
                    error: BaseException | None = None
                    responses = inner(request, context)
                    try:
                        async for item in responses:
                            if recorder is not None:
                                recorder.sent(item)
                            await context.write(item)
                    except BaseException as exc:
                        error = exc
                        raise
                    finally:
                        await responses.aclose()
                        finish(recorder, span, context, error, started)

        else:  # a coroutine that streams with context.write(), like grpc_health's Watch

            async def streaming(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
                with self._span(method, context) as span:
                    started = time.perf_counter()
                    recorder = begin(request, span)
                    error: BaseException | None = None
                    try:
                        await inner(request, context)
                    except BaseException as exc:
                        error = exc
                        raise
                    finally:
                        finish(recorder, span, context, error, started)

        factory_s = (
            grpc.unary_stream_rpc_method_handler
            if rpc_type == "server_stream"
            else grpc.stream_stream_rpc_method_handler
        )
        return factory_s(streaming, handler.request_deserializer, _pass_bytes(handler.response_serializer))


class RunningServer:
    """A started server; `port` is the bound port (useful with port 0 in tests)."""

    def __init__(
        self,
        app: App,
        server: grpc.aio.Server,
        health_servicer: Any,
        clients: Clients,
        port: int,
        drain_s: float = 0.0,
    ):
        self.app, self.server, self.port = app, server, port
        self._health = health_servicer
        self._clients = clients
        self.drain_s = drain_s

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def stop(self, grace: float) -> None:
        """Drain, then stop: NOT_SERVING at once so probes and load balancers route new calls
        elsewhere, still accepting calls for `drain_s` while they catch up, then the app's
        `on_drained` hand-offs, then no new RPCs and `grace` seconds for in-flight ones
        (streams included) before they are cancelled."""
        await self._health.enter_graceful_shutdown()
        if self.drain_s > 0:
            log.info("draining", drain_s=self.drain_s, grace_s=grace)
            await asyncio.sleep(self.drain_s)
        for hand_off in self.app.on_drained:
            await hand_off()
        await self.server.stop(grace)
        for close in self.app.on_close:
            await close()
        await self._clients.close()


def server_credentials(
    cert_file: Path | None, key_file: Path | None, client_ca_file: Path | None
) -> grpc.ServerCredentials | None:
    """TLS when a certificate is configured; mTLS when a client CA is configured too."""
    if cert_file is None and key_file is None:
        if client_ca_file is not None:
            raise SystemExit("COGMESH_TLS_CLIENT_CA_FILE needs COGMESH_TLS_CERT_FILE and COGMESH_TLS_KEY_FILE")
        return None
    if cert_file is None or key_file is None:
        raise SystemExit("TLS needs both COGMESH_TLS_CERT_FILE and COGMESH_TLS_KEY_FILE")
    try:
        key, cert = key_file.read_bytes(), cert_file.read_bytes()
        ca = client_ca_file.read_bytes() if client_ca_file else None
    except OSError as exc:
        raise SystemExit(f"cannot read TLS file {exc.filename}: {exc.strerror}") from exc
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


async def start(build: Build[S], settings: S, listen: str) -> RunningServer:
    """Build the app, bind `listen` and start serving; health turns SERVING when ready."""
    settings = settings.model_copy(update={"listen": listen})
    clients = Clients(settings)
    app = await build(settings, clients)
    interceptors: list[grpc.aio.ServerInterceptor] = [
        ObservabilityInterceptor(app.name, settings.metrics, settings.tracing),
        ErrorMappingInterceptor(),
        *app.interceptors,
        ValidationInterceptor(),  # innermost: after authentication, before the servicer (the protos' field rules)
    ]
    server = grpc.aio.server(interceptors=interceptors, options=server_options(settings, app.public))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for mount in app.mounts:
        mount.add(mount.servicer, server)
    names = [m.service_name for m in app.mounts]
    reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    try:
        port = server.add_secure_port(listen, app.credentials) if app.credentials else server.add_insecure_port(listen)
    except RuntimeError as exc:
        raise SystemExit(f"{app.name}: cannot bind {listen}: {exc}") from exc
    await server.start()
    for name in ["", *names]:  # "" is the whole server, as grpc health checkers ask by default
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    for serving in app.on_serving:
        serving(settings.advertise_address(listen, port))
    return RunningServer(app, server, health_servicer, clients, port, drain_s=settings.drain_s)


async def serve(service: str, build: Build[S], settings: S) -> None:
    listen = settings.listen_address(service)
    metrics_server: MetricsServer | None = None
    if settings.metrics and settings.metrics_port:
        metrics_server = serve_metrics(settings.metrics_host, settings.metrics_port)
    try:
        running = await start(build, settings, listen)
        # What startup made (modules, descriptors, provider SDKs) lives as long as the process:
        # frozen, full collections skip it, instead of pausing every stream for 40-180 ms.
        gc.collect()
        gc.freeze()
        log.info(
            "serving",
            address=listen,
            port=running.port,
            services=[m.service_name for m in running.app.mounts],
            metrics=f"{settings.metrics_host}:{metrics_server.port}" if metrics_server else "",
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("shutting down", drain_s=settings.drain_s, grace_s=settings.shutdown_grace_s)
        await running.stop(settings.shutdown_grace_s)
        log.info("stopped")
    finally:
        if metrics_server is not None:  # scraped until the very end, drain included
            metrics_server.close()


def run(service: str, build: Build[S], settings_class: type[S], argv: list[str] | None = None) -> None:
    """Entry point of every service process: `python -m services.<name> [--flags]`, flags of `settings_class`."""
    settings = load_settings(settings_class, argv, prog=f"cogmesh-{service}")
    configure_logging(service, settings)
    configure_tracing(service, settings)
    asyncio.run(serve(service, build, settings))
