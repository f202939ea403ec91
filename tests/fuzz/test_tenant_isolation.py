"""Tenant isolation: tenant B tries every public RPC on tenant A's session, turn and interrupt.

Each attempt is refused exactly as if the ids did not exist (same code, same message,
same ErrorInfo once the id itself is blanked out), so nothing tells B that A's session
exists; and A's session is unchanged afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import pytest
from google.protobuf.message import Message

from cogmesh.common.v1 import events_pb2, turns_pb2
from cogmesh.gateway.v1 import gateway_pb2 as G
from tests.fuzz.calls import Outcome, check_status, invoke
from tests.fuzz.conftest import CALL_TIMEOUT_S, Harness, bearer
from tests.integration.conftest import status_details

SERVICE = G.DESCRIPTOR.services_by_name["GatewayService"]
NOT_FOUND = grpc.StatusCode.NOT_FOUND


@dataclass(frozen=True)
class Target:
    session_id: str  # idle, with a finished turn
    turn_id: str  # that turn
    paused_session_id: str  # its turn waits for a client tool result
    interrupt_id: str


def requests(t: Target) -> dict[str, list[Message]]:
    """Per RPC, what B sends (Converse: its frames) aimed at `t`."""
    return {
        "GetSession": [G.GetSessionRequest(session_id=t.session_id)],
        "DeleteSession": [G.DeleteSessionRequest(session_id=t.session_id)],
        "UpdateSession": [
            G.UpdateSessionRequest(session_id=t.session_id, labels={"x": "y"}, update_mask={"paths": ["labels"]})
        ],
        "SendMessage": [G.SendMessageRequest(session_id=t.session_id, content="hi")],
        "Subscribe": [G.SubscribeRequest(session_id=t.session_id, stop_when_idle=True)],
        "CancelTurn": [G.CancelTurnRequest(session_id=t.session_id, turn_id=t.turn_id)],
        "ListTurns": [G.ListTurnsRequest(session_id=t.session_id, include_steps=True)],
        "ListMessages": [G.ListMessagesRequest(session_id=t.session_id, through_turn_id=t.turn_id)],
        "ForkSession": [G.ForkSessionRequest(session_id=t.session_id, turn_id=t.turn_id)],
        "RewindSession": [G.RewindSessionRequest(session_id=t.session_id, turn_id=t.turn_id)],
        "ResolveApproval": [
            G.ResolveApprovalRequest(
                session_id=t.paused_session_id,
                interrupt_id=t.interrupt_id,
                decision=events_pb2.APPROVAL_DECISION_APPROVE,
            )
        ],
        "AnswerInterrupt": [
            G.AnswerInterruptRequest(
                session_id=t.paused_session_id,
                interrupt_id=t.interrupt_id,
                tool_result=turns_pb2.ClientToolResult(content="B's answer"),
            )
        ],
        "Converse": [
            G.ConverseRequest(frame_id="1", open=G.ConverseOpen(session_id=t.paused_session_id)),
            G.ConverseRequest(
                frame_id="2",
                answer=G.AnswerInterruptRequest(interrupt_id=t.interrupt_id, user_input="x"),
            ),
        ],
    }


# RPCs that name no session: B may call them, and what they return must be B's own.
UNTARGETED = {"CreateSession", "ListSessions", "ListAgents", "ListModels", "GetCapabilities"}


def blanked(outcome: Outcome, ids: list[str]) -> tuple[str, str, str, list[tuple[str, str]], dict[str, str]]:
    """What B learns from an answer, with the ids it sent replaced by a placeholder."""

    def blank(text: str) -> str:
        for value in ids:
            text = text.replace(value, "<id>")
        return text

    reason, metadata = "", {}
    violations: list[tuple[str, str]] = []
    if outcome.error is not None:
        info, violations = status_details(outcome.error)
        if info is not None:
            reason, metadata = info.reason, {k: blank(v) for k, v in info.metadata.items()}
    answer = "".join(blank(str(r)) for r in outcome.responses)
    return outcome.code.name, blank(outcome.details), reason + answer, violations, metadata


def test_requests_cover_every_public_rpc() -> None:
    assert set(requests(Target("s", "t", "p", "i"))) | UNTARGETED == {m.name for m in SERVICE.methods}


@pytest.mark.parametrize("name", sorted(requests(Target("s", "t", "p", "i"))))
def test_other_tenant_is_refused_like_a_missing_id(name: str, harness: Harness) -> None:
    a = harness.resources
    sid, paused = a.sessions["acme"], a.paused["acme"]
    state_before = harness.run(harness.snapshot("acme", [sid, paused[0]]))
    turn_id = state_before[sid].last_turn_id
    real = Target(sid, turn_id, paused[0], paused[1])
    missing = Target(uuid.uuid4().hex, uuid.uuid4().hex, uuid.uuid4().hex, f"int_{uuid.uuid4().hex}")
    method = SERVICE.methods_by_name[name]

    def attempt(target: Target) -> Outcome:
        frames = [m.SerializeToString() for m in requests(target)[name]]
        return harness.run(invoke(harness.channel, method, frames, bearer("globex"), CALL_TIMEOUT_S))

    foreign, absent = attempt(real), attempt(missing)
    check_status(foreign)
    if name == "DeleteSession":  # idempotent: deleting what is not yours is deleting nothing
        assert foreign.code == grpc.StatusCode.OK and not foreign.responses[0].deleted  # type: ignore[attr-defined]
    else:
        assert foreign.code == NOT_FOUND, f"{foreign.code.name}: {foreign.details}"
    assert blanked(foreign, [real.session_id, real.turn_id, real.paused_session_id, real.interrupt_id]) == blanked(
        absent, [missing.session_id, missing.turn_id, missing.paused_session_id, missing.interrupt_id]
    ), "the answer about another tenant's ids differs from the answer about ids that do not exist"

    harness.run(harness.settled(), 60)
    assert harness.run(harness.snapshot("acme", [sid, paused[0]])) == state_before, "tenant A's sessions changed"


@pytest.mark.parametrize("name", sorted(UNTARGETED))
def test_untargeted_rpcs_answer_with_the_callers_own_data(name: str, harness: Harness) -> None:
    method = SERVICE.methods_by_name[name]
    request: Callable[[], Message] = {
        "CreateSession": G.CreateSessionRequest,
        "ListSessions": G.ListSessionsRequest,
        "ListAgents": G.ListAgentsRequest,
        "ListModels": G.ListModelsRequest,
        "GetCapabilities": G.GetCapabilitiesRequest,
    }[name]
    acme = set(harness.run(harness.session_ids("acme")))
    outcome = harness.run(
        invoke(harness.channel, method, [request().SerializeToString()], bearer("globex"), CALL_TIMEOUT_S)
    )
    assert outcome.code == grpc.StatusCode.OK, outcome.details
    reply = outcome.responses[0]
    sessions = list(getattr(reply, "sessions", [])) + ([reply.session] if name == "CreateSession" else [])  # type: ignore[attr-defined]
    assert all(s.tenant_id == "globex" and s.session_id not in acme for s in sessions)
    if name == "ListSessions":
        assert {s.session_id for s in sessions} == set(harness.run(harness.session_ids("globex")))
