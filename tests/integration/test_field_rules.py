"""The protos' field rules over real gRPC: every service of the suite refuses a request that breaks one
before its servicer runs, with INVALID_ARGUMENT and a google.rpc.BadRequest naming the field as
protovalidate spells its path (services/kit/validation.py, installed by services/kit/server.py)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from cogmesh.common.v1 import turns_pb2
from cogmesh.context.v1 import context_pb2
from cogmesh.gateway.v1 import gateway_pb2, webhooks_pb2, webhooks_pb2_grpc
from cogmesh.memory.v1 import memory_pb2
from cogmesh.models.v1 import models_pb2
from cogmesh.policy.v1 import policy_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import agents_pb2, agents_pb2_grpc, schedules_pb2, schedules_pb2_grpc, sessions_pb2
from cogmesh.sessions.v1 import webhooks_pb2 as store_webhooks_pb2
from cogmesh.sessions.v1 import webhooks_pb2_grpc as store_webhooks_pb2_grpc
from tests.integration.conftest import DOMAIN, TIMEOUT_S, status_details

pytestmark = pytest.mark.asyncio(loop_scope="module")

# The other services of a process ("process:Service"), beside the one `stubs` has for each.
MORE_STUBS: dict[str, Any] = {
    "gateway:WebhookService": webhooks_pb2_grpc.WebhookServiceStub,
    "sessions:WebhookStoreService": store_webhooks_pb2_grpc.WebhookStoreServiceStub,
    "sessions:ScheduleStoreService": schedules_pb2_grpc.ScheduleStoreServiceStub,
    "sessions:AgentStoreService": agents_pb2_grpc.AgentStoreServiceStub,
}

# (service, RPC, request, the BadRequest's fields and descriptions, in order)
CASES = [
    (
        "gateway",
        "CreateSession",
        gateway_pb2.CreateSessionRequest(agent="a" * 257, labels={"Team": "x"}),
        [
            ("agent", "must be at most 256 characters"),
            ('labels["Team"]', "key does not match regex pattern `^[a-z0-9][a-z0-9_.\\-/]{0,62}$`"),
        ],
    ),
    (
        "gateway",
        "SendMessage",  # a server stream: refused before its first message
        gateway_pb2.SendMessageRequest(content="hi", limits=turns_pb2.TurnLimits(max_iterations=-1)),
        [("session_id", "is required"), ("limits.max_iterations", "must not be negative")],
    ),
    (
        "sessions",
        "ListMessages",
        sessions_pb2.ListMessagesRequest(tenant_id="t", session_id="s", page_size=1001),
        [("page_size", "must be between 0 and 1000")],
    ),
    (
        "runtime",
        "StartTurn",
        runtime_pb2.StartTurnRequest(turn=runtime_pb2.RunTurnRequest(tenant_id="t", session_id="s", turn_id="x")),
        [("turn.content", "is required"), ("turn.lease_token", "is required")],
    ),
    (
        "policy",
        "CheckToolCalls",
        policy_pb2.CheckToolCallsRequest(calls=[policy_pb2.CheckToolCallRequest(agent="default")]),
        [("calls[0].tool_name", "is required")],
    ),
    (
        "context",
        "GetToolResponse",
        context_pb2.GetToolResponseRequest(tenant_id="t", session_id="s", execution_id="e", offset=-1),
        [("offset", "must not be negative")],
    ),
    (
        "models",
        "RemoveModel",
        models_pb2.RemoveModelRequest(id="m" * 257),
        [("id", "must be at most 256 characters")],
    ),
    (
        "memory",
        "GetMemory",
        memory_pb2.GetMemoryRequest(tenant_id="t", namespace=["a/b"], key="k"),
        [("namespace[0]", "does not match regex pattern `^[^/{}\\x00-\\x1f\\x7f]*$`")],
    ),
    (
        "gateway:WebhookService",
        "CreateWebhook",
        webhooks_pb2.CreateWebhookRequest(url="https://hooks.example.com/x", event_kinds=[0], secret="short"),
        [
            (
                "event_kinds[0]",
                "must be one of WEBHOOK_EVENT_KIND_FINAL, WEBHOOK_EVENT_KIND_ERROR, WEBHOOK_EVENT_KIND_CANCELLED, "
                "WEBHOOK_EVENT_KIND_PAUSED, not WEBHOOK_EVENT_KIND_UNSPECIFIED",
            ),
            ("secret", "must be at least 16 characters"),
        ],
    ),
    (
        "sessions:WebhookStoreService",
        "ListWebhookDeliveries",
        store_webhooks_pb2.ListWebhookDeliveriesRequest(query=webhooks_pb2.ListWebhookDeliveriesRequest(page_size=501)),
        [("tenant_id", "is required"), ("query.page_size", "must be between 0 and 500")],
    ),
    (
        "sessions:WebhookStoreService",
        "CreateWebhook",  # the subscription's rules, checked by the servicer under the public request's names
        store_webhooks_pb2.CreateWebhookRequest(
            tenant_id="t",
            webhook=webhooks_pb2.CreateWebhookRequest(url="https://hooks.example.com/x", turn_id="t" * 257),
        ),
        [("turn_id", "must be at most 256 characters")],
    ),
    (
        "sessions:ScheduleStoreService",
        "PutScheduleRun",
        schedules_pb2.PutScheduleRunRequest(
            run=schedules_pb2.StoredScheduleRun(tenant_id="t", schedule_id="s" * 257, run_id="1")
        ),
        [("run.schedule_id", "must be at most 256 characters")],
    ),
    (
        "sessions:AgentStoreService",
        "SetAgentAlias",
        agents_pb2.SetAgentAliasRequest(tenant_id="t", name="tutor", alias="latest", version=0),
        [("alias", "must not be one of `latest`"), ("version", "must be greater than 0")],
    ),
]


async def call(stub: Any, method: str, request: Message) -> Any:
    rpc = getattr(stub, method)(request, timeout=TIMEOUT_S)
    if isinstance(rpc, grpc.aio.UnaryStreamCall):
        return await rpc.read()  # the status comes before any message
    return await rpc


@pytest.mark.parametrize(("service", "method", "request_", "expected"), CASES, ids=[f"{c[0]}.{c[1]}" for c in CASES])
async def test_a_request_breaking_a_rule_is_invalid_argument_naming_the_field(
    service: str,
    method: str,
    request_: Message,
    expected: list[tuple[str, str]],
    stubs: dict[str, Any],
    channels: dict[str, grpc.aio.Channel],
) -> None:
    stub = MORE_STUBS[service](channels[service.partition(":")[0]]) if ":" in service else stubs[service]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(stub, method, request_)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    info, violations = status_details(caught.value)
    assert info is not None and (info.reason, info.domain) == ("INVALID_ARGUMENT", DOMAIN)
    assert violations == expected
    assert caught.value.details() == "invalid argument: " + "; ".join(f"{f}: {d}" for f, d in expected)


async def test_a_request_keeping_the_rules_reaches_the_servicer(stubs: dict[str, Any]) -> None:
    """The same RPC with the field fixed gets the servicer's own answer (here: no such model to remove)."""
    reply = await call(stubs["models"], "RemoveModel", models_pb2.RemoveModelRequest(id="no-such-model"))
    assert reply.removed is False
