"""The typed clients of services/kit/dependencies.py against a real sessions server in this process:
every failure, unary or mid-stream, is one DependencyError that keeps the dependency's status code,
message, ErrorInfo reason and details (BadRequest, RetryInfo), and answers as `from_dependency` maps it."""

from __future__ import annotations

import typing
import uuid
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.rpc import error_details_pb2

from cogmesh.common.v1 import events_pb2
from cogmesh.context.v1 import context_pb2
from cogmesh.memory.v1 import memory_pb2
from cogmesh.models.v1 import models_pb2
from cogmesh.policy.v1 import policy_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import schedules_pb2, webhooks_pb2
from cogmesh.sessions.v1 import sessions_pb2 as S
from services.kit import dependencies
from services.kit.clients import Clients, call
from services.kit.config import Settings
from services.kit.dependencies import SessionsClient
from services.kit.errors import DependencyError, RateLimited, Unavailable
from services.kit.server import RunningServer
from services.sessions.servicer import SessionsServicer
from services.sessions.store import MemorySessionStore
from tests.support.ports import free_port
from tests.support.sessions_server import leased, serve

TENANT = "acme"


@pytest.mark.parametrize(
    ("client", "module", "service"),
    [
        (dependencies.SessionsClient, S, "SessionsService"),
        (dependencies.ScheduleStoreClient, schedules_pb2, "ScheduleStoreService"),
        (dependencies.WebhookStoreClient, webhooks_pb2, "WebhookStoreService"),
        (dependencies.RuntimeClient, runtime_pb2, "RuntimeService"),
        (dependencies.PolicyClient, policy_pb2, "PolicyService"),
        (dependencies.ContextClient, context_pb2, "ContextService"),
        (dependencies.ModelsClient, models_pb2, "ModelsService"),
        (dependencies.MemoryClient, memory_pb2, "MemoryService"),
    ],
)
def test_each_client_has_every_rpc_of_its_service(client: type, module: ModuleType, service: str) -> None:
    """A new RPC in the proto needs its line in services/kit/dependencies.py, with its kind and messages."""
    expected: dict[str, tuple[type, tuple[Any, ...]]] = {}
    for method in module.DESCRIPTOR.services_by_name[service].methods:
        kind: type = dependencies.Unary
        if method.server_streaming:
            kind = dependencies.Bidi if method.client_streaming else dependencies.ServerStream
        messages = (getattr(module, method.input_type.name), getattr(module, method.output_type.name))
        expected[method.name] = (kind, messages)
    declared = {name: _declared(rpc) for name, rpc in vars(client).items() if isinstance(rpc, dependencies._Method)}
    assert declared == expected


def _declared(rpc: Any) -> tuple[type, tuple[Any, ...]]:
    """A client method's kind and (request, response) messages, as `Unary[Request, Response]()` declares them."""
    return type(rpc), typing.get_args(rpc.__orig_class__)


class Throttled(SessionsServicer):
    """Sessions refusing LookupSession as a rate-limited service does (RESOURCE_EXHAUSTED with RetryInfo)."""

    async def LookupSession(self, request: S.LookupSessionRequest, context: Any) -> Any:
        raise RateLimited("too many lookups", 2.5, metadata={"limit": "lookups"})


@pytest_asyncio.fixture
async def server() -> AsyncIterator[RunningServer]:
    running = await serve(Throttled(MemorySessionStore()))
    yield running
    await running.stop(0)


@pytest_asyncio.fixture
async def clients(server: RunningServer) -> AsyncIterator[Clients]:
    clients = Clients(Settings(sessions_addr=server.address))
    yield clients
    await clients.close()


async def test_a_refusal_keeps_the_status_code_reason_and_message(clients: Clients) -> None:
    sessions = SessionsClient.of(clients)
    with pytest.raises(DependencyError) as caught:
        await sessions.GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id="nope"))
    error = caught.value
    assert (error.dependency, error.status_code, error.code) == ("sessions", grpc.StatusCode.NOT_FOUND, error.code)
    assert error.code == grpc.StatusCode.NOT_FOUND  # a client error of the dependency is the caller's too
    assert error.error_reason == "SESSION_NOT_FOUND"
    assert "nope" in error.status_message
    assert error.to_status() == error.status  # passed on unchanged when nothing handles it


async def test_bad_input_keeps_every_field_violation(clients: Clients) -> None:
    with pytest.raises(DependencyError) as caught:
        await SessionsClient.of(clients).CreateSession(S.CreateSessionRequest())
    error = caught.value
    assert error.status_code == grpc.StatusCode.INVALID_ARGUMENT
    assert error.error_reason == "INVALID_ARGUMENT"
    fields = [v.field for bad in error.details_of(error_details_pb2.BadRequest) for v in bad.field_violations]
    assert "tenant_id" in fields


async def test_retry_info_and_error_info_metadata_are_kept(clients: Clients) -> None:
    with pytest.raises(DependencyError) as caught:
        await SessionsClient.of(clients).LookupSession(S.LookupSessionRequest(tenant_id=TENANT))
    error = caught.value
    assert error.status_code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error.error_reason == "RATE_LIMITED"
    assert error.error_info is not None and error.error_info.metadata["limit"] == "lookups"
    (retry,) = error.details_of(error_details_pb2.RetryInfo)
    assert retry.retry_delay.ToNanoseconds() == 2_500_000_000


async def test_the_kit_call_raises_the_same_error(clients: Clients) -> None:
    with pytest.raises(DependencyError) as caught:
        await call("sessions", clients.sessions.GetSession, S.GetSessionRequest(tenant_id=TENANT, session_id="nope"))
    assert caught.value.error_reason == "SESSION_NOT_FOUND"


async def test_a_stream_that_fails_mid_way_raises_the_same_error(clients: Clients, server: RunningServer) -> None:
    sessions = SessionsClient.of(clients)
    sid, token = await leased(clients.sessions, TENANT)
    delta = events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text="hi"))
    append = S.AppendEventsRequest(
        tenant_id=TENANT, session_id=sid, turn_id="t1", lease_token=token, append_id=uuid.uuid4().hex, events=[delta]
    )
    await sessions.AppendEvents(append)
    stream = sessions.ReadEvents(S.ReadEventsRequest(tenant_id=TENANT, session_id=sid, follow=True))
    first = await stream.__anext__()
    assert [e.assistant_delta.text for e in first.events] == ["hi"]
    await server.stop(0)  # the server goes away under the open stream
    with pytest.raises(DependencyError) as caught:
        async for _ in stream:
            pass
    assert isinstance(caught.value, Unavailable)  # this service's answer: the dependency is away
    assert caught.value.status_code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    assert caught.value.dependency == "sessions"


async def test_a_stream_refused_at_once_raises_on_read(clients: Clients) -> None:
    stream = SessionsClient.of(clients).ReadEvents(S.ReadEventsRequest(tenant_id=TENANT, session_id="nope"))
    with pytest.raises(DependencyError) as caught:
        await stream.read()
    assert caught.value.status_code == grpc.StatusCode.NOT_FOUND
    assert caught.value.error_reason == "SESSION_NOT_FOUND"


async def test_a_service_that_is_down_is_unavailable() -> None:
    clients = Clients(Settings(sessions_addr=f"127.0.0.1:{free_port()}", call_timeout_s=1.0))
    try:
        with pytest.raises(DependencyError) as caught:
            await SessionsClient.of(clients).GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id="s"))
    finally:
        await clients.close()
    error = caught.value
    assert isinstance(error, Unavailable) and error.code == grpc.StatusCode.UNAVAILABLE
    assert error.status_code == grpc.StatusCode.UNAVAILABLE
    assert error.metadata == {"dependency": "sessions", "retryable": "true"}
    assert error.message.startswith("sessions service unavailable: ")
