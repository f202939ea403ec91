"""Bad input against every RPC of every service: the right status, the field named, never UNKNOWN/INTERNAL.

One row per (service, method, request, expected outcome). Adding an RPC means adding
rows: `test_every_rpc_has_a_row` fails until each method of each service has one.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import descriptor as pb_descriptor
from google.protobuf import field_mask_pb2, json_format, struct_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from cogmesh.common.v1 import errors_pb2, messages_pb2, resources_pb2
from cogmesh.common.v1 import events_pb2 as E
from cogmesh.common.v1 import turns_pb2 as T
from cogmesh.context.v1 import context_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.models.v1 import models_pb2
from cogmesh.policy.v1 import policy_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.suite.inprocess import Suite
from tests.integration.conftest import DOMAIN, SUITE_SETTINGS, TIMEOUT_S, new_session, send, status_details
from tests.support.waiting import until

pytestmark = pytest.mark.asyncio(loop_scope="module")

SERVICES: dict[str, pb_descriptor.ServiceDescriptor] = {
    "gateway": gateway_pb2.DESCRIPTOR.services_by_name["GatewayService"],
    "models": models_pb2.DESCRIPTOR.services_by_name["ModelsService"],
    "policy": policy_pb2.DESCRIPTOR.services_by_name["PolicyService"],
    "context": context_pb2.DESCRIPTOR.services_by_name["ContextService"],
    "sessions": sessions_pb2.DESCRIPTOR.services_by_name["SessionsService"],
    "runtime": runtime_pb2.DESCRIPTOR.services_by_name["RuntimeService"],
}

TENANT = SUITE_SETTINGS.tenant_id
HELD_TURN = "t-held"
UNKNOWN_ID = "f" * 32
LONG_ID = "s" * 257  # ids and names are capped at 256 characters
BIG_CONTENT = "x" * 100_001  # message content is capped at 100000 characters
MIB_PLUS = "y" * ((1 << 20) + 1)  # free texts of the context are capped at 1 MiB
STORED_PLUS = "y" * ((16 << 20) + 1)  # a stored message at 16 MiB (a long reply)
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
OK = grpc.StatusCode.OK


def token(raw: str) -> str:
    """A page token in the API's encoding (urlsafe base64) but with forged contents."""
    return base64.urlsafe_b64encode(raw.encode()).decode()


@dataclass(frozen=True)
class Env:
    """Real resources rows may point at."""

    session_id: str  # a gateway session with one finished turn, idle
    last_seq: int  # seq of that session's last event
    held_session_id: str  # a gateway session whose lease HELD_TURN holds (no turn runs)
    held_lease: int


Request = Message | Callable[[Env], Message]


@dataclass(frozen=True)
class Case:
    service: str
    method: str
    request: Request
    code: grpc.StatusCode
    fields: tuple[str, ...] = ()  # INVALID_ARGUMENT: exactly the fields the BadRequest must name
    reason: str = ""  # other errors: the ErrorInfo reason
    check: Callable[[Any], bool] | None = None  # OK rows: a predicate on the response

    def build(self, env: Env) -> Message:
        return self.request(env) if callable(self.request) else self.request


def _invalid_fields(status_bytes: bytes) -> list[str]:
    """The fields an INVALID_ARGUMENT google.rpc.Status names (empty for another status)."""
    status = status_pb2.Status.FromString(status_bytes)
    fields: list[str] = []
    for detail in status.details:
        if status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and detail.Is(
            error_details_pb2.BadRequest.DESCRIPTOR
        ):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            fields += [v.field for v in bad_request.field_violations]
    return sorted(fields)


def bad(service: str, method: str, request: Request, *fields: str) -> Case:
    return Case(service, method, request, INVALID, fields=fields)


def missing(service: str, method: str, request: Request, reason: str) -> Case:
    return Case(service, method, request, NOT_FOUND, reason=reason)


def ok(service: str, method: str, request: Request, check: Callable[[Any], bool]) -> Case:
    return Case(service, method, request, OK, check=check)


G, M, P, C, S, R = (
    gateway_pb2,
    models_pb2,
    policy_pb2,
    context_pb2,
    sessions_pb2,
    runtime_pb2,
)
BUDGET_FIELDS = [f.name for f in context_pb2.ContextBudget.DESCRIPTOR.fields]


def run_turn(env: Env, **overrides: Any) -> runtime_pb2.RunTurnRequest:
    fields = {
        "tenant_id": TENANT,
        "session_id": env.session_id,
        "turn_id": "t-bad-input",
        "content": "hi",
        "lease_token": 1,
    }
    fields.update(overrides)
    return runtime_pb2.RunTurnRequest(**fields)


CASES: list[Any] = [
    # ------------------------------------------------------------------ GatewayService
    missing("gateway", "CreateSession", G.CreateSessionRequest(agent="no-such-agent"), "AGENT_NOT_FOUND"),
    bad("gateway", "CreateSession", G.CreateSessionRequest(agent=LONG_ID), "agent"),
    bad("gateway", "CreateSession", G.CreateSessionRequest(user_id=LONG_ID, topic_id=LONG_ID), "user_id", "topic_id"),
    bad("gateway", "GetSession", G.GetSessionRequest(), "session_id"),
    # A blank id is an id no session has (the rules bound an id's length, not what it holds).
    missing("gateway", "GetSession", G.GetSessionRequest(session_id=" \t "), "SESSION_NOT_FOUND"),
    bad("gateway", "GetSession", G.GetSessionRequest(session_id=LONG_ID), "session_id"),
    missing("gateway", "GetSession", G.GetSessionRequest(session_id=UNKNOWN_ID), "SESSION_NOT_FOUND"),
    bad("gateway", "ListSessions", G.ListSessionsRequest(page_size=-1), "page_size"),
    bad("gateway", "ListSessions", G.ListSessionsRequest(page_size=1001), "page_size"),
    bad("gateway", "ListSessions", G.ListSessionsRequest(page_token="not-a-token"), "page_token"),
    bad("gateway", "ListSessions", G.ListSessionsRequest(page_token=token("x:1")), "page_token"),
    bad("gateway", "ListSessions", G.ListSessionsRequest(page_token=token("o:-5")), "page_token"),
    # time travel (issue 29): ListTurns, ListMessages, ForkSession, RewindSession, ListSessions' forked_from
    bad("gateway", "ListTurns", G.ListTurnsRequest(), "session_id"),
    bad("gateway", "ListTurns", G.ListTurnsRequest(session_id=LONG_ID, page_size=201), "session_id", "page_size"),
    missing("gateway", "ListTurns", G.ListTurnsRequest(session_id=UNKNOWN_ID), "SESSION_NOT_FOUND"),
    bad(
        "gateway",
        "ListMessages",
        G.ListMessagesRequest(page_size=-1, through_turn_id=LONG_ID),
        "session_id",
        "page_size",
        "through_turn_id",
    ),
    missing("gateway", "ListMessages", G.ListMessagesRequest(session_id=UNKNOWN_ID), "SESSION_NOT_FOUND"),
    missing(
        "gateway",
        "ListMessages",
        lambda env: G.ListMessagesRequest(session_id=env.session_id, through_turn_id=UNKNOWN_ID),
        "TURN_NOT_FOUND",
    ),
    bad(
        "gateway",
        "ForkSession",
        G.ForkSessionRequest(before_turn=True, agent=LONG_ID, labels={"Team": "a"}),
        "session_id",
        "agent",
        'labels["Team"]',
    ),
    # Rules across fields are checked once every field keeps its own (before_turn names no turn).
    bad("gateway", "ForkSession", G.ForkSessionRequest(session_id=UNKNOWN_ID, before_turn=True), "turn_id"),
    missing("gateway", "ForkSession", G.ForkSessionRequest(session_id=UNKNOWN_ID), "SESSION_NOT_FOUND"),
    missing(
        "gateway",
        "ForkSession",
        lambda env: G.ForkSessionRequest(session_id=env.session_id, agent="no-such-agent"),
        "AGENT_NOT_FOUND",
    ),
    bad("gateway", "RewindSession", G.RewindSessionRequest(), "session_id", "turn_id"),
    missing(
        "gateway",
        "RewindSession",
        G.RewindSessionRequest(session_id=UNKNOWN_ID, turn_id=UNKNOWN_ID),
        "SESSION_NOT_FOUND",
    ),
    missing(
        "gateway",
        "RewindSession",
        lambda env: G.RewindSessionRequest(session_id=env.session_id, turn_id=UNKNOWN_ID),
        "TURN_NOT_FOUND",
    ),
    bad("gateway", "ListSessions", G.ListSessionsRequest(forked_from=LONG_ID), "forked_from"),
    # session search (issue 29): labels, filters and UpdateSession
    bad(
        "gateway",
        "CreateSession",
        G.CreateSessionRequest(labels={"Team": "a", "k": "v" * 257}),
        'labels["Team"]',
        'labels["k"]',
    ),
    bad(
        "gateway",
        "CreateSession",
        G.CreateSessionRequest(scope={"End-User": "a", "team": "x/y", "empty": ""}),
        'scope["End-User"]',
        'scope["team"]',
        'scope["empty"]',
    ),
    bad("gateway", "CreateSession", G.CreateSessionRequest(labels={f"k{i}": "" for i in range(65)}), "labels"),
    bad(
        "gateway",
        "ListSessions",
        G.ListSessionsRequest(label_filter={"": "x", "ok": "a\nb"}),
        'label_filter[""]',
        'label_filter["ok"]',
    ),
    bad(
        "gateway",
        "ListSessions",
        G.ListSessionsRequest(page_size=1001, page_token="t" * 1025, agent_version=-1),
        "page_size",
        "page_token",
        "agent_version",
    ),
    bad("gateway", "ListSessions", G.ListSessionsRequest(statuses=[0, 99]), "statuses[0]", "statuses[1]"),
    bad("gateway", "ListSessions", G.ListSessionsRequest(agent=LONG_ID), "agent"),
    bad(
        "gateway",
        "ListSessions",
        G.ListSessionsRequest(
            created_after={"seconds": 20},
            created_before={"seconds": 10},
            active_after={"seconds": 5},
            active_before={"seconds": 5},
        ),
        "created_before",
        "active_before",
    ),
    bad(
        "gateway",
        "ListSessions",
        G.ListSessionsRequest(
            created_after={"seconds": 2**63 - 1}, active_before={"seconds": 10, "nanos": -1}
        ),  # found by the fuzz suite: a time past what Timestamp holds was an INTERNAL error
        "created_after",
        "active_before",
    ),
    bad("gateway", "UpdateSession", G.UpdateSessionRequest(), "session_id"),
    bad("gateway", "UpdateSession", G.UpdateSessionRequest(session_id=UNKNOWN_ID), "update_mask"),
    bad(
        "gateway",
        "UpdateSession",
        lambda env: G.UpdateSessionRequest(
            session_id=env.session_id, update_mask=field_mask_pb2.FieldMask(paths=["scope"])
        ),
        "update_mask",
    ),
    bad(  # a move names the agent to move to
        "gateway",
        "UpdateSession",
        lambda env: G.UpdateSessionRequest(
            session_id=env.session_id, update_mask=field_mask_pb2.FieldMask(paths=["agent"])
        ),
        "agent",
    ),
    bad(
        "gateway",
        "UpdateSession",
        lambda env: G.UpdateSessionRequest(
            session_id=env.session_id, update_mask=field_mask_pb2.FieldMask(paths=["labels", "labels.a", "labels.B"])
        ),
        "update_mask",
        "update_mask",
    ),
    bad(
        "gateway",
        "UpdateSession",
        lambda env: G.UpdateSessionRequest(
            session_id=env.session_id, labels={"b": "1"}, update_mask=field_mask_pb2.FieldMask(paths=["labels.a"])
        ),
        'labels["b"]',
    ),
    missing(
        "gateway",
        "UpdateSession",
        G.UpdateSessionRequest(session_id=UNKNOWN_ID, update_mask=field_mask_pb2.FieldMask(paths=["labels"])),
        "SESSION_NOT_FOUND",
    ),
    ok(
        "gateway",
        "UpdateSession",
        lambda env: G.UpdateSessionRequest(
            session_id=env.session_id, labels={"row": "ok"}, update_mask=field_mask_pb2.FieldMask(paths=["labels.row"])
        ),
        lambda r: r.session.labels["row"] == "ok",
    ),
    bad(
        "sessions",
        "CreateSession",
        S.CreateSessionRequest(tenant_id=TENANT, agent="a", labels={"a b": ""}),
        'labels["a b"]',
    ),
    bad("sessions", "ListSessions", S.ListSessionsRequest(tenant_id=TENANT, statuses=[7]), "statuses[0]"),
    bad("gateway", "DeleteSession", G.DeleteSessionRequest(), "session_id"),
    bad("gateway", "DeleteSession", G.DeleteSessionRequest(session_id=LONG_ID), "session_id"),
    ok("gateway", "DeleteSession", G.DeleteSessionRequest(session_id=UNKNOWN_ID), lambda r: r.deleted is False),
    bad("gateway", "SendMessage", G.SendMessageRequest(), "session_id", "content"),
    bad("gateway", "SendMessage", lambda env: G.SendMessageRequest(session_id=env.session_id), "content"),
    bad(
        "gateway", "SendMessage", lambda env: G.SendMessageRequest(session_id=env.session_id, content=" \n "), "content"
    ),
    bad(
        "gateway",
        "SendMessage",
        lambda env: G.SendMessageRequest(session_id=env.session_id, content=BIG_CONTENT),
        "content",
    ),
    bad(
        "gateway",
        "SendMessage",
        lambda env: G.SendMessageRequest(session_id=env.session_id, content="hi", model=LONG_ID),
        "model",
    ),
    bad(
        "gateway", "SendMessage", G.SendMessageRequest(session_id=LONG_ID, content=BIG_CONTENT), "session_id", "content"
    ),
    bad(
        "gateway",
        "SendMessage",
        lambda env: G.SendMessageRequest(session_id=env.session_id, content="hi", multitask_strategy=99),  # type: ignore[arg-type]
        "multitask_strategy",
    ),
    missing("gateway", "SendMessage", G.SendMessageRequest(session_id=UNKNOWN_ID, content="hi"), "SESSION_NOT_FOUND"),
    bad("gateway", "Subscribe", G.SubscribeRequest(), "session_id"),
    bad("gateway", "Subscribe", G.SubscribeRequest(session_id=LONG_ID), "session_id"),
    missing("gateway", "Subscribe", G.SubscribeRequest(session_id=UNKNOWN_ID), "SESSION_NOT_FOUND"),
    bad(
        "gateway",
        "Subscribe",
        lambda env: G.SubscribeRequest(session_id=env.session_id, after_seq=env.last_seq + 1),
        "after_seq",
    ),
    bad(
        "gateway",
        "Subscribe",
        lambda env: G.SubscribeRequest(session_id=env.session_id, after_seq=2**64 - 1),
        "after_seq",
    ),
    bad("gateway", "CancelTurn", G.CancelTurnRequest(), "session_id"),
    bad(
        "gateway", "CancelTurn", lambda env: G.CancelTurnRequest(session_id=env.session_id, turn_id=LONG_ID), "turn_id"
    ),
    missing("gateway", "CancelTurn", G.CancelTurnRequest(session_id=UNKNOWN_ID), "SESSION_NOT_FOUND"),
    ok("gateway", "ListAgents", G.ListAgentsRequest(), lambda r: "default" in {a.name for a in r.agents}),
    ok("gateway", "ListModels", G.ListModelsRequest(provider="nobody"), lambda r: len(r.models) == 0),
    ok("gateway", "GetCapabilities", G.GetCapabilitiesRequest(), lambda r: r.protocols[0] == "grpc"),
    # ------------------------------------------------------------------ ModelsService
    missing("models", "ResolveModel", M.ResolveModelRequest(name="no-such-model", strict=True), "MODEL_NOT_FOUND"),
    bad("models", "ResolveModel", M.ResolveModelRequest(strict=True), "name"),
    bad("models", "ResolveModel", M.ResolveModelRequest(name="   ", strict=True), "name"),
    bad("models", "ResolveModel", M.ResolveModelRequest(name=LONG_ID), "name"),
    ok(
        "models",
        "ResolveModel",
        M.ResolveModelRequest(name="no-such-model"),
        lambda r: (r.model.id, r.matched_by) == ("cogmesh-local", models_pb2.MATCH_KIND_DEFAULT),
    ),
    ok("models", "ListModels", M.ListModelsRequest(provider="nobody"), lambda r: len(r.models) == 0),
    ok("models", "ListProviders", M.ListProvidersRequest(), lambda r: {"local", "openai"} <= set(r.providers)),
    # A version the service never had is no error: the watch starts with the current snapshot.
    ok(
        "models",
        "WatchCatalog",
        M.WatchCatalogRequest(known_version="no-such-version"),
        lambda r: bool(r.snapshot.version) and any(m.id == "cogmesh-local" for m in r.snapshot.models),
    ),
    # ------------------------------------------------------------------ PolicyService
    bad("policy", "CheckToolCall", P.CheckToolCallRequest(), "agent", "tool_name"),
    bad("policy", "CheckToolCall", P.CheckToolCallRequest(agent="default", tool_name=LONG_ID), "tool_name"),
    missing(
        "policy",
        "CheckToolCall",
        P.CheckToolCallRequest(agent="no-such-agent", tool_name="calculator"),
        "AGENT_NOT_FOUND",
    ),
    ok(
        "policy",
        "CheckToolCall",
        P.CheckToolCallRequest(agent="default", tool_name="bash"),
        lambda r: (r.verdict, r.rule) == (policy_pb2.VERDICT_DENY, "always_denied"),
    ),
    # ------------------------------------------------------------------ ContextService
    bad("context", "BuildContext", C.BuildContextRequest(), "agent"),
    missing("context", "BuildContext", C.BuildContextRequest(agent="no-such-agent"), "AGENT_NOT_FOUND"),
    *[
        bad("context", "BuildContext", C.BuildContextRequest(agent="default", budget={name: -1}), f"budget.{name}")
        for name in BUDGET_FIELDS
    ],
    bad(
        "context",
        "BuildContext",
        C.BuildContextRequest(agent="default", budget={name: -5 for name in BUDGET_FIELDS}),
        *[f"budget.{name}" for name in BUDGET_FIELDS],
    ),
    bad("context", "BuildContext", C.BuildContextRequest(agent="default", role_id="../../etc/passwd"), "role_id"),
    bad("context", "BuildContext", C.BuildContextRequest(agent="default", role_id="roles/assistant"), "role_id"),
    bad("context", "BuildContext", C.BuildContextRequest(agent="default", user_text=MIB_PLUS), "user_text"),
    bad("context", "BuildContext", C.BuildContextRequest(agent="default", summary=MIB_PLUS), "summary"),
    bad("context", "BuildContext", C.BuildContextRequest(agent="default", role_id="roles\\assistant"), "role_id"),
    bad("context", "BuildContext", C.BuildContextRequest(agent="default", role_id="a\x00b"), "role_id"),
    bad("context", "BuildContext", C.BuildContextRequest(agent="default", role_id="r" * 5000), "role_id"),
    # ------------------------------------------------------------------ SessionsService
    bad("sessions", "CreateSession", S.CreateSessionRequest(), "tenant_id", "agent"),
    bad(
        "sessions",
        "CreateSession",
        S.CreateSessionRequest(tenant_id=TENANT, agent="default", user_id=LONG_ID, role_id=LONG_ID),
        "user_id",
        "role_id",
    ),
    bad("sessions", "GetSession", S.GetSessionRequest(), "tenant_id", "session_id"),
    missing(
        "sessions", "GetSession", S.GetSessionRequest(tenant_id=TENANT, session_id=UNKNOWN_ID), "SESSION_NOT_FOUND"
    ),
    missing(
        "sessions",
        "GetSession",
        lambda env: S.GetSessionRequest(tenant_id="another-tenant", session_id=env.session_id),
        "SESSION_NOT_FOUND",
    ),
    bad("sessions", "ListSessions", S.ListSessionsRequest(), "tenant_id"),
    bad("sessions", "ListSessions", S.ListSessionsRequest(tenant_id=TENANT, page_size=-1), "page_size"),
    bad("sessions", "ListSessions", S.ListSessionsRequest(tenant_id=TENANT, page_size=1001), "page_size"),
    bad("sessions", "ListSessions", S.ListSessionsRequest(tenant_id=TENANT, page_token="%%%"), "page_token"),
    bad("sessions", "DeleteSession", S.DeleteSessionRequest(), "tenant_id", "session_id"),
    ok(
        "sessions",
        "DeleteSession",
        S.DeleteSessionRequest(tenant_id=TENANT, session_id=UNKNOWN_ID),
        lambda r: r.deleted is False,
    ),
    bad("sessions", "AppendMessages", S.AppendMessagesRequest(), "tenant_id", "session_id", "messages", "lease_token"),
    bad(
        "sessions",
        "AppendMessages",
        lambda env: S.AppendMessagesRequest(
            tenant_id=TENANT,
            session_id=env.session_id,
            lease_token=1,
            messages=[messages_pb2.Message(role=messages_pb2.ROLE_USER), messages_pb2.Message(content="no role")],
        ),
        "messages[1].role",
    ),
    bad(
        "sessions",
        "AppendMessages",
        lambda env: S.AppendMessagesRequest(
            tenant_id=TENANT,
            session_id=env.session_id,
            lease_token=1,
            messages=[messages_pb2.Message(role=messages_pb2.ROLE_USER, content=STORED_PLUS)],
        ),
        "messages[0]",
    ),
    missing(
        "sessions",
        "AppendMessages",
        S.AppendMessagesRequest(
            tenant_id=TENANT,
            session_id=UNKNOWN_ID,
            lease_token=1,
            messages=[messages_pb2.Message(role=messages_pb2.ROLE_USER, content="hi")],
        ),
        "SESSION_NOT_FOUND",
    ),
    Case(
        "sessions",
        "AppendMessages",
        lambda env: S.AppendMessagesRequest(
            tenant_id=TENANT,
            session_id=env.session_id,
            lease_token=999,
            messages=[messages_pb2.Message(role=messages_pb2.ROLE_USER, content="hi")],
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        reason="TURN_NOT_FOUND",
    ),
    bad("sessions", "ListMessages", S.ListMessagesRequest(), "tenant_id", "session_id"),
    bad(
        "sessions",
        "ListMessages",
        lambda env: S.ListMessagesRequest(tenant_id=TENANT, session_id=env.session_id, page_size=-1),
        "page_size",
    ),
    bad(
        "sessions",
        "ListMessages",
        lambda env: S.ListMessagesRequest(tenant_id=TENANT, session_id=env.session_id, page_size=1001),
        "page_size",
    ),
    bad(
        "sessions",
        "ListMessages",
        lambda env: S.ListMessagesRequest(tenant_id=TENANT, session_id=env.session_id, last_n=-1),
        "last_n",
    ),
    bad(
        "sessions",
        "ListMessages",
        lambda env: S.ListMessagesRequest(tenant_id=TENANT, session_id=env.session_id, last_n=1001),
        "last_n",
    ),
    bad(
        "sessions",
        "ListMessages",
        lambda env: S.ListMessagesRequest(tenant_id=TENANT, session_id=env.session_id, page_token=token("o:x")),
        "page_token",
    ),
    missing(
        "sessions", "ListMessages", S.ListMessagesRequest(tenant_id=TENANT, session_id=UNKNOWN_ID), "SESSION_NOT_FOUND"
    ),
    # time travel (issue 29), internal side
    bad("sessions", "ListTurns", S.ListTurnsRequest(page_size=201), "tenant_id", "session_id", "page_size"),
    missing("sessions", "ListTurns", S.ListTurnsRequest(tenant_id=TENANT, session_id=UNKNOWN_ID), "SESSION_NOT_FOUND"),
    bad(
        "sessions",
        "ForkSession",
        S.ForkSessionRequest(before_turn=True, agent=LONG_ID, labels={"Team": "a"}),
        "tenant_id",
        "session_id",
        "agent",
        'labels["Team"]',
    ),
    bad(
        "sessions",
        "ForkSession",
        S.ForkSessionRequest(tenant_id=TENANT, session_id=UNKNOWN_ID, before_turn=True),
        "before_turn",
    ),
    missing(
        "sessions", "ForkSession", S.ForkSessionRequest(tenant_id=TENANT, session_id=UNKNOWN_ID), "SESSION_NOT_FOUND"
    ),
    bad("sessions", "RewindSession", S.RewindSessionRequest(), "tenant_id", "session_id", "turn_id"),
    missing(
        "sessions",
        "RewindSession",
        lambda env: S.RewindSessionRequest(tenant_id=TENANT, session_id=env.session_id, turn_id=UNKNOWN_ID),
        "TURN_NOT_FOUND",
    ),
    bad(
        "sessions",
        "ListMessages",
        S.ListMessagesRequest(tenant_id=TENANT, session_id=UNKNOWN_ID, through_turn_id=LONG_ID),
        "through_turn_id",
    ),
    bad("sessions", "AcquireTurnLease", S.AcquireTurnLeaseRequest(), "tenant_id", "session_id", "turn_id"),
    bad(
        "sessions",
        "AcquireTurnLease",
        lambda env: S.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=env.session_id, turn_id="t", ttl_seconds=-1),
        "ttl_seconds",
    ),
    bad(
        "sessions",
        "AcquireTurnLease",
        lambda env: S.AcquireTurnLeaseRequest(
            tenant_id=TENANT, session_id=env.session_id, turn_id="t", ttl_seconds=86_401
        ),
        "ttl_seconds",
    ),
    missing(
        "sessions",
        "AcquireTurnLease",
        S.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=UNKNOWN_ID, turn_id="t"),
        "SESSION_NOT_FOUND",
    ),
    bad("sessions", "ReleaseTurnLease", S.ReleaseTurnLeaseRequest(), "tenant_id", "session_id", "lease_token"),
    missing(
        "sessions",
        "ReleaseTurnLease",
        S.ReleaseTurnLeaseRequest(tenant_id=TENANT, session_id=UNKNOWN_ID, lease_token=1),
        "SESSION_NOT_FOUND",
    ),
    ok(
        "sessions",
        "ReleaseTurnLease",
        lambda env: S.ReleaseTurnLeaseRequest(tenant_id=TENANT, session_id=env.session_id, lease_token=999),
        lambda r: r.released is False,
    ),
    # ------------------------------------------------------------------ SessionsService (issue 6)
    bad("sessions", "LookupSession", S.LookupSessionRequest(), "tenant_id"),
    bad("sessions", "LookupSession", S.LookupSessionRequest(tenant_id=TENANT), "user_id"),
    bad("sessions", "LookupSession", S.LookupSessionRequest(tenant_id=TENANT, user_id=LONG_ID), "user_id"),
    missing(
        "sessions", "LookupSession", S.LookupSessionRequest(tenant_id=TENANT, user_id="nobody"), "SESSION_NOT_FOUND"
    ),
    bad("sessions", "UpdateSession", S.UpdateSessionRequest(), "tenant_id", "session_id"),
    bad(
        "sessions",
        "UpdateSession",
        lambda env: S.UpdateSessionRequest(
            tenant_id=TENANT, session_id=env.session_id, update_mask=field_mask_pb2.FieldMask(paths=["scope"])
        ),
        "update_mask",
    ),
    bad(
        "sessions",
        "UpdateSession",
        lambda env: S.UpdateSessionRequest(
            tenant_id=TENANT,
            session_id=env.session_id,
            agent_version=-1,
            update_mask=field_mask_pb2.FieldMask(paths=["agent"]),
        ),
        "agent_version",
    ),
    bad(
        "sessions",
        "UpdateSession",
        lambda env: S.UpdateSessionRequest(
            tenant_id=TENANT, session_id=env.session_id, update_mask=field_mask_pb2.FieldMask(paths=["agent"])
        ),
        "agent",
    ),
    bad(
        "sessions",
        "UpdateSession",
        lambda env: S.UpdateSessionRequest(
            tenant_id=TENANT,
            session_id=env.session_id,
            active_skill_ids=[""],
            delegation_turn_count=-1,
            update_mask=field_mask_pb2.FieldMask(paths=["active_skill_ids", "delegation_turn_count"]),
        ),
        "active_skill_ids[0]",
        "delegation_turn_count",
    ),
    missing(
        "sessions",
        "UpdateSession",
        lambda env: S.UpdateSessionRequest(
            tenant_id="another-tenant",
            session_id=env.session_id,
            role_id="x",
            update_mask=field_mask_pb2.FieldMask(paths=["role_id"]),
        ),
        "SESSION_NOT_FOUND",
    ),
    bad("sessions", "CloseAllSessions", S.CloseAllSessionsRequest(), "tenant_id"),
    ok(
        "sessions",
        "CloseAllSessions",
        S.CloseAllSessionsRequest(tenant_id="tenant-with-no-sessions"),
        lambda r: r.closed_count == 0,
    ),
    bad("sessions", "RenewTurnLease", S.RenewTurnLeaseRequest(), "tenant_id", "session_id", "lease_token"),
    bad(
        "sessions",
        "RenewTurnLease",
        lambda env: S.RenewTurnLeaseRequest(
            tenant_id=TENANT, session_id=env.held_session_id, lease_token=env.held_lease, ttl_seconds=-1
        ),
        "ttl_seconds",
    ),
    missing(
        "sessions",
        "RenewTurnLease",
        S.RenewTurnLeaseRequest(tenant_id=TENANT, session_id=UNKNOWN_ID, lease_token=1),
        "SESSION_NOT_FOUND",
    ),
    Case(
        "sessions",
        "RenewTurnLease",
        lambda env: S.RenewTurnLeaseRequest(tenant_id=TENANT, session_id=env.session_id, lease_token=999),
        grpc.StatusCode.FAILED_PRECONDITION,
        reason="TURN_NOT_FOUND",
    ),
    bad("sessions", "GetTurnLease", S.GetTurnLeaseRequest(), "tenant_id", "session_id"),
    # ------------------------------------------------------------------ the event log and journals (issue 16)
    bad("sessions", "AppendEvents", S.AppendEventsRequest(), "tenant_id", "session_id", "turn_id", "lease_token"),
    bad(
        "sessions",
        "AppendEvents",
        lambda env: S.AppendEventsRequest(
            tenant_id=TENANT,
            session_id=env.held_session_id,
            turn_id=HELD_TURN,
            lease_token=env.held_lease,
            events=[E.RuntimeEvent()],
            release_lease=True,
            pause=S.Checkpoint(),
        ),
        "events[0]",
        "pause",
        "pause.interrupt_id",
        "pause.turn_id",
        "pause.request",
    ),
    missing(
        "sessions",
        "AppendEvents",
        S.AppendEventsRequest(tenant_id=TENANT, session_id=UNKNOWN_ID, turn_id="t", lease_token=1),
        "SESSION_NOT_FOUND",
    ),
    Case(  # a stale fencing token writes nothing
        "sessions",
        "AppendEvents",
        lambda env: S.AppendEventsRequest(
            tenant_id=TENANT,
            session_id=env.held_session_id,
            turn_id=HELD_TURN,
            lease_token=env.held_lease + 100,
            events=[E.RuntimeEvent(status=E.StatusUpdate(text="stale"))],
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        reason="TURN_NOT_FOUND",
    ),
    bad("sessions", "ReadEvents", S.ReadEventsRequest(heartbeat_ms=-1), "tenant_id", "session_id", "heartbeat_ms"),
    missing(
        "sessions",
        "ReadEvents",
        S.ReadEventsRequest(tenant_id=TENANT, session_id=UNKNOWN_ID),
        "SESSION_NOT_FOUND",
    ),
    bad("sessions", "GetEventLogState", S.GetEventLogStateRequest(), "tenant_id", "session_id"),
    # A call on the append stream fails on its own (its status in its answer); the stream goes on.
    ok(
        "sessions",
        "AppendEventsStream",
        S.AppendEventsStreamRequest(call_id=7, append=S.AppendEventsRequest()),
        lambda r: r.call_id == 7 and _invalid_fields(r.error) == ["lease_token", "session_id", "tenant_id", "turn_id"],
    ),
    bad("sessions", "WatchEvents", S.WatchEventsRequest(heartbeat_ms=-1), "heartbeat_ms"),
    missing(
        "sessions",
        "GetEventLogState",
        S.GetEventLogStateRequest(tenant_id=TENANT, session_id=UNKNOWN_ID),
        "SESSION_NOT_FOUND",
    ),
    bad("sessions", "GetJournal", S.GetJournalRequest(), "tenant_id", "session_id", "turn_id"),
    ok(
        "sessions",
        "GetJournal",
        lambda env: S.GetJournalRequest(tenant_id=TENANT, session_id=env.session_id, turn_id="never-ran"),
        lambda r: list(r.entries) == [],
    ),
    bad(
        "sessions",
        "RenewTurnLeases",
        S.RenewTurnLeasesRequest(leases=[S.RenewTurnLeaseRequest()]),
        "leases[0].tenant_id",
        "leases[0].session_id",
        "leases[0].lease_token",
    ),
    ok(
        "sessions",
        "RenewTurnLeases",
        S.RenewTurnLeasesRequest(
            leases=[S.RenewTurnLeaseRequest(tenant_id=TENANT, session_id=UNKNOWN_ID, lease_token=1)]
        ),
        lambda r: [lease.held for lease in r.leases] == [False],
    ),
    bad("sessions", "ClaimOrphanedTurns", S.ClaimOrphanedTurnsRequest(max_turns=-1), "holder", "max_turns"),
    bad(
        "sessions",
        "ClaimOrphanedTurns",
        S.ClaimOrphanedTurnsRequest(holder="10.0.0.9:50052", wait_seconds=301),
        "wait_seconds",
    ),
    bad("sessions", "InterruptTurn", S.InterruptTurnRequest(), "tenant_id", "session_id"),
    missing(
        "sessions",
        "InterruptTurn",
        S.InterruptTurnRequest(tenant_id=TENANT, session_id=UNKNOWN_ID),
        "SESSION_NOT_FOUND",
    ),
    missing(
        "sessions", "GetTurnLease", S.GetTurnLeaseRequest(tenant_id=TENANT, session_id=UNKNOWN_ID), "SESSION_NOT_FOUND"
    ),
    ok(
        "sessions",
        "GetTurnLease",
        lambda env: S.GetTurnLeaseRequest(tenant_id=TENANT, session_id=env.held_session_id),
        lambda r: r.lease.turn_id == HELD_TURN,
    ),
    bad("sessions", "UpdateSummary", S.UpdateSummaryRequest(), "tenant_id", "session_id"),
    bad(
        "sessions",
        "UpdateSummary",
        lambda env: S.UpdateSummaryRequest(tenant_id=TENANT, session_id=env.session_id, covered_message_count=-1),
        "covered_message_count",
    ),
    bad(
        "sessions",
        "UpdateSummary",
        lambda env: S.UpdateSummaryRequest(tenant_id=TENANT, session_id=env.session_id, covered_message_count=10**6),
        "covered_message_count",
    ),
    bad(
        "sessions",
        "UpdateSummary",
        lambda env: S.UpdateSummaryRequest(tenant_id=TENANT, session_id=env.session_id, text="z" * (257 << 10)),
        "text",
    ),
    missing(
        "sessions",
        "UpdateSummary",
        S.UpdateSummaryRequest(tenant_id=TENANT, session_id=UNKNOWN_ID),
        "SESSION_NOT_FOUND",
    ),
    bad("sessions", "SaveGoal", S.SaveGoalRequest(), "tenant_id", "session_id", "goal"),
    bad("sessions", "SaveGoal", S.SaveGoalRequest(tenant_id=TENANT, session_id=UNKNOWN_ID, goal=S.Goal()), "goal.text"),
    bad(
        "sessions",
        "SaveGoal",
        lambda env: S.SaveGoalRequest(tenant_id=TENANT, session_id=env.session_id, goal=S.Goal(text="g", status=9)),
        "goal.status",
    ),
    missing(
        "sessions",
        "SaveGoal",
        S.SaveGoalRequest(tenant_id=TENANT, session_id=UNKNOWN_ID, goal=S.Goal(text="g")),
        "SESSION_NOT_FOUND",
    ),
    bad("sessions", "ListGoals", S.ListGoalsRequest(), "tenant_id", "session_id"),
    missing("sessions", "ListGoals", S.ListGoalsRequest(tenant_id=TENANT, session_id=UNKNOWN_ID), "SESSION_NOT_FOUND"),
    bad("sessions", "SetPhase", S.SetPhaseRequest(), "tenant_id", "session_id", "phase"),
    bad(
        "sessions",
        "SetPhase",
        S.SetPhaseRequest(tenant_id=TENANT, session_id=UNKNOWN_ID, phase=S.PhaseState()),
        "phase.phase",
    ),
    missing(
        "sessions",
        "SetPhase",
        S.SetPhaseRequest(tenant_id=TENANT, session_id=UNKNOWN_ID, phase=S.PhaseState(phase="p")),
        "SESSION_NOT_FOUND",
    ),
    bad(
        "sessions",
        "WriteCheckpoint",
        S.WriteCheckpointRequest(),
        "tenant_id",
        "session_id",
        "lease_token",
        "checkpoint",
    ),
    bad(
        "sessions",
        "WriteCheckpoint",
        S.WriteCheckpointRequest(tenant_id=TENANT, session_id=UNKNOWN_ID, lease_token=1, checkpoint=S.Checkpoint()),
        "checkpoint.interrupt_id",
        "checkpoint.turn_id",
        "checkpoint.request",
    ),
    Case(
        "sessions",
        "WriteCheckpoint",
        lambda env: S.WriteCheckpointRequest(
            tenant_id=TENANT,
            session_id=env.session_id,
            lease_token=999,
            checkpoint=S.Checkpoint(interrupt_id="i", turn_id="t", user_input=E.UserInputRequested(prompt="?")),
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        reason="TURN_NOT_FOUND",
    ),
    missing(
        "sessions",
        "WriteCheckpoint",
        S.WriteCheckpointRequest(
            tenant_id=TENANT,
            session_id=UNKNOWN_ID,
            lease_token=1,
            checkpoint=S.Checkpoint(interrupt_id="i", turn_id="t", user_input=E.UserInputRequested(prompt="?")),
        ),
        "SESSION_NOT_FOUND",
    ),
    bad("sessions", "GetCheckpoint", S.GetCheckpointRequest(), "tenant_id", "session_id", "interrupt_id"),
    missing(
        "sessions",
        "GetCheckpoint",
        lambda env: S.GetCheckpointRequest(tenant_id=TENANT, session_id=env.session_id, interrupt_id="nope"),
        "TURN_NOT_FOUND",
    ),
    bad("sessions", "ListCheckpoints", S.ListCheckpointsRequest(), "tenant_id", "session_id"),
    missing(
        "sessions",
        "ListCheckpoints",
        lambda env: S.ListCheckpointsRequest(tenant_id="another-tenant", session_id=env.session_id),
        "SESSION_NOT_FOUND",
    ),
    ok(
        "sessions",
        "ListCheckpoints",
        lambda env: S.ListCheckpointsRequest(tenant_id=TENANT, session_id=env.session_id),
        lambda r: len(r.checkpoints) == 0,
    ),
    bad(
        "sessions",
        "DecideCheckpoint",
        S.DecideCheckpointRequest(),
        "tenant_id",
        "session_id",
        "interrupt_id",
        "decision",
    ),
    missing(
        "sessions",
        "DecideCheckpoint",
        lambda env: S.DecideCheckpointRequest(
            tenant_id=TENANT, session_id=env.session_id, interrupt_id="nope", decision=S.CheckpointDecision(text="x")
        ),
        "TURN_NOT_FOUND",
    ),
    bad(
        "sessions",
        "ConsumeCheckpoint",
        S.ConsumeCheckpointRequest(),
        "tenant_id",
        "session_id",
        "interrupt_id",
        "lease_token",
    ),
    Case(
        "sessions",
        "ConsumeCheckpoint",
        lambda env: S.ConsumeCheckpointRequest(
            tenant_id=TENANT, session_id=env.session_id, interrupt_id="i", lease_token=999
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        reason="TURN_NOT_FOUND",
    ),
    bad(
        "sessions",
        "AnswerPause",
        S.AnswerPauseRequest(),
        "tenant_id",
        "session_id",
        "interrupt_id",
        "resume",
        "ttl_seconds",
    ),
    bad(
        "sessions",
        "AnswerPause",
        S.AnswerPauseRequest(
            tenant_id=TENANT, session_id=UNKNOWN_ID, interrupt_id="i", resume=S.LeaseResume(), ttl_seconds=3601
        ),
        "resume.attempt_id",
        "ttl_seconds",
    ),
    bad(
        "sessions",
        "AnswerPause",
        lambda env: S.AnswerPauseRequest(
            tenant_id=TENANT,
            session_id=env.session_id,
            interrupt_id="i",
            decision=S.CheckpointDecision(approval=E.APPROVAL_DECISION_EDIT),
            abandon=True,
            resume=S.LeaseResume(attempt_id="a"),
            ttl_seconds=30,
        ),
        "decision",
        "decision.edited_arguments",
    ),
    missing(
        "sessions",
        "AnswerPause",
        lambda env: S.AnswerPauseRequest(
            tenant_id=TENANT,
            session_id=env.session_id,
            interrupt_id="nope",
            decision=S.CheckpointDecision(text="x"),
            resume=S.LeaseResume(attempt_id="a"),
            ttl_seconds=30,
        ),
        "TURN_NOT_FOUND",
    ),
    bad("sessions", "GetRehydrationPayload", S.GetRehydrationPayloadRequest(), "tenant_id", "session_id"),
    bad(
        "sessions",
        "GetRehydrationPayload",
        lambda env: S.GetRehydrationPayloadRequest(tenant_id=TENANT, session_id=env.session_id, last_n=-1),
        "last_n",
    ),
    missing(
        "sessions",
        "GetRehydrationPayload",
        lambda env: S.GetRehydrationPayloadRequest(tenant_id="another-tenant", session_id=env.session_id),
        "SESSION_NOT_FOUND",
    ),
    ok(
        "sessions",
        "GetRehydrationPayload",
        lambda env: S.GetRehydrationPayloadRequest(tenant_id=TENANT, session_id=env.session_id),
        lambda r: r.session.message_count > 0 and len(r.last_messages) > 0,
    ),
    bad(
        "sessions",
        "AcquireTurnLease",
        lambda env: S.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=env.session_id, turn_id="t", strategy=9),
        "strategy",
    ),
    bad(
        "sessions",
        "CreateSession",
        S.CreateSessionRequest(tenant_id=TENANT, agent="default", reuse_existing=True),
        "reuse_existing",
    ),
    # ------------------------------------------------------------------ RuntimeService
    bad("runtime", "CancelTurn", R.CancelTurnRequest(), "session_id", "turn_id"),
    bad("runtime", "AdoptTurn", R.AdoptTurnRequest(), "session_id", "turn_id", "lease_token"),
    ok(
        "runtime",
        "AdoptTurn",
        R.AdoptTurnRequest(session_id="s", turn_id="t", lease_token=3),
        lambda reply: not reply.adopted,  # a turn this replica does not run is not adopted
    ),
    bad(
        "runtime",
        "StartTurn",
        R.StartTurnRequest(turn=R.RunTurnRequest()),
        "turn.tenant_id",
        "turn.session_id",
        "turn.turn_id",
        "turn.content",
        "turn.lease_token",
    ),
    bad("runtime", "StartTurn", lambda env: R.StartTurnRequest(turn=run_turn(env, model=LONG_ID)), "turn.model"),
    bad(
        "runtime", "StartTurn", lambda env: R.StartTurnRequest(turn=run_turn(env, content=BIG_CONTENT)), "turn.content"
    ),
    bad("runtime", "StartTurn", lambda env: R.StartTurnRequest(turn=run_turn(env, lease_token=0)), "turn.lease_token"),
    bad(
        "runtime",
        "ContinueTurn",
        R.ContinueTurnRequest(resume=R.ResumeTurnRequest()),
        "resume.tenant_id",
        "resume.session_id",
        "resume.turn_id",
        "resume.interrupt_id",
        "resume.lease_token",
    ),
    missing(  # no turn of this session is paused at interrupt "i"
        "runtime",
        "ContinueTurn",
        lambda env: R.ContinueTurnRequest(
            resume=R.ResumeTurnRequest(
                tenant_id=TENANT, session_id=env.session_id, turn_id="t", interrupt_id="i", lease_token=1
            )
        ),
        "TURN_NOT_FOUND",
    ),
    ok("runtime", "ListRuntimes", R.ListRuntimesRequest(), lambda r: r.default_runtime == "cogmesh"),
    ok("runtime", "ListTools", R.ListToolsRequest(), lambda r: "calculator" in {t.name for t in r.tools}),
    bad("gateway", "ResolveApproval", G.ResolveApprovalRequest(), "session_id", "interrupt_id", "decision"),
    missing(
        "gateway",
        "ResolveApproval",
        lambda env: G.ResolveApprovalRequest(
            session_id=env.session_id, interrupt_id="int_x", decision=E.APPROVAL_DECISION_APPROVE
        ),
        "TURN_NOT_FOUND",
    ),
    bad("gateway", "AnswerInterrupt", G.AnswerInterruptRequest(session_id=UNKNOWN_ID, interrupt_id="i"), "answer"),
    missing(
        "gateway",
        "AnswerInterrupt",
        lambda env: G.AnswerInterruptRequest(session_id=env.session_id, interrupt_id="int_x", user_input="y"),
        "TURN_NOT_FOUND",
    ),
    bad("gateway", "Converse", G.ConverseRequest(open=G.ConverseOpen()), "open.session_id"),
    bad("gateway", "Converse", G.ConverseRequest(message=G.SendMessageRequest(content="hi")), "open"),
    missing("gateway", "Converse", G.ConverseRequest(open=G.ConverseOpen(session_id=UNKNOWN_ID)), "SESSION_NOT_FOUND"),
    bad(
        "gateway",
        "SendMessage",
        lambda env: G.SendMessageRequest(session_id=env.session_id, content="x", runtime="r" * 65),
        "runtime",
    ),
    bad("gateway", "CreateSession", G.CreateSessionRequest(agent="arithmetic"), "agent"),
    # ------------------------------------------------------------------ context: compaction and archive
    bad("context", "CompactHistory", C.CompactHistoryRequest(), "tenant_id", "session_id", "agent"),
    bad(
        "context",
        "CompactHistory",
        C.CompactHistoryRequest(tenant_id="t", session_id="s", agent="default", limits={"max_tokens": -1}),
        "limits.max_tokens",
    ),
    missing(
        "context",
        "CompactHistory",
        C.CompactHistoryRequest(tenant_id="t", session_id="s", agent="no-such-agent"),
        "AGENT_NOT_FOUND",
    ),
    bad("context", "GetToolResponse", C.GetToolResponseRequest(), "tenant_id", "session_id", "execution_id"),
    missing(
        "context",
        "GetToolResponse",
        C.GetToolResponseRequest(tenant_id="t", session_id="s", execution_id="x"),
        "TOOL_RESULT_NOT_FOUND",
    ),
    bad(
        "context",
        "GetToolResponse",
        C.GetToolResponseRequest(tenant_id="t", session_id="s", execution_id="x", offset=-1, max_chars=-2),
        "offset",
        "max_chars",
    ),
    bad(
        "context",
        "ArchiveToolResult",
        C.ArchiveToolResultRequest(),
        "tenant_id",
        "session_id",
        "tool_call_id",
        "content",
    ),
    bad(
        "context",
        "BuildContext",
        C.BuildContextRequest(agent="default", budget={"total_tokens": 100, "goal_max": 200}),
        "budget.goal_max",
    ),
    # ------------------------------------------------------------------ policy: phases, hooks, routing, commands
    bad("policy", "CheckToolCalls", P.CheckToolCallsRequest(), "calls"),
    bad("policy", "CheckToolResult", P.CheckToolResultRequest(scope=P.Scope()), "scope.agent", "tool_name"),
    bad("policy", "RunInterceptors", P.RunInterceptorsRequest(), "phase", "scope"),
    bad("policy", "RunInterceptors", P.RunInterceptorsRequest(phase=99, scope=P.Scope()), "phase", "scope.agent"),  # type: ignore[arg-type]
    bad("policy", "BeginTurn", P.BeginTurnRequest(), "scope"),
    bad("policy", "ResolveRole", P.ResolveRoleRequest(), "agent"),
    bad("policy", "HandleCommand", P.HandleCommandRequest(scope=P.Scope()), "scope.agent"),
    bad("policy", "SelectTools", P.SelectToolsRequest(scope=P.Scope(role_id=LONG_ID)), "scope.agent", "scope.role_id"),
    ok("policy", "GetPolicyStatus", P.GetPolicyStatusRequest(), lambda r: r.config_version >= 1),
    ok(
        "policy",
        "WatchPolicy",
        P.WatchPolicyRequest(known_version="no-such-version"),
        lambda r: bool(r.snapshot.version) and len(r.snapshot.files) >= 1,
    ),
    # ------------------------------------------------------------------ models: catalogue management
    ok("models", "ListAliases", M.ListAliasesRequest(provider="google"), lambda r: len(r.aliases) == 4),
    bad("models", "AddModel", M.AddModelRequest(), "model"),
    bad("models", "RemoveModel", M.RemoveModelRequest(), "id"),
    ok(
        "runtime",
        "CancelTurn",
        R.CancelTurnRequest(session_id=UNKNOWN_ID, turn_id="t"),
        lambda r: r.cancelled is False,
    ),
]


def case_of(param: Any) -> Case:
    return param.values[0] if hasattr(param, "values") else param  # type: ignore[no-any-return]


def case_id(case: Case) -> str:
    if case.code == INVALID:
        what = "+".join(case.fields)
    elif case.code == OK:
        what = "ok"
    else:
        what = case.reason or case.code.name
    return f"{case.service}.{case.method}-{what}"


def _ids() -> list[str]:
    seen: dict[str, int] = {}
    ids = []
    for param in CASES:
        base = param.id if hasattr(param, "id") and param.id else case_id(case_of(param))
        seen[base] = seen.get(base, 0) + 1
        ids.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return ids


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(gateway: Any, sessions: Any) -> Env:
    async def hold(session_id: str) -> int:
        lease = await sessions.AcquireTurnLease(
            sessions_pb2.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=session_id, turn_id=HELD_TURN),
            timeout=TIMEOUT_S,
        )
        return lease.lease_token  # type: ignore[no-any-return]

    session_id = await new_session(gateway)
    events = await send(gateway, session_id, "hello")
    assert events[-1].WhichOneof("payload") == "final"
    held_session_id = await new_session(gateway)
    return Env(session_id, events[-1].seq, held_session_id, await hold(held_session_id))


async def invoke(stub: Any, method: pb_descriptor.MethodDescriptor, request: Message) -> Any:
    """Call one RPC; a server stream is read up to its first message (errors come before it)."""
    argument = iter([request]) if method.client_streaming else request
    call = getattr(stub, method.name)(argument, timeout=TIMEOUT_S)
    if method.server_streaming:
        try:
            first = await asyncio.wait_for(call.read(), TIMEOUT_S)
            if first is grpc.aio.EOF:
                await call  # raises the stream's status if it was an error
            return first
        finally:
            call.cancel()
    return await call


@pytest.mark.parametrize("case", CASES, ids=_ids())
async def test_bad_input(case: Case, stubs: dict[str, Any], env: Env) -> None:
    method = SERVICES[case.service].methods_by_name[case.method]
    request = case.build(env)
    assert request.DESCRIPTOR is method.input_type, "row's request type does not match the RPC"

    if case.code == OK:
        response = await invoke(stubs[case.service], method, request)
        assert case.check is not None and case.check(response), response
        return

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await invoke(stubs[case.service], method, request)
    err = caught.value
    assert err.code() not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), err.details()
    assert err.code() == case.code, err.details()
    assert err.details(), "the status message must say what is wrong"
    info, violations = status_details(err)
    assert info is not None, "every error carries a google.rpc.ErrorInfo"
    assert info.domain == DOMAIN

    if case.code == INVALID:
        assert info.reason == "INVALID_ARGUMENT"
        assert sorted(f for f, _ in violations) == sorted(case.fields), violations
        assert all(description for _, description in violations)
        for name in case.fields:
            assert name in (err.details() or "")
    else:
        assert violations == []
        if case.reason:
            assert info.reason == case.reason


async def test_every_rpc_has_a_row() -> None:
    covered = {(case_of(p).service, case_of(p).method) for p in CASES}
    every = {(name, m.name) for name, service in SERVICES.items() for m in service.methods}
    assert every - covered == set(), "RPCs without a bad-input row"
    assert covered - every == set(), "rows naming RPCs that do not exist"


async def test_every_error_row_is_an_error_with_details() -> None:
    for param in CASES:
        case = case_of(param)
        if case.code == INVALID:
            assert case.fields, case
        elif case.code == OK:
            assert case.check is not None, case


# ---------------------------------------------------------------------- turns the runtime cannot run
# StartTurn answers field errors; what it finds wrong as it builds the turn (in the background) ends
# the turn in the session's log, and a turn whose writes the log refuses leaves no trace.


async def _start_and_let_go(suite: Suite, stubs: dict[str, Any], request: runtime_pb2.RunTurnRequest) -> None:
    """StartTurn takes the turn; then wait until the runtime is done with it (built, ended or dropped)."""
    reply = await stubs["runtime"].StartTurn(runtime_pb2.StartTurnRequest(turn=request), timeout=TIMEOUT_S)
    assert reply.holder, "StartTurn names the replica that took the turn"
    runner = suite.servers["runtime"].app.mounts[0].servicer.runner
    key = (request.session_id, request.turn_id)
    await until(lambda: key not in runner._running, "the runtime is done with the turn")


async def _stored(stubs: dict[str, Any], session_id: str) -> tuple[resources_pb2.Session, int]:
    """The session as stored, and the last seq of its event log."""
    reply = await stubs["sessions"].GetSession(
        sessions_pb2.GetSessionRequest(tenant_id=TENANT, session_id=session_id), timeout=TIMEOUT_S
    )
    log = await stubs["sessions"].GetEventLogState(
        sessions_pb2.GetEventLogStateRequest(tenant_id=TENANT, session_id=session_id), timeout=TIMEOUT_S
    )
    return reply.session, log.last_seq


async def test_a_turn_with_a_stale_lease_token_stores_nothing(suite: Suite, stubs: dict[str, Any], env: Env) -> None:
    """The turn id holds the lease but the fencing token is wrong: the log refuses every write of it."""
    request = run_turn(env, session_id=env.held_session_id, turn_id=HELD_TURN, lease_token=env.held_lease + 100)
    await _start_and_let_go(suite, stubs, request)
    session, last_seq = await _stored(stubs, env.held_session_id)
    assert (session.message_count, last_seq) == (0, 0)
    assert session.active_turn_id == HELD_TURN, "the lease's holder keeps it"


async def test_a_turn_without_the_lease_stores_nothing(suite: Suite, stubs: dict[str, Any], env: Env) -> None:
    before, _ = await _stored(stubs, env.session_id)
    await _start_and_let_go(suite, stubs, run_turn(env))  # env.session_id is idle: no lease is held
    session, last_seq = await _stored(stubs, env.session_id)
    assert (session.message_count, last_seq) == (before.message_count, env.last_seq)
    assert session.active_turn_id == ""


async def test_a_turn_of_an_unknown_session_creates_nothing(suite: Suite, stubs: dict[str, Any], env: Env) -> None:
    await _start_and_let_go(suite, stubs, run_turn(env, session_id=UNKNOWN_ID))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stored(stubs, UNKNOWN_ID)
    assert caught.value.code() == NOT_FOUND


@pytest.mark.parametrize(
    ("agent", "model", "named"),
    [
        pytest.param("ghost-agent", "", "ghost-agent", id="agent-gone"),
        pytest.param("default", "gpt-4o", "gpt-4o", id="model-without-its-provider"),
    ],
)
async def test_a_turn_the_runtime_cannot_build_ends_naming_why(
    suite: Suite, stubs: dict[str, Any], env: Env, agent: str, model: str, named: str
) -> None:
    created = await stubs["sessions"].CreateSession(
        sessions_pb2.CreateSessionRequest(tenant_id=TENANT, agent=agent), timeout=TIMEOUT_S
    )
    session_id = created.session.session_id
    lease = await stubs["sessions"].AcquireTurnLease(
        sessions_pb2.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=session_id, turn_id=HELD_TURN),
        timeout=TIMEOUT_S,
    )
    request = run_turn(env, session_id=session_id, turn_id=HELD_TURN, lease_token=lease.lease_token, model=model)
    await _start_and_let_go(suite, stubs, request)
    read = stubs["sessions"].ReadEvents(
        sessions_pb2.ReadEventsRequest(tenant_id=TENANT, session_id=session_id), timeout=TIMEOUT_S
    )
    events = [event async for reply in read for event in reply.events]
    assert [e.WhichOneof("payload") for e in events] == ["error"], events
    error = events[0].error
    assert (error.kind, error.retryable) == (E.ERROR_KIND_INVALID_REQUEST, False), error
    assert named in error.message
    session, _ = await _stored(stubs, session_id)
    assert (session.message_count, session.active_turn_id) == (0, ""), "its end freed the session"


# ---------------------------------------------------------------------- bad per-turn options (issue 14, item 8)


def _struct(value: dict[str, Any]) -> Any:
    return json_format.ParseDict(value, struct_pb2.Struct())


def _tool(name: str, parameters: dict[str, Any] | None = None) -> messages_pb2.ToolSpec:
    spec = messages_pb2.ToolSpec(name=name, description="a client tool")
    if parameters is not None:
        spec.parameters.CopyFrom(_struct(parameters))
    return spec


OBJECT = {"type": "object", "properties": {"q": {"type": "string"}}}
BAD_OPTIONS: list[Any] = [
    pytest.param({"runtime": "warp"}, ("runtime",), id="unknown-runtime"),
    pytest.param({"limits": T.TurnLimits(max_iterations=-1)}, ("limits.max_iterations",), id="limits"),
    pytest.param(
        {"limits": T.TurnLimits(tool_timeout_ms=-5, max_wall_clock_ms=-1)},
        ("limits.tool_timeout_ms", "limits.max_wall_clock_ms"),
        id="limits-two",
    ),
    pytest.param({"cost_budget": T.CostBudget(max_cost_usd=-1)}, ("cost_budget.max_cost_usd",), id="budget-cost"),
    pytest.param(
        # NaN breaks both of the field's rules: not below 0 (NaN is no number) and finite.
        {"cost_budget": T.CostBudget(max_cost_usd=float("nan"))},
        ("cost_budget.max_cost_usd", "cost_budget.max_cost_usd"),
        id="budget-nan",
    ),
    pytest.param(
        {"cost_budget": T.CostBudget(max_total_tokens=-1)}, ("cost_budget.max_total_tokens",), id="budget-tokens"
    ),
    pytest.param({"output_schema": _struct({"type": "banana"})}, ("output_schema",), id="output-schema"),
    pytest.param({"client_tools": [_tool("has space", OBJECT)]}, ("client_tools[0].name",), id="tool-name"),
    pytest.param({"client_tools": [_tool("lookup"), _tool("lookup")]}, ("client_tools[1].name",), id="tool-twice"),
    pytest.param(
        {"client_tools": [_tool("lookup", {"type": "string"})]}, ("client_tools[0].parameters",), id="tool-not-object"
    ),
    pytest.param(
        {"client_tools": [_tool("lookup", {"type": "object", "required": 5})]},
        ("client_tools[0].parameters",),
        id="tool-bad-schema",
    ),
    pytest.param({"client_tools": [_tool(f"t{i}") for i in range(65)]}, ("client_tools",), id="tools-too-many"),
]


async def _log_of(gateway: Any, session_id: str) -> list[Any]:
    """Every event of the session's log (the stream ends once it is idle)."""
    call = gateway.Subscribe(G.SubscribeRequest(session_id=session_id, stop_when_idle=True), timeout=TIMEOUT_S)
    return [event async for response in call for event in response.events]


async def _next_turn_runs_at_once(gateway: Any, session_id: str) -> None:
    """The session is not locked: a good turn (naming a real runtime and model) runs to its end."""
    request = G.SendMessageRequest(session_id=session_id, content="hello", runtime="single-shot", model="local")
    events = [e async for r in gateway.SendMessage(request, timeout=TIMEOUT_S) for e in r.events]
    assert events[0].status.text == "accepted" and events[-1].WhichOneof("payload") == "final", events[-1]


@pytest.mark.parametrize(("options", "fields"), BAD_OPTIONS)
async def test_bad_turn_options_are_refused_before_the_turn_starts(
    options: dict[str, Any], fields: tuple[str, ...], gateway: Any
) -> None:
    session_id = await new_session(gateway)
    request = G.SendMessageRequest(session_id=session_id, content="hi", **options)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await invoke(gateway, SERVICES["gateway"].methods_by_name["SendMessage"], request)
    assert caught.value.code() == INVALID, caught.value.details()
    info, violations = status_details(caught.value)
    assert info is not None and info.reason == "INVALID_ARGUMENT"
    assert sorted(field for field, _ in violations) == sorted(fields), violations
    assert await _log_of(gateway, session_id) == [], "no turn was accepted"
    await _next_turn_runs_at_once(gateway, session_id)


async def test_an_unknown_model_is_not_found_before_the_turn_starts(gateway: Any) -> None:
    """A turn's model is resolved strictly (the runtime never swaps it for the default): asked of models first."""
    session_id = await new_session(gateway)
    request = G.SendMessageRequest(session_id=session_id, content="hi", model="no-such-model")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await invoke(gateway, SERVICES["gateway"].methods_by_name["SendMessage"], request)
    assert caught.value.code() == NOT_FOUND, caught.value.details()
    info, _ = status_details(caught.value)
    assert info is not None and info.reason == "MODEL_NOT_FOUND"
    assert dict(info.metadata) == {"field": "model", "model": "no-such-model"}
    assert "no-such-model" in (caught.value.details() or "")
    assert await _log_of(gateway, session_id) == []
    await _next_turn_runs_at_once(gateway, session_id)


async def test_converse_refuses_a_frame_with_bad_options_and_keeps_the_stream(gateway: Any) -> None:
    session_id = await new_session(gateway)
    frames = [
        G.ConverseRequest(frame_id="open", open=G.ConverseOpen(session_id=session_id)),
        # Field problems are reported first; the names are asked of their services once the rest is valid.
        G.ConverseRequest(
            frame_id="bad",
            message=G.SendMessageRequest(content="hi", runtime="warp", limits=T.TurnLimits(max_tool_calls=-1)),
        ),
        G.ConverseRequest(frame_id="warp", message=G.SendMessageRequest(content="hi", runtime="warp")),
        G.ConverseRequest(frame_id="ghost-model", message=G.SendMessageRequest(content="hi", model="no-such-model")),
        G.ConverseRequest(frame_id="good", message=G.SendMessageRequest(content="hello")),
    ]
    call = gateway.Converse(iter(frames), timeout=TIMEOUT_S)
    replies = [reply async for reply in call]
    rejected = {r.rejected.frame_id: r.rejected for r in replies if r.HasField("rejected")}
    assert set(rejected) == {"bad", "warp", "ghost-model"}, replies
    assert [(r.code, [v.field for v in r.violations]) for r in (rejected["bad"], rejected["warp"])] == [
        ("INVALID_ARGUMENT", ["message.limits.max_tool_calls"]),
        ("INVALID_ARGUMENT", ["message.runtime"]),
    ]
    missing_model = rejected["ghost-model"]
    assert (missing_model.code, missing_model.reason) == ("NOT_FOUND", errors_pb2.ERROR_REASON_MODEL_NOT_FOUND)
    assert missing_model.metadata["field"] == "message.model"
    events = [e for r in replies if r.HasField("events") for e in r.events.events]
    assert len({e.turn_id for e in events}) == 1, "only the good frame started a turn"
    assert events[-1].WhichOneof("payload") == "final"
