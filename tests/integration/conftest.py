"""Fixtures for integration tests: the whole suite in-process, one channel per service.

Each test module gets its own suite and event loop (`loop_scope="module"`); test
modules mark themselves with `pytestmark = pytest.mark.asyncio(loop_scope="module")`.
Tests that must break the suite (stop a server, change settings) start their own
with `running_suite(...)`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest_asyncio
from google.protobuf import message_factory
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cogmesh.common.v1 import events_pb2
from cogmesh.context.v1 import context_pb2, context_pb2_grpc
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.memory.v1 import memory_pb2_grpc
from cogmesh.models.v1 import models_pb2, models_pb2_grpc
from cogmesh.policy.v1 import policy_pb2, policy_pb2_grpc
from cogmesh.runtime.v1 import runtime_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2_grpc
from services.kit.server import RunningServer, start
from services.suite.inprocess import ORDER, Suite, start_suite
from services.suite.settings import SuiteSettings

# Short heartbeats keep Subscribe tests fast; short internal deadlines keep failure tests fast.
SUITE_SETTINGS = SuiteSettings(heartbeat_s=0.2, call_timeout_s=2, dev_mode=True)
TIMEOUT_S = 10.0  # no single RPC or stream of these tests may take longer
DOMAIN = "cogmesh.dev"

STUB_CLASSES: dict[str, Callable[[grpc.aio.Channel], Any]] = {
    "gateway": gateway_pb2_grpc.GatewayServiceStub,
    "runtime": runtime_pb2_grpc.RuntimeServiceStub,
    "policy": policy_pb2_grpc.PolicyServiceStub,
    "context": context_pb2_grpc.ContextServiceStub,
    "sessions": sessions_pb2_grpc.SessionsServiceStub,
    "models": models_pb2_grpc.ModelsServiceStub,
    "memory": memory_pb2_grpc.MemoryServiceStub,
}


# --------------------------------------------------------------------------- helpers


def status_details(
    err: grpc.aio.AioRpcError,
) -> tuple[error_details_pb2.ErrorInfo | None, list[tuple[str, str]]]:
    """Decode the google.rpc.Status of a failed call: (ErrorInfo or None, BadRequest violations)."""
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    info: error_details_pb2.ErrorInfo | None = None
    violations: list[tuple[str, str]] = []
    if status is None:
        return None, []
    assert status.code == err.code().value[0], "google.rpc.Status code disagrees with the gRPC status"
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend((v.field, v.description) for v in bad.field_violations)
    return info, violations


def payload(event: events_pb2.RuntimeEvent) -> str:
    """Name of the event's oneof payload, e.g. "assistant_delta"."""
    return event.WhichOneof("payload") or ""


def is_terminal(event: events_pb2.RuntimeEvent) -> bool:
    return payload(event) in ("final", "error")


async def send(
    gateway: gateway_pb2_grpc.GatewayServiceStub, session_id: str, content: str, model: str = ""
) -> list[events_pb2.RuntimeEvent]:
    """Run one turn through SendMessage and return its events, flattened, in arrival order."""

    async def run() -> list[events_pb2.RuntimeEvent]:
        events: list[events_pb2.RuntimeEvent] = []
        request = gateway_pb2.SendMessageRequest(session_id=session_id, content=content, model=model)
        async for response in gateway.SendMessage(request):
            assert len(response.events) > 0, "SendMessage sent a message without events"
            events.extend(response.events)
        return events

    return await asyncio.wait_for(run(), TIMEOUT_S)


async def new_session(gateway: gateway_pb2_grpc.GatewayServiceStub, **fields: Any) -> str:
    reply = await gateway.CreateSession(gateway_pb2.CreateSessionRequest(**fields), timeout=TIMEOUT_S)
    return reply.session.session_id  # type: ignore[no-any-return]


@dataclass
class Subscription:
    """A Subscribe stream read message by message, each read bounded by TIMEOUT_S."""

    call: Any

    async def next(self) -> gateway_pb2.SubscribeResponse:
        message = await asyncio.wait_for(self.call.read(), TIMEOUT_S)
        assert message is not grpc.aio.EOF, "Subscribe stream ended; it should tail until cancelled"
        return message  # type: ignore[no-any-return]

    async def events_until(
        self, stop: Callable[[list[events_pb2.RuntimeEvent]], bool]
    ) -> tuple[list[events_pb2.RuntimeEvent], int]:
        """Read until `stop(events so far)` holds; returns (events, heartbeats seen meanwhile)."""
        events: list[events_pb2.RuntimeEvent] = []
        heartbeats = 0
        while not stop(events):
            message = await self.next()
            if message.heartbeat:
                assert len(message.events) == 0, "a heartbeat must carry no events"
                heartbeats += 1
            else:
                assert len(message.events) > 0, "a non-heartbeat message must carry events"
                events.extend(message.events)
        return events, heartbeats

    def cancel(self) -> None:
        self.call.cancel()


def subscribe(gateway: gateway_pb2_grpc.GatewayServiceStub, session_id: str, after_seq: int = 0) -> Subscription:
    return Subscription(gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=after_seq)))


@contextlib.asynccontextmanager
async def running_suite(settings: SuiteSettings | None = None) -> AsyncIterator[tuple[Suite, dict[str, Any]]]:
    """A suite of its own (for tests that stop servers or need other settings) and a stub per service."""
    suite = await start_suite(settings or SUITE_SETTINGS)
    channels = {name: grpc.aio.insecure_channel(server.address) for name, server in suite.servers.items()}
    try:
        yield suite, {name: STUB_CLASSES[name](channel) for name, channel in channels.items()}
    finally:
        for channel in channels.values():
            await channel.close()
        await suite.stop(0)


LEAF_SERVICES = {
    "models": models_pb2.DESCRIPTOR.services_by_name["ModelsService"],
    "policy": policy_pb2.DESCRIPTOR.services_by_name["PolicyService"],
    "context": context_pb2.DESCRIPTOR.services_by_name["ContextService"],
}


@contextlib.asynccontextmanager
async def suite_with_hanging(
    dependency: str, settings: SuiteSettings | None = None
) -> AsyncIterator[tuple[dict[str, RunningServer], asyncio.Event]]:
    """The suite with one leaf service (models, policy or context) replaced by a black hole.

    Every call to it waits until the suite is torn down; its watches send nothing. Yields the servers by name and an
    event that is set when the first call reaches the black hole.
    """
    settings = settings or SUITE_SETTINGS
    release, reached = asyncio.Event(), asyncio.Event()

    async def hang(request: Any, context: Any) -> Any:
        reached.set()
        await release.wait()
        await context.abort(grpc.StatusCode.UNAVAILABLE, "black hole released")

    async def silent(request: Any, context: Any) -> AsyncIterator[Any]:
        # A watch (WatchCatalog, WatchPolicy) that never sends: the runtime asks the service instead.
        await release.wait()
        await context.abort(grpc.StatusCode.UNAVAILABLE, "black hole released")
        yield  # pragma: no cover - an async generator, never reached

    service = LEAF_SERVICES[dependency]
    handlers = {
        method.name: (
            grpc.unary_stream_rpc_method_handler if method.server_streaming else grpc.unary_unary_rpc_method_handler
        )(
            silent if method.server_streaming else hang,
            request_deserializer=message_factory.GetMessageClass(method.input_type).FromString,
            response_serializer=lambda message: message.SerializeToString(),
        )
        for method in service.methods
    }
    black_hole = grpc.aio.server()
    black_hole.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(service.full_name, handlers)])
    port = black_hole.add_insecure_port("127.0.0.1:0")
    await black_hole.start()

    servers: dict[str, RunningServer] = {}
    settings = settings.model_copy(update={f"{dependency}_addr": f"127.0.0.1:{port}"})
    try:
        for name, build in ORDER:  # dependency order, with the black hole standing in for `dependency`
            if name != dependency:
                servers[name] = await start(build, settings, "127.0.0.1:0")
                settings = settings.model_copy(update={f"{name}_addr": servers[name].address})
        yield servers, reached
    finally:
        release.set()
        for server in reversed(servers.values()):
            await server.stop(0)
        await black_hole.stop(0)


# --------------------------------------------------------------------------- fixtures


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def suite() -> AsyncIterator[Suite]:
    started = await start_suite(SUITE_SETTINGS)
    try:
        yield started
    finally:
        await started.stop(0)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def channels(suite: Suite) -> AsyncIterator[dict[str, grpc.aio.Channel]]:
    opened = {name: grpc.aio.insecure_channel(server.address) for name, server in suite.servers.items()}
    try:
        yield opened
    finally:
        for channel in opened.values():
            await channel.close()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def stubs(channels: dict[str, grpc.aio.Channel]) -> dict[str, Any]:
    """One stub per service, by service name ("gateway", "runtime", "sessions", ...)."""
    return {name: STUB_CLASSES[name](channel) for name, channel in channels.items()}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def gateway(stubs: dict[str, Any]) -> gateway_pb2_grpc.GatewayServiceStub:
    return stubs["gateway"]  # type: ignore[no-any-return]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def runtime(stubs: dict[str, Any]) -> runtime_pb2_grpc.RuntimeServiceStub:
    return stubs["runtime"]  # type: ignore[no-any-return]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sessions(stubs: dict[str, Any]) -> sessions_pb2_grpc.SessionsServiceStub:
    return stubs["sessions"]  # type: ignore[no-any-return]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def models(stubs: dict[str, Any]) -> models_pb2_grpc.ModelsServiceStub:
    return stubs["models"]  # type: ignore[no-any-return]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def policy(stubs: dict[str, Any]) -> policy_pb2_grpc.PolicyServiceStub:
    return stubs["policy"]  # type: ignore[no-any-return]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def context(stubs: dict[str, Any]) -> context_pb2_grpc.ContextServiceStub:
    return stubs["context"]  # type: ignore[no-any-return]
