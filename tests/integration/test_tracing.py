"""Tracing: one OpenTelemetry trace per turn across all six services, W3C trace context
in gRPC metadata, error status on server faults, and OTLP export from a real process."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from cogmesh.gateway.v1 import gateway_pb2_grpc
from cogmesh.models.v1 import models_pb2, models_pb2_grpc
from services.kit.clients import open_channel
from services.kit.config import Settings
from services.kit.errors import NotFound
from services.kit.server import App, mount, start
from services.kit.telemetry import configure_tracing
from services.suite.inprocess import Suite, start_suite
from services.suite.supervisor import wait_serving
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session, send
from tests.support.ports import free_port

pytestmark = pytest.mark.asyncio(loop_scope="module")

GATEWAY = "cogmesh.gateway.v1.GatewayService"
RUNTIME = "cogmesh.runtime.v1.RuntimeService"
SESSIONS = "cogmesh.sessions.v1.SessionsService"
MODELS = "cogmesh.models.v1.ModelsService"
CONTEXT = "cogmesh.context.v1.ContextService"
POLICY = "cogmesh.policy.v1.PolicyService"


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    """Every span this process finishes while the module runs."""
    exporter = InMemorySpanExporter()
    assert configure_tracing("test", Settings(), [SimpleSpanProcessor(exporter)]) is not None
    yield exporter
    exporter.shutdown()  # later modules' spans are not kept


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def traced_suite(spans: InMemorySpanExporter) -> AsyncIterator[Suite]:
    suite = await start_suite(SUITE_SETTINGS)
    try:
        yield suite
    finally:
        await suite.stop(0)


def named(spans: list[ReadableSpan], method: str, kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in spans if s.name == f"/{method}" and s.kind == kind]


def one(spans: list[ReadableSpan], method: str, kind: SpanKind) -> ReadableSpan:
    found = named(spans, method, kind)
    assert len(found) == 1, f"expected one {kind.name} span {method}, got {len(found)}: {[s.name for s in spans]}"
    return found[0]


def parent_of(spans: list[ReadableSpan], span: ReadableSpan) -> ReadableSpan:
    assert span.parent is not None, f"{span.name} has no parent"
    for candidate in spans:
        if candidate.context.span_id == span.parent.span_id:
            return candidate
    raise AssertionError(f"parent of {span.name} is not in the trace")


def ancestor(spans: list[ReadableSpan], span: ReadableSpan, candidate: ReadableSpan) -> bool:
    """Whether `candidate` is above `span` in the tree."""
    while span.parent is not None:
        span = parent_of(spans, span)
        if span is candidate:
            return True
    return False


async def wait_for_span(exporter: InMemorySpanExporter, name: str, kind: SpanKind) -> ReadableSpan:
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            for span in exporter.get_finished_spans():
                if span.name == name and span.kind == kind:
                    return span
            await asyncio.sleep(0.01)


async def test_a_turn_is_one_trace_spanning_every_service(spans: InMemorySpanExporter, traced_suite: Suite) -> None:
    async with grpc.aio.insecure_channel(traced_suite.gateway_address) as channel:
        gateway = gateway_pb2_grpc.GatewayServiceStub(channel)
        session_id = await new_session(gateway)
        events = await send(gateway, session_id, "What is 17 * 23?")
    turn_id = events[-1].turn_id
    assert events[-1].WhichOneof("payload") == "final"

    # The runtime's server span names the turn; every span of its trace belongs to this turn.
    run_turn = await wait_for_span(spans, f"/{RUNTIME}/StartTurn", SpanKind.SERVER)
    assert run_turn.attributes is not None and run_turn.attributes["cogmesh.turn_id"] == turn_id
    runner = traced_suite.servers["runtime"].app.mounts[0].servicer.runner
    await asyncio.wait_for(runner.idle(), TIMEOUT_S)  # the turn's task ends after its last call (its end's append)
    trace_id = run_turn.context.trace_id
    tree = [s for s in spans.get_finished_spans() if s.context.trace_id == trace_id]

    # One root: the client's SendMessage at the gateway.
    roots = [s for s in tree if s.parent is None]
    assert [r.name for r in roots] == [f"/{GATEWAY}/SendMessage"]
    root = roots[0]
    assert root.kind == SpanKind.SERVER

    # Gateway -> runtime, from the gateway's background hand-over task, under the caller's request.
    runtime_server = one(tree, f"{RUNTIME}/StartTurn", SpanKind.SERVER)
    runtime_client = parent_of(tree, runtime_server)
    assert runtime_client.kind == SpanKind.CLIENT and runtime_client.name == f"/{RUNTIME}/StartTurn"
    assert parent_of(tree, runtime_client) is root
    # Gateway -> sessions for the lease.
    lease = one(tree, f"{SESSIONS}/AcquireTurnLease", SpanKind.SERVER)
    assert parent_of(tree, parent_of(tree, lease)) is root

    # Every hop is a client span in the caller and a server span in the callee whose parent came
    # over the wire (W3C trace context in the call's metadata).
    for server in tree:
        if server.kind != SpanKind.SERVER or server is root:
            continue
        client = parent_of(tree, server)
        assert client.kind == SpanKind.CLIENT and client.name == server.name, server.name
        assert server.parent is not None and server.parent.is_remote, server.name
        assert parent_of(tree, client).kind == SpanKind.SERVER, server.name
    # The runtime makes no call of its own in a turn: models and policy decide in it from their
    # snapshots, and its appends are messages on the replica's one AppendEventsStream, each a client
    # span of the turn's task under its StartTurn span (the stream belongs to no turn).
    called_by_runtime = {
        s.name.split("/")[1]
        for s in tree
        if s.kind == SpanKind.SERVER and s is not runtime_server and ancestor(tree, s, runtime_server)
    }
    assert called_by_runtime == set()
    appends = [
        s
        for s in tree
        if s.name == f"/{SESSIONS}/AppendEventsStream"
        and s.kind == SpanKind.CLIENT
        and ancestor(tree, s, runtime_server)
    ]
    assert appends, "the turn's appends are spans of its trace"

    services = {s.name.split("/")[1] for s in tree if s.kind == SpanKind.SERVER}
    assert GATEWAY in services and RUNTIME in services and SESSIONS in services
    assert not services & {MODELS, POLICY}, services
    # Request ids ride on the spans, so a trace can be found by session or turn.
    assert root.attributes is not None and root.attributes["cogmesh.session_id"] == session_id
    assert all(s.status.status_code != StatusCode.ERROR for s in tree)


async def test_an_incoming_traceparent_header_continues_the_callers_trace(
    spans: InMemorySpanExporter, traced_suite: Suite
) -> None:
    trace_id, parent_id = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331
    header = f"00-{trace_id:032x}-{parent_id:016x}-01"
    async with grpc.aio.insecure_channel(traced_suite.servers["models"].address) as channel:
        stub = models_pb2_grpc.ModelsServiceStub(channel)
        await stub.ResolveModel(
            models_pb2.ResolveModelRequest(name="local"), metadata=(("traceparent", header),), timeout=TIMEOUT_S
        )
    server = await wait_for_span(spans, f"/{MODELS}/ResolveModel", SpanKind.SERVER)
    matching = [
        s for s in spans.get_finished_spans() if s.name == f"/{MODELS}/ResolveModel" and s.context.trace_id == trace_id
    ]
    assert matching, f"no ResolveModel span continued trace {trace_id:032x} (last: {server.context.trace_id:032x})"
    assert matching[0].parent is not None and matching[0].parent.span_id == parent_id


async def test_outgoing_calls_carry_w3c_traceparent_metadata(spans: InMemorySpanExporter) -> None:
    seen: list[dict[str, str]] = []

    async def check(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> health_pb2.HealthCheckResponse:
        seen.append({k: v for k, v in context.invocation_metadata() or () if isinstance(v, str)})
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(
        check,
        request_deserializer=health_pb2.HealthCheckRequest.FromString,
        response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("grpc.health.v1.Health", {"Check": handler})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = open_channel(f"127.0.0.1:{port}", Settings())  # the kit's channel, as every service uses
    try:
        call = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
            response_deserializer=health_pb2.HealthCheckResponse.FromString,
        )
        with trace.get_tracer("test").start_as_current_span("caller") as caller:
            await call(health_pb2.HealthCheckRequest())
        caller_trace = caller.get_span_context().trace_id
    finally:
        await channel.close()
        await server.stop(0)
    header = seen[0]["traceparent"]
    version, trace_hex, span_hex, flags = header.split("-")
    assert version == "00" and int(flags, 16) & 1, header  # version 00, sampled
    assert int(trace_hex, 16) == caller_trace
    client = [s for s in spans.get_finished_spans() if s.name == "/grpc.health.v1.Health/Check"]
    assert client and client[-1].kind == SpanKind.CLIENT and int(span_hex, 16) == client[-1].context.span_id


class _Boom(models_pb2_grpc.ModelsServiceServicer):
    async def ListModels(self, request: Any, context: Any) -> Any:
        raise RuntimeError("a bug")

    async def ResolveModel(self, request: Any, context: Any) -> Any:
        raise NotFound(f"no model {request.name!r}")


async def _boom_app(settings: Settings, clients: Any) -> App:
    return App("boom", [mount(_Boom(), models_pb2, models_pb2_grpc, "ModelsService")])


async def test_a_server_fault_marks_the_span_as_error_and_client_errors_do_not(spans: InMemorySpanExporter) -> None:
    spans.clear()
    running = await start(_boom_app, SUITE_SETTINGS, "127.0.0.1:0")
    try:
        async with grpc.aio.insecure_channel(running.address) as channel:
            stub = models_pb2_grpc.ModelsServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await stub.ListModels(models_pb2.ListModelsRequest(), timeout=TIMEOUT_S)
            assert failed.value.code() == grpc.StatusCode.INTERNAL
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await stub.ResolveModel(models_pb2.ResolveModelRequest(name="x"), timeout=TIMEOUT_S)
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        await running.stop(0)
    faulty = await wait_for_span(spans, f"/{MODELS}/ListModels", SpanKind.SERVER)
    assert faulty.status.status_code == StatusCode.ERROR
    assert (
        faulty.attributes is not None and faulty.attributes["rpc.grpc.status_code"] == grpc.StatusCode.INTERNAL.value[0]
    )
    # NOT_FOUND is the caller's problem, not the server's: the span stays unset, as OpenTelemetry says.
    caller_error = await wait_for_span(spans, f"/{MODELS}/ResolveModel", SpanKind.SERVER)
    assert caller_error.status.status_code != StatusCode.ERROR


async def test_tracing_off_records_no_server_spans(spans: InMemorySpanExporter) -> None:
    from services.models import main as models_main

    running = await start(models_main.build, SUITE_SETTINGS.model_copy(update={"tracing": False}), "127.0.0.1:0")
    spans.clear()
    try:
        async with grpc.aio.insecure_channel(running.address) as channel:
            stub = models_pb2_grpc.ModelsServiceStub(channel)
            await stub.ListModels(models_pb2.ListModelsRequest(), timeout=TIMEOUT_S)
    finally:
        await running.stop(0)
    assert not [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]


# --------------------------------------------------------------------------- OTLP export, as a process


class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace collector that keeps what it receives."""

    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.received = threading.Event()

    def Export(self, request: Any, context: Any) -> Any:
        self.requests.append(request)
        self.received.set()
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[tuple[str, str]]:
        """(service.name, span name) of everything received."""
        out: list[tuple[str, str]] = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    out.extend((attributes.get("service.name", ""), s.name) for s in scope.spans)
        return out


async def test_a_service_process_exports_its_spans_over_otlp_when_configured() -> None:
    collector = _Collector()
    # A thread-pool server: the exporter sends from its own thread, not from an event loop.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    collector_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    listen = f"127.0.0.1:{free_port()}"
    env = dict(os.environ, OTEL_BSP_SCHEDULE_DELAY="50")  # export within 50 ms instead of 5 s
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.models",
        "--listen",
        listen,
        "--otlp-endpoint",
        f"http://127.0.0.1:{collector_port}",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await wait_serving(listen, TIMEOUT_S)
        async with grpc.aio.insecure_channel(listen) as channel:
            await models_pb2_grpc.ModelsServiceStub(channel).ResolveModel(
                models_pb2.ResolveModelRequest(name="local"), timeout=TIMEOUT_S
            )
        deadline = time.monotonic() + TIMEOUT_S
        while ("cogmesh-models", f"/{MODELS}/ResolveModel") not in collector.spans():
            assert time.monotonic() < deadline, f"collector got {collector.spans()}"
            await asyncio.sleep(0.05)
    finally:
        process.terminate()
        _, stderr = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
        server.stop(0)
    assert process.returncode == 0, stderr.decode()[-2000:]
