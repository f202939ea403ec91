"""The gateway's A2A binding, driven by the real a2a-sdk gRPC client against the running suite.

The main suite runs with API keys for two tenants; tests that need a turn to stay
running use a suite whose policy service never answers (the turn waits on its check).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from a2a.client import Client, ClientCallContext, ClientConfig, ClientFactory, minimal_agent_card
from a2a.client.errors import A2AClientError, A2AClientTimeoutError
from a2a.client.interceptors import AfterArgs, BeforeArgs, ClientCallInterceptor
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway import main as gateway_main
from gateway.auth import hash_key
from services.kit.server import RunningServer, start
from services.suite.inprocess import Suite, start_suite
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, suite_with_hanging
from tests.integration.test_health_reflection import resolve_with_reflection

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEYS = {"acme": "a2a-key-acme", "globex": "a2a-key-globex"}
A2A_DOMAIN = "a2a-protocol.org"
A2A_SERVICE = "lf.a2a.v1.A2AService"
S = a2a_pb2  # short for the many states below


class Bearer(ClientCallInterceptor):
    """Sends the cogmesh API key on every call, the card fetch included."""

    def __init__(self, key: str) -> None:
        self.key = key

    async def before(self, args: BeforeArgs) -> None:
        context = args.context or ClientCallContext()
        context.service_parameters = {**(context.service_parameters or {}), "authorization": f"Bearer {self.key}"}
        args.context = context

    async def after(self, args: AfterArgs) -> None:
        return None


async def connect(address: str, tenant: str | None = "acme", streaming: bool = True) -> Client:
    """An a2a-sdk client for the gateway at `address`, built from the card the gateway serves."""
    config = ClientConfig(
        streaming=streaming, supported_protocol_bindings=["GRPC"], grpc_channel_factory=grpc.aio.insecure_channel
    )
    interceptors: list[ClientCallInterceptor] = [Bearer(KEYS[tenant])] if tenant else []
    bootstrap = ClientFactory(config).create(minimal_agent_card(address, ["GRPC"]), interceptors=interceptors)
    try:
        card = await bootstrap.get_extended_agent_card(a2a_pb2.GetExtendedAgentCardRequest(), context=deadline())
    finally:
        await bootstrap.close()
    return ClientFactory(config).create(card, interceptors=list(interceptors))  # dials the card's own URL


def deadline(seconds: float = TIMEOUT_S) -> ClientCallContext:
    return ClientCallContext(timeout=seconds)


def user_message(text: str, context_id: str = "", task_id: str = "", **metadata: str) -> a2a_pb2.SendMessageRequest:
    message = a2a_pb2.Message(
        message_id=uuid.uuid4().hex,
        role=a2a_pb2.ROLE_USER,
        parts=[a2a_pb2.Part(text=text)],
        context_id=context_id,
        task_id=task_id,
    )
    request = a2a_pb2.SendMessageRequest(message=message)
    if metadata:
        request.metadata.update(metadata)
    return request


async def collect(stream: AsyncIterator[a2a_pb2.StreamResponse]) -> list[a2a_pb2.StreamResponse]:
    async def run() -> list[a2a_pb2.StreamResponse]:
        return [r async for r in stream]

    return await asyncio.wait_for(run(), TIMEOUT_S)


async def send(client: Client, request: a2a_pb2.SendMessageRequest) -> list[a2a_pb2.StreamResponse]:
    return await collect(client.send_message(request, context=deadline()))


def kinds(responses: list[a2a_pb2.StreamResponse]) -> list[str]:
    return [r.WhichOneof("payload") or "" for r in responses]


def last_state(responses: list[a2a_pb2.StreamResponse]) -> int:
    last = responses[-1]
    return last.status_update.status.state if last.HasField("status_update") else last.task.status.state


def answer(task: a2a_pb2.Task) -> str:
    (artifact,) = task.artifacts
    return "".join(p.text for p in artifact.parts)


def a2a_status(err: grpc.aio.AioRpcError) -> tuple[str, str, list[tuple[str, str]]]:
    """(ErrorInfo domain, reason, BadRequest violations) of a failed raw call."""
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None, f"no google.rpc.Status on {err.code().name}: {err.details()}"
    domain = reason = ""
    violations: list[tuple[str, str]] = []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            domain, reason = info.domain, info.reason
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend((v.field, v.description) for v in bad.field_violations)
    return domain, reason, violations


def a2a_servicer(server: RunningServer) -> Any:
    return next(m.servicer for m in server.app.mounts if m.service_name == A2A_SERVICE)


# --------------------------------------------------------------------------- the keyed suite


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("a2a") / "keys.yaml"
    lines = [f"  - {{sha256: {hash_key(k)}, tenant: {t}, principal: {t}-agent}}" for t, k in KEYS.items()]
    path.write_text("keys:\n" + "\n".join(lines) + "\n")
    return path


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def suite(keys_file: Path) -> AsyncIterator[Suite]:
    path = keys_file
    started = await start_suite(SUITE_SETTINGS.model_copy(update={"api_keys_file": path, "dev_mode": False}))
    # Bound to port 0, the gateway cannot know its own port: tell the card (COGMESH_A2A_URL in a deployment).
    a2a_servicer(started.servers["gateway"]).card_url = started.gateway_address
    KEYS_IN_USE[started.gateway_address] = True
    try:
        yield started
    finally:
        await started.stop(0)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def acme(suite: Suite) -> AsyncIterator[Client]:
    client = await connect(suite.gateway_address)
    yield client
    await client.close()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def raw(suite: Suite) -> AsyncIterator[a2a_pb2_grpc.A2AServiceStub]:
    """The generated stub, for the exact status of bad requests."""
    async with grpc.aio.insecure_channel(suite.gateway_address) as channel:
        yield a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]


def acme_md(**extra: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {KEYS['acme']}"), *extra.items())


async def send_blocking(address: str, request: a2a_pb2.SendMessageRequest) -> a2a_pb2.Task:
    """SendMessage (not streaming): the one response is the task as it ended (or paused)."""
    client = await connect(address, tenant="acme" if KEYS_IN_USE.get(address) else None, streaming=False)
    try:
        (only,) = await send(client, request)
    finally:
        await client.close()
    return only.task


KEYS_IN_USE: dict[str, bool] = {}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def done_task(suite: Suite) -> a2a_pb2.Task:
    return await send_blocking(suite.gateway_address, user_message("What is 17 * 23?"))


async def test_the_agent_card_lists_exposed_agents_and_the_grpc_interface(suite: Suite, acme: Client) -> None:
    card = await acme.get_extended_agent_card(a2a_pb2.GetExtendedAgentCardRequest(), context=deadline())
    (interface,) = card.supported_interfaces
    assert (interface.url, interface.protocol_binding, interface.protocol_version) == (
        suite.gateway_address,
        "GRPC",
        "1.0",
    )
    assert card.capabilities.streaming and card.capabilities.push_notifications
    assert sorted(s.id for s in card.skills) == ["careful", "default"]  # planner is not exposed
    default = next(s for s in card.skills if s.id == "default")
    assert "calculator" in default.tags and default.description
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert "bearer" in card.security_requirements[0].schemes


async def test_health_and_reflection_know_the_a2a_service(suite: Suite) -> None:
    """grpcurl can list and describe it without a key, and probes can check it."""
    async with grpc.aio.insecure_channel(suite.gateway_address) as channel:
        health = await health_pb2_grpc.HealthStub(channel).Check(  # type: ignore[attr-defined]
            health_pb2.HealthCheckRequest(service=A2A_SERVICE), timeout=TIMEOUT_S
        )
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    services, methods = await asyncio.to_thread(resolve_with_reflection, suite.gateway_address, A2A_SERVICE)
    assert A2A_SERVICE in services and "cogmesh.gateway.v1.GatewayService" in services
    assert {"SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "SubscribeToTask"} <= {
        name for name, _, _ in methods
    }


async def test_calls_without_a_valid_key_are_unauthenticated(suite: Suite) -> None:
    with pytest.raises(A2AClientError, match="UNAUTHENTICATED"):
        await connect(suite.gateway_address, tenant=None)
    async with grpc.aio.insecure_channel(suite.gateway_address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetTask(a2a_pb2.GetTaskRequest(id="x"), metadata=(("authorization", "Bearer nope"),), timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_blocking_send_returns_the_completed_task(suite: Suite, done_task: a2a_pb2.Task) -> None:
    assert done_task.status.state == S.TASK_STATE_COMPLETED
    assert answer(done_task) == "17 * 23 = 391."
    usage = json_format.MessageToDict(done_task.metadata)
    assert usage["model"] and usage["output_tokens"] > 0
    # The context is a cogmesh session of the default agent, visible through the gateway too.
    async with grpc.aio.insecure_channel(suite.gateway_address) as channel:
        gw = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        reply = await gw.GetSession(
            gateway_pb2.GetSessionRequest(session_id=done_task.context_id), metadata=acme_md(), timeout=5
        )
    assert reply.session.agent == "default" and reply.session.message_count == 4


async def test_streaming_send_streams_deltas_then_the_answer(acme: Client) -> None:
    responses = await send(acme, user_message("hello from an A2A client"))
    assert kinds(responses)[0] == "task" and responses[0].task.status.state == S.TASK_STATE_SUBMITTED
    task_id = responses[0].task.id
    assert all(getattr(r, k).task_id == task_id for r, k in zip(responses[1:], kinds(responses)[1:], strict=True))
    states = [r.status_update.status.state for r in responses if r.HasField("status_update")]
    assert states == [S.TASK_STATE_WORKING, S.TASK_STATE_COMPLETED]
    chunks = [r.artifact_update for r in responses if r.HasField("artifact_update")]
    assert len(chunks) >= 3, "the echo is streamed in several deltas"
    assert [c.append for c in chunks[:-1]] == [False] + [True] * (len(chunks) - 2)
    streamed = "".join(c.artifact.parts[0].text for c in chunks[:-1])
    final = chunks[-1]
    assert final.last_chunk and not final.append and final.artifact.parts[0].text == streamed
    assert "hello from an A2A client" in streamed
    assert {c.artifact.artifact_id for c in chunks} == {"answer"}


async def test_get_task_from_another_client(suite: Suite, done_task: a2a_pb2.Task) -> None:
    other = await connect(suite.gateway_address)
    try:
        task = await other.get_task(a2a_pb2.GetTaskRequest(id=done_task.id), context=deadline())
    finally:
        await other.close()
    assert task.id == done_task.id and task.context_id == done_task.context_id
    assert task.status.state == S.TASK_STATE_COMPLETED and answer(task) == "17 * 23 = 391."


async def test_a_follow_up_in_the_same_context_is_a_new_task(acme: Client, done_task: a2a_pb2.Task) -> None:
    responses = await send(acme, user_message("What is 2 ** 10?", context_id=done_task.context_id))
    task = responses[0].task
    assert task.context_id == done_task.context_id and task.id != done_task.id
    assert last_state(responses) == S.TASK_STATE_COMPLETED
    final = await acme.get_task(a2a_pb2.GetTaskRequest(id=task.id), context=deadline())
    assert answer(final) == "2 ** 10 = 1024."


async def test_a_pause_is_input_required_and_a_reply_resumes_the_task(suite: Suite, acme: Client) -> None:
    responses = await send(acme, user_message("What is 6 * 7?", agent="careful"))
    assert last_state(responses) == S.TASK_STATE_INPUT_REQUIRED
    task_id = responses[0].task.id
    question = responses[-1].status_update.status.message.parts[0].text
    assert "calculator" in question and "approve" in question

    # A watcher sees the interrupted task and its stream ends there.
    watched = await collect(acme.subscribe(a2a_pb2.SubscribeToTaskRequest(id=task_id), context=deadline()))
    assert kinds(watched) == ["task"] and watched[0].task.status.state == S.TASK_STATE_INPUT_REQUIRED

    with pytest.raises(InvalidParamsError) as bad:
        await send(acme, user_message("maybe", task_id=task_id))
    assert bad.value.data is not None
    (violation,) = bad.value.data["errors"]
    assert violation["field"] == "message.parts" and "'approve' or 'reject'" in violation["message"]

    resumed = await send(acme, user_message("approve", task_id=task_id))
    assert resumed[0].task.id == task_id  # same task, carried on
    assert resumed[0].task.status.state == S.TASK_STATE_WORKING  # as it stands, running again
    assert last_state(resumed) == S.TASK_STATE_COMPLETED
    task = await acme.get_task(a2a_pb2.GetTaskRequest(id=task_id), context=deadline())
    assert task.status.state == S.TASK_STATE_COMPLETED and answer(task) == "6 * 7 = 42."

    with pytest.raises(UnsupportedOperationError):
        await send(acme, user_message("approve", task_id=task_id))


async def test_a_non_exposed_agent_is_refused(suite: Suite, acme: Client) -> None:
    with pytest.raises(A2AClientError, match=r"NOT_FOUND.*no A2A-exposed agent 'planner'"):
        await send(acme, user_message("hello", agent="planner"))
    async with grpc.aio.insecure_channel(suite.gateway_address) as channel:
        gw = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        session = (
            await gw.CreateSession(gateway_pb2.CreateSessionRequest(agent="planner"), metadata=acme_md(), timeout=5)
        ).session
    with pytest.raises(A2AClientError, match="NOT_FOUND"):
        await send(acme, user_message("hello", context_id=session.session_id))


async def test_a_non_exposed_sessions_context_looks_like_a_missing_one(
    suite: Suite, acme: Client, raw: a2a_pb2_grpc.A2AServiceStub
) -> None:
    async with grpc.aio.insecure_channel(suite.gateway_address) as channel:
        gw = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        request = gateway_pb2.CreateSessionRequest(agent="planner")
        hidden = (await gw.CreateSession(request, metadata=acme_md(), timeout=5)).session.session_id
    missing = uuid.uuid4().hex

    async def refusal(context_id: str) -> tuple[grpc.StatusCode, str, Any]:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw.SendMessage(user_message("hi", context_id=context_id), metadata=acme_md(), timeout=5)
        status = rpc_status.from_call(caught.value)  # type: ignore[arg-type]
        details = [d.SerializeToString().replace(context_id.encode(), b"ID") for d in status.details] if status else []
        return caught.value.code(), (caught.value.details() or "").replace(context_id, "ID"), details

    assert await refusal(hidden) == await refusal(missing)


async def test_another_tenants_task_is_not_found(suite: Suite, done_task: a2a_pb2.Task) -> None:
    globex = await connect(suite.gateway_address, tenant="globex")
    try:
        with pytest.raises(TaskNotFoundError):
            await globex.get_task(a2a_pb2.GetTaskRequest(id=done_task.id), context=deadline())
        with pytest.raises(TaskNotFoundError):
            await globex.cancel_task(a2a_pb2.CancelTaskRequest(id=done_task.id), context=deadline())
        with pytest.raises(TaskNotFoundError):
            await collect(globex.subscribe(a2a_pb2.SubscribeToTaskRequest(id=done_task.id), context=deadline()))
        with pytest.raises(TaskNotFoundError):
            await send(globex, user_message("approve", task_id=done_task.id))
        with pytest.raises(A2AClientError, match="NOT_FOUND"):
            await send(globex, user_message("hi", context_id=done_task.context_id))
    finally:
        await globex.close()


async def test_finished_tasks_cannot_be_cancelled_or_followed(acme: Client, done_task: a2a_pb2.Task) -> None:
    with pytest.raises(TaskNotCancelableError, match="TASK_STATE_COMPLETED"):
        await acme.cancel_task(a2a_pb2.CancelTaskRequest(id=done_task.id), context=deadline())
    with pytest.raises(UnsupportedOperationError):
        await collect(acme.subscribe(a2a_pb2.SubscribeToTaskRequest(id=done_task.id), context=deadline()))


def _file_message() -> a2a_pb2.SendMessageRequest:
    request = user_message("see attached")
    request.message.parts.append(a2a_pb2.Part(url="https://example.com/a.pdf", media_type="application/pdf"))
    return request


def _push_message() -> a2a_pb2.SendMessageRequest:
    request = user_message("hi")
    request.configuration.task_push_notification_config.token = "no url"  # a push config needs its url
    return request


def _modes_message() -> a2a_pb2.SendMessageRequest:
    request = user_message("hi")
    request.configuration.accepted_output_modes.append("image/png")
    return request


BAD_SENDS: list[tuple[str, a2a_pb2.SendMessageRequest, grpc.StatusCode, str, list[str]]] = [
    ("no message", a2a_pb2.SendMessageRequest(), grpc.StatusCode.INVALID_ARGUMENT, "INVALID_PARAMS", ["message"]),
    (
        "empty message",
        a2a_pb2.SendMessageRequest(message=a2a_pb2.Message()),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_PARAMS",
        ["message.role", "message.message_id", "message.parts"],
    ),
    (
        "blank text",
        user_message("   "),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_PARAMS",
        ["message.parts"],
    ),
    (
        "agent not a string",
        user_message("hi", agent=""),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_PARAMS",
        ["metadata.agent"],
    ),
    (
        "foreign tenant",
        a2a_pb2.SendMessageRequest(tenant="globex", message=user_message("hi").message),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_PARAMS",
        ["tenant"],
    ),
    ("file part", _file_message(), grpc.StatusCode.INVALID_ARGUMENT, "CONTENT_TYPE_NOT_SUPPORTED", []),
    ("output modes", _modes_message(), grpc.StatusCode.INVALID_ARGUMENT, "CONTENT_TYPE_NOT_SUPPORTED", []),
    (
        "push config without url",
        _push_message(),
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_PARAMS",
        ["configuration.task_push_notification_config.url"],
    ),
    (
        "unknown task",
        user_message("hi", task_id="not-a-task"),
        grpc.StatusCode.NOT_FOUND,
        "TASK_NOT_FOUND",
        [],
    ),
]


@pytest.mark.parametrize(("why", "request_", "code", "reason", "fields"), BAD_SENDS, ids=[b[0] for b in BAD_SENDS])
async def test_bad_sends_get_the_a2a_status(
    raw: a2a_pb2_grpc.A2AServiceStub,
    why: str,
    request_: a2a_pb2.SendMessageRequest,
    code: grpc.StatusCode,
    reason: str,
    fields: list[str],
) -> None:
    for method in (raw.SendMessage, raw.SendStreamingMessage):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            call = method(request_, metadata=acme_md(), timeout=5)
            await (call if method is raw.SendMessage else collect(call))
        assert caught.value.code() == code, caught.value.details()
        domain, got_reason, violations = a2a_status(caught.value)
        assert (domain, got_reason) == (A2A_DOMAIN, reason)
        assert [f for f, _ in violations] == fields
        assert all(text for _, text in violations)


async def test_other_bad_requests_get_the_a2a_status(raw: a2a_pb2_grpc.A2AServiceStub) -> None:
    async def status_of(call: Any) -> tuple[grpc.StatusCode, str, list[str]]:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        _, reason, violations = a2a_status(caught.value)
        return caught.value.code(), reason, [f for f, _ in violations]

    md = acme_md()
    assert await status_of(raw.GetTask(a2a_pb2.GetTaskRequest(), metadata=md, timeout=5)) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_PARAMS",
        ["id"],
    )
    assert await status_of(raw.GetTask(a2a_pb2.GetTaskRequest(id="a:b:c"), metadata=md, timeout=5)) == (
        grpc.StatusCode.NOT_FOUND,
        "TASK_NOT_FOUND",
        [],
    )
    unknown_session = f"{uuid.uuid4().hex}:{uuid.uuid4().hex}:0"
    assert await status_of(raw.CancelTask(a2a_pb2.CancelTaskRequest(id=unknown_session), metadata=md, timeout=5)) == (
        grpc.StatusCode.NOT_FOUND,
        "TASK_NOT_FOUND",
        [],
    )
    assert await status_of(raw.ListTasks(a2a_pb2.ListTasksRequest(), metadata=md, timeout=5)) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "UNSUPPORTED_OPERATION",
        [],
    )
    push = a2a_pb2.TaskPushNotificationConfig(task_id="t", url="https://example.com")
    assert await status_of(raw.CreateTaskPushNotificationConfig(push, metadata=md, timeout=5)) == (
        grpc.StatusCode.NOT_FOUND,
        "TASK_NOT_FOUND",
        [],
    )
    old = acme_md(**{"a2a-version": "0.3"})
    assert await status_of(
        raw.GetExtendedAgentCard(a2a_pb2.GetExtendedAgentCardRequest(), metadata=old, timeout=5)
    ) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "VERSION_NOT_SUPPORTED",
        [],
    )


# --------------------------------------------------------------------------- turns that hang


async def test_cancel_a_running_task_seen_by_a_second_subscriber() -> None:
    async with suite_with_hanging("policy") as (servers, reached):
        address = servers["gateway"].address
        a2a_servicer(servers["gateway"]).card_url = address
        first, second = await connect(address, tenant=None), await connect(address, tenant=None)
        try:
            stream = first.send_message(user_message("What is 1 + 1?"), context=deadline())
            opening = await asyncio.wait_for(anext(stream), TIMEOUT_S)
            task_id = opening.task.id
            await asyncio.wait_for(reached.wait(), TIMEOUT_S)  # the turn now waits on its policy check

            watcher = second.subscribe(a2a_pb2.SubscribeToTaskRequest(id=task_id), context=deadline())
            snapshot = await asyncio.wait_for(anext(watcher), TIMEOUT_S)
            assert snapshot.task.id == task_id
            assert snapshot.task.status.state in (S.TASK_STATE_SUBMITTED, S.TASK_STATE_WORKING)

            cancelled = await second.cancel_task(a2a_pb2.CancelTaskRequest(id=task_id), context=deadline())
            assert cancelled.status.state == S.TASK_STATE_CANCELED  # not FAILED: the policy deadline did not end it

            for rest in (await collect(stream), await collect(watcher)):
                assert last_state(rest) == S.TASK_STATE_CANCELED
        finally:
            await first.close()
            await second.close()


async def test_the_callers_deadline_bounds_the_task() -> None:
    async with suite_with_hanging("policy") as (servers, _):
        address = servers["gateway"].address
        a2a_servicer(servers["gateway"]).card_url = address
        client = await connect(address, tenant=None, streaming=False)
        try:
            with pytest.raises(A2AClientTimeoutError):
                await collect(client.send_message(user_message("What is 1 + 1?"), context=deadline(0.5)))
            async with grpc.aio.insecure_channel(address) as channel:
                gw = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
                (session,) = (await gw.ListSessions(gateway_pb2.ListSessionsRequest(), timeout=5)).sessions
                watch = gw.Subscribe(gateway_pb2.SubscribeRequest(session_id=session.session_id, stop_when_idle=True))
                events = [e async for r in watch for e in r.events]
            # The runtime stopped at the caller's deadline, not at the policy service's 2 s one.
            assert events[-1].error.kind == events_pb2.ERROR_KIND_DEADLINE_EXCEEDED
        finally:
            await client.close()


async def test_tasks_are_readable_on_another_gateway_replica(redis_url: str, redis_prefix: str) -> None:
    settings = SUITE_SETTINGS.model_copy(update={"redis_url": redis_url, "redis_key_prefix": redis_prefix})
    suite = await start_suite(settings)
    replica_settings = settings.model_copy(
        update={f"{name}_addr": server.address for name, server in suite.servers.items()}
    )
    replica = await start(gateway_main.build, replica_settings, "127.0.0.1:0")
    try:
        for server in (suite.servers["gateway"], replica):
            a2a_servicer(server).card_url = server.address
        here, there = await connect(suite.gateway_address, tenant=None), await connect(replica.address, tenant=None)
        try:
            sent = await send_blocking(suite.gateway_address, user_message("What is 3 * 3?"))
            task = await there.get_task(a2a_pb2.GetTaskRequest(id=sent.id), context=deadline())
            assert task.status.state == S.TASK_STATE_COMPLETED and answer(task) == "3 * 3 = 9."
            # A follow-up started on the replica, in the same context, is watched from the first gateway.
            stream = there.send_message(user_message("echo me", context_id=task.context_id), context=deadline())
            opening = await asyncio.wait_for(anext(stream), TIMEOUT_S)
            await collect(stream)
            again = await here.get_task(a2a_pb2.GetTaskRequest(id=opening.task.id), context=deadline())
            assert again.status.state == S.TASK_STATE_COMPLETED and "echo me" in answer(again)
        finally:
            await here.close()
            await there.close()
    finally:
        await replica.stop(0)
        await suite.stop(0)
