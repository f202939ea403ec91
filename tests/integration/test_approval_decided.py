"""Approvals for reviewers and for audit, through the gateway with the whole suite (memory and Redis):
an agent's `approvals` fill approval_required's prompt and defaults, and each decision is logged once as
an approval_decided event naming the authenticated principal that decided, even when the resumed turn
is taken over by another run."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import json_format, struct_pb2

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from gateway.auth import hash_key
from services.lib.agents import DEFAULT_AGENTS_DIR
from services.sessions.model import StoreUnavailable
from services.suite.inprocess import Suite, start_suite
from tests.integration.conftest import STUB_CLASSES, SUITE_SETTINGS, TIMEOUT_S, payload
from tests.support.redis_server import delete_prefix, unique_prefix

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEY, PRINCIPAL = "key-reviewer-1", "alice-reviewer"
AUTH = (("authorization", f"Bearer {KEY}"),)
REVIEWED = """
name: reviewed
description: computes with a reviewer's approval
prompts_dir: default
model: local
tools: [calculator]
interrupt_on: {calculator: true}
approvals:
  "calc*": {prompt: "pattern"}
  calculator:
    prompt: "Compute {expression} for {customer}?"
    defaults: {decision: approve, comment: looks fine}
default_role: assistant
"""
SHORT_LEASES: dict[str, Any] = {"turn_lease_ttl_s": 2, "turn_lease_renew_s": 0.5, "takeover_poll_s": 0.2}


@dataclass
class Env:
    suite: Suite
    gateway: Any


@contextlib.asynccontextmanager
async def reviewed_suite(tmp: Path, redis_url: str, **settings: Any) -> AsyncIterator[Env]:
    agents = tmp / "agents"
    shutil.copytree(DEFAULT_AGENTS_DIR, agents)
    (agents / "reviewed.yaml").write_text(REVIEWED)
    keys = tmp / "keys.yaml"
    keys.write_text(f"keys:\n  - {{sha256: {hash_key(KEY)}, tenant: acme, principal: {PRINCIPAL}}}\n")
    update: dict[str, Any] = {"agents_dir": agents, "api_keys_file": keys, **settings}
    prefix = ""
    if redis_url:
        prefix = unique_prefix("approvals")
        update |= {"redis_url": redis_url, "redis_key_prefix": prefix}
    suite = await start_suite(SUITE_SETTINGS.model_copy(update=update))
    channel = grpc.aio.insecure_channel(suite.servers["gateway"].address)
    try:
        yield Env(suite, STUB_CLASSES["gateway"](channel))
    finally:
        await channel.close()
        await suite.stop(0)
        if prefix:
            delete_prefix(redis_url, prefix)


@pytest_asyncio.fixture(loop_scope="module", scope="module", params=["memory", "redis"])
async def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    url = request.getfixturevalue("redis_url") if request.param == "redis" else ""
    async with reviewed_suite(tmp_path_factory.mktemp("approvals"), url) as found:
        yield found


async def stream(call: Any) -> list[events_pb2.RuntimeEvent]:
    async def read() -> list[events_pb2.RuntimeEvent]:
        return [event async for response in call for event in response.events]

    return await asyncio.wait_for(read(), TIMEOUT_S)


async def paused_turn(env: Env, question: str) -> tuple[str, events_pb2.ApprovalRequired]:
    created = await env.gateway.CreateSession(
        gateway_pb2.CreateSessionRequest(agent="reviewed"), metadata=AUTH, timeout=TIMEOUT_S
    )
    session_id = created.session.session_id
    request = gateway_pb2.SendMessageRequest(session_id=session_id, content=question)
    events = await stream(env.gateway.SendMessage(request, metadata=AUTH, timeout=TIMEOUT_S))
    asked = [e.approval_required for e in events if payload(e) == "approval_required"]
    assert len(asked) == 1, [payload(e) for e in events]
    return session_id, asked[0]


async def finished_log(env: Env, session_id: str) -> list[events_pb2.RuntimeEvent]:
    """The session's whole log once its turn has ended."""
    log: list[events_pb2.RuntimeEvent] = []
    async with asyncio.timeout(TIMEOUT_S):
        while not log or payload(log[-1]) not in ("final", "error"):
            after = log[-1].seq if log else 0
            call = env.gateway.Subscribe(
                gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=after), metadata=AUTH
            )
            log += (await call.read()).events
            call.cancel()
    return log


def decisions(log: list[events_pb2.RuntimeEvent]) -> list[events_pb2.ApprovalDecided]:
    return [e.approval_decided for e in log if payload(e) == "approval_decided"]


async def test_the_reviewer_sees_the_agents_prompt_and_defaults(env: Env) -> None:
    """The exact name's settings win over the pattern; a placeholder the call lacks stays as written."""
    _, asked = await paused_turn(env, "What is 6 * 7?")
    assert asked.prompt == "Compute 6 * 7 for {customer}?"
    assert json_format.MessageToDict(asked.defaults) == {"decision": "approve", "comment": "looks fine"}


async def test_an_approval_is_logged_once_with_who_decided(env: Env) -> None:
    session_id, asked = await paused_turn(env, "What is 2 * 21?")
    resolve = gateway_pb2.ResolveApprovalRequest(
        session_id=session_id, interrupt_id=asked.interrupt_id, decision=events_pb2.APPROVAL_DECISION_APPROVE
    )
    resumed = await stream(env.gateway.ResolveApproval(resolve, metadata=AUTH, timeout=TIMEOUT_S))
    assert payload(resumed[0]) == "approval_decided", "the resumed turn's events start with the decision"
    log = await finished_log(env, session_id)
    [decided] = decisions(log)
    assert decided == events_pb2.ApprovalDecided(
        interrupt_id=asked.interrupt_id,
        correlation_id=asked.correlation_id,
        action_name="calculator",
        decision=events_pb2.APPROVAL_DECISION_APPROVE,
        principal=PRINCIPAL,
    )
    order = [payload(e) for e in log]
    assert order.index("approval_required") < order.index("approval_decided") < order.index("tool_call_finished")
    assert log[-1].final.text == "2 * 21 = 42."


async def test_a_rejection_and_an_edit_carry_the_comment_and_the_arguments(env: Env) -> None:
    session_id, asked = await paused_turn(env, "What is 3 * 3?")
    reject = gateway_pb2.ResolveApprovalRequest(
        session_id=session_id,
        interrupt_id=asked.interrupt_id,
        decision=events_pb2.APPROVAL_DECISION_REJECT,
        reason="not today",
    )
    await stream(env.gateway.ResolveApproval(reject, metadata=AUTH, timeout=TIMEOUT_S))
    [rejected] = decisions(await finished_log(env, session_id))
    assert (rejected.decision, rejected.comment, rejected.principal) == (
        events_pb2.APPROVAL_DECISION_REJECT,
        "not today",
        PRINCIPAL,
    )

    session_id, asked = await paused_turn(env, "What is 4 * 4?")
    edited = struct_pb2.Struct()
    edited.update({"expression": "5 * 5"})
    edit = gateway_pb2.ResolveApprovalRequest(
        session_id=session_id,
        interrupt_id=asked.interrupt_id,
        decision=events_pb2.APPROVAL_DECISION_EDIT,
        edited_arguments=edited,
    )
    await stream(env.gateway.ResolveApproval(edit, metadata=AUTH, timeout=TIMEOUT_S))
    log = await finished_log(env, session_id)
    [decided] = decisions(log)
    assert decided.decision == events_pb2.APPROVAL_DECISION_EDIT
    assert json_format.MessageToDict(decided.edited_arguments) == {"expression": "5 * 5"}
    finished = next(e.tool_call_finished for e in log if payload(e) == "tool_call_finished")
    assert finished.result_summary == "25"


async def test_a_resumed_turn_taken_over_logs_its_decision_once(tmp_path: Path) -> None:
    """The resume's first append (the decision's event, the answer and the checkpoint's taking) lands, then
    the runtime loses the log and stops; a takeover goes on with the recorded answer and finishes the
    turn without logging the decision again."""
    async with reviewed_suite(tmp_path, "", **SHORT_LEASES, event_log_outage_s=0.3) as env:
        session_id, asked = await paused_turn(env, "What is 6 * 7?")
        store = env.suite.servers["sessions"].app.mounts[0].servicer.store
        runner = env.suite.servers["runtime"].app.mounts[0].servicer.runner
        original, consumed, outage = store.append_events, asyncio.Event(), asyncio.Event()

        async def append(tenant_id: str, sid: str, new: Any) -> Any:
            if outage.is_set():
                raise StoreUnavailable("sessions restarting")
            appended = await original(tenant_id, sid, new)
            if new.consume_interrupt_id and not appended.duplicate:
                assert [payload(e) for e in new.events] == ["approval_decided"]
                consumed.set()
                outage.set()  # the resumed turn's next writes fail until it gives up
            return appended

        store.append_events = append
        try:
            resolve = gateway_pb2.ResolveApprovalRequest(
                session_id=session_id, interrupt_id=asked.interrupt_id, decision=events_pb2.APPROVAL_DECISION_APPROVE
            )
            resolving = asyncio.ensure_future(stream(env.gateway.ResolveApproval(resolve, metadata=AUTH)))
            await asyncio.wait_for(consumed.wait(), TIMEOUT_S)
            await asyncio.wait_for(runner.idle(), TIMEOUT_S)
            outage.clear()
            with contextlib.suppress(grpc.aio.AioRpcError):
                await asyncio.wait_for(resolving, TIMEOUT_S)
            log = await finished_log(env, session_id)
        finally:
            store.append_events = original
        assert "taken over" in [e.status.text for e in log if payload(e) == "status"]
        assert log[-1].final.text == "6 * 7 = 42."
        assert [d.principal for d in decisions(log)] == [PRINCIPAL]
