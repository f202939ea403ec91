"""Paused turns through the gateway: approvals, user input, client-side tools, cancelling a paused turn,
and the per-turn options of SendMessage. The whole suite runs on port 0 with agents of its own."""

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

from cogmesh.common.v1 import events_pb2, messages_pb2, turns_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.lib.agents import DEFAULT_AGENTS_DIR
from services.sessions.model import StoreUnavailable
from services.suite.inprocess import Suite, start_suite
from tests.integration.conftest import (
    STUB_CLASSES,
    SUITE_SETTINGS,
    TIMEOUT_S,
    new_session,
    payload,
    status_details,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

AGENTS = {
    "careful.yaml": """
name: careful
description: computes only with a human's approval
prompts_dir: default
model: local
tools: [calculator, ask_user]
interrupt_on: {calculator: true}
default_role: assistant
""",
    "boss.yaml": """
name: boss
description: delegates arithmetic
prompts_dir: default
model: local
tools: [calculator]
subagents: [helper, checker]
default_role: assistant
""",
    "helper.md": "---\nmode: subagent\ndescription: does arithmetic\ntools: [calculator]\n---\nYou compute.\n",
    "checker.yaml": """
name: checker
mode: subagent
description: computes after a human approves
system_prompt: You compute carefully.
tools: [calculator]
interrupt_on: {calculator: true}
""",
}


@dataclass
class Env:
    suite: Suite
    stubs: dict[str, Any]

    @property
    def gateway(self) -> gateway_pb2_grpc.GatewayServiceStub:
        return self.stubs["gateway"]  # type: ignore[no-any-return]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    async with agents_suite(tmp_path_factory.mktemp("pause")) as found:
        yield found


@contextlib.asynccontextmanager
async def agents_suite(tmp: Path, agent_files: dict[str, str] | None = None, **settings: Any) -> AsyncIterator[Env]:
    """The suite with the default agents plus this module's (and `agent_files`), one stub per service."""
    agents_dir = tmp / "agents"
    shutil.copytree(DEFAULT_AGENTS_DIR, agents_dir)
    for name, text in {**AGENTS, **(agent_files or {})}.items():
        (agents_dir / name).write_text(text)
    suite = await start_suite(SUITE_SETTINGS.model_copy(update={"agents_dir": agents_dir, **settings}))
    channels = {name: grpc.aio.insecure_channel(server.address) for name, server in suite.servers.items()}
    try:
        yield Env(suite, {name: STUB_CLASSES[name](channel) for name, channel in channels.items()})
    finally:
        for channel in channels.values():
            await channel.close()
        await suite.stop(0)


async def stream(call: Any) -> list[events_pb2.RuntimeEvent]:
    """All events of a server stream (SendMessage, ResolveApproval, AnswerInterrupt)."""

    async def read() -> list[events_pb2.RuntimeEvent]:
        return [event async for response in call for event in response.events]

    return await asyncio.wait_for(read(), TIMEOUT_S)


def kinds(events: list[events_pb2.RuntimeEvent]) -> list[str]:
    return [payload(e) for e in events]


def only(events: list[events_pb2.RuntimeEvent], kind: str) -> Any:
    found = [getattr(e, kind) for e in events if payload(e) == kind]
    assert len(found) == 1, f"expected one {kind} in {kinds(events)}"
    return found[0]


async def session_of(env: Env, session_id: str) -> Any:
    reply = await env.gateway.GetSession(gateway_pb2.GetSessionRequest(session_id=session_id), timeout=TIMEOUT_S)
    return reply.session


async def whole_log(env: Env, session_id: str) -> list[events_pb2.RuntimeEvent]:
    request = gateway_pb2.SubscribeRequest(session_id=session_id, stop_when_idle=True)
    return await stream(env.gateway.Subscribe(request, timeout=TIMEOUT_S))


def message(session_id: str, content: str, **fields: Any) -> gateway_pb2.SendMessageRequest:
    return gateway_pb2.SendMessageRequest(session_id=session_id, content=content, **fields)


async def rpc_error(coroutine: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await coroutine
    return caught.value


# --------------------------------------------------------------------------- approvals


async def test_an_answer_whose_caller_hangs_up_mid_resume_still_resumes_the_turn(env: Env) -> None:
    """The caller cancels ResolveApproval while the gateway waits for a runtime to take the resumed
    turn: the answer is recorded, so the resume goes on without the caller and the turn finishes."""
    session_id = await new_session(env.gateway, agent="careful")
    paused = await stream(env.gateway.SendMessage(message(session_id, "What is 2 * 21?"), timeout=TIMEOUT_S))
    approval = paused[-2].approval_required
    runtime = env.suite.servers["gateway"].app.mounts[0].servicer.turns.clients.runtime
    original, reached, release = runtime.ContinueTurn, asyncio.Event(), asyncio.Event()

    async def slow_continue(request: Any, **options: Any) -> Any:
        reached.set()
        await release.wait()
        return await original(request, **options)

    runtime.ContinueTurn = slow_continue
    try:
        resolve = gateway_pb2.ResolveApprovalRequest(
            session_id=session_id, interrupt_id=approval.interrupt_id, decision=events_pb2.APPROVAL_DECISION_APPROVE
        )
        call = env.gateway.ResolveApproval(resolve, timeout=TIMEOUT_S)
        await asyncio.wait_for(reached.wait(), TIMEOUT_S)  # recorded; the resume is on its way
        call.cancel()
        release.set()
        watcher = env.gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=paused[-1].seq))
        rest: list[events_pb2.RuntimeEvent] = []
        async with asyncio.timeout(TIMEOUT_S):
            while not any(payload(e) == "final" for e in rest):
                rest += (await watcher.read()).events
        watcher.cancel()
        assert rest[-1].final.text == "2 * 21 = 42." and rest[-1].turn_id == paused[0].turn_id
    finally:
        runtime.ContinueTurn = original


async def finished(env: Env, session_id: str) -> list[events_pb2.RuntimeEvent]:
    """The session's whole log once its turn has its final event."""
    log = await whole_log(env, session_id)
    async with asyncio.timeout(TIMEOUT_S):
        while payload(log[-1]) != "final":
            watcher = env.gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=log[-1].seq))
            log += (await watcher.read()).events
            watcher.cancel()
    return log


async def checkpoints(env: Env, session_id: str) -> list[sessions_pb2.Checkpoint]:
    request = sessions_pb2.ListCheckpointsRequest(tenant_id="default", session_id=session_id)
    return list((await env.stubs["sessions"].ListCheckpoints(request, timeout=TIMEOUT_S)).checkpoints)


SHORT_LEASES: dict[str, Any] = {"turn_lease_ttl_s": 2, "turn_lease_renew_s": 0.5, "takeover_poll_s": 0.2}


@pytest.mark.parametrize("how", ["reply-lost", "runtime-stopped"])
async def test_a_resumes_first_append_takes_the_checkpoint_once(tmp_path: Path, how: str) -> None:
    """The resumed turn's first append records its answer and takes the checkpoint in one write. Its reply
    lost, the append is resent and lands once; the runtime stopping right after it, a takeover goes on with
    the recorded answer (nothing left to take) and finishes the turn."""
    async with agents_suite(tmp_path, **SHORT_LEASES, event_log_outage_s=0.3) as env:
        session_id = await new_session(env.gateway, agent="careful")
        paused = await stream(env.gateway.SendMessage(message(session_id, "What is 6 * 7?"), timeout=TIMEOUT_S))
        approval = paused[-2].approval_required
        store = env.suite.servers["sessions"].app.mounts[0].servicer.store
        runner = env.suite.servers["runtime"].app.mounts[0].servicer.runner
        original, consumed, outage = store.append_events, asyncio.Event(), asyncio.Event()

        async def append(tenant_id: str, sid: str, new: Any) -> Any:
            if outage.is_set():
                raise StoreUnavailable("sessions restarting")
            appended = await original(tenant_id, sid, new)
            if new.consume_interrupt_id and not appended.duplicate:
                assert not consumed.is_set(), "one resume, one append taking the checkpoint"
                consumed.set()
                if how == "reply-lost":
                    raise StoreUnavailable("the reply was lost")  # applied: the resend is a duplicate
                outage.set()  # the resumed turn's next writes fail until it gives up
            return appended

        store.append_events = append
        try:
            resolve = gateway_pb2.ResolveApprovalRequest(
                session_id=session_id, interrupt_id=approval.interrupt_id, decision=events_pb2.APPROVAL_DECISION_APPROVE
            )
            resolving = asyncio.ensure_future(stream(env.gateway.ResolveApproval(resolve, timeout=TIMEOUT_S)))
            await asyncio.wait_for(consumed.wait(), TIMEOUT_S)
            if how == "runtime-stopped":
                # The turn stops here once its log stays away (COGMESH_EVENT_LOG_OUTAGE_S), then sessions is back.
                await asyncio.wait_for(runner.idle(), TIMEOUT_S)
                outage.clear()
            with contextlib.suppress(grpc.aio.AioRpcError):
                await resolving
            log = await finished(env, session_id)
        finally:
            store.append_events = original
        assert log[-1].final.text == "6 * 7 = 42." and log[-1].turn_id == paused[0].turn_id
        taken_over = "taken over" in [e.status.text for e in log if payload(e) == "status"]
        assert taken_over == (how == "runtime-stopped")
        assert await checkpoints(env, session_id) == []
        assert next(e for e in log if payload(e) == "tool_call_finished").tool_call_finished.result_summary == "42"


@pytest.mark.parametrize("taken", [False, True], ids=["checkpoint-left", "reply-lost"])
async def test_a_resume_of_the_previous_version_that_stops_at_the_checkpoint_is_taken_over(
    tmp_path: Path, taken: bool
) -> None:
    """A caller of the previous version (a resume lease, then ContinueTurn with the answer and no `paused`):
    the runtime records the answer, then its ConsumeCheckpoint fails with UNAVAILABLE, before or after
    sessions took the checkpoint. The turn is neither left paused nor lost: once the lease lapses a takeover
    goes on with the recorded answer, takes the checkpoint if it is still there, and finishes the turn."""
    async with agents_suite(tmp_path, **SHORT_LEASES) as env:
        session_id = await new_session(env.gateway, agent="careful")
        paused = await stream(env.gateway.SendMessage(message(session_id, "What is 3 * 14?"), timeout=TIMEOUT_S))
        approval = paused[-2].approval_required
        sessions = env.suite.servers["runtime"].app.mounts[0].servicer.runner.store.clients.sessions
        original, failed = sessions.ConsumeCheckpoint, asyncio.Event()

        async def unavailable_once(request: Any, **options: Any) -> Any:
            if not failed.is_set():
                failed.set()
                if taken:
                    await original(request, **options)  # taken, and the reply lost
                raise grpc.aio.AioRpcError(
                    grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "sessions restarting"
                )
            return await original(request, **options)

        sessions.ConsumeCheckpoint = unavailable_once
        lease = await env.stubs["sessions"].AcquireTurnLease(
            sessions_pb2.AcquireTurnLeaseRequest(
                tenant_id="default",
                session_id=session_id,
                turn_id=paused[0].turn_id,
                ttl_seconds=2,
                resume=sessions_pb2.LeaseResume(attempt_id="old-caller"),
            ),
            timeout=TIMEOUT_S,
        )
        resume = runtime_pb2.ResumeTurnRequest(
            tenant_id="default",
            session_id=session_id,
            turn_id=paused[0].turn_id,
            interrupt_id=approval.interrupt_id,
            lease_token=lease.lease_token,
            approval=runtime_pb2.ApprovalAnswer(decision=events_pb2.APPROVAL_DECISION_APPROVE),
        )
        with contextlib.suppress(grpc.aio.AioRpcError):  # the caller may hear of the failure, or of the turn
            await env.stubs["runtime"].ContinueTurn(runtime_pb2.ContinueTurnRequest(resume=resume), timeout=TIMEOUT_S)
        assert failed.is_set()
        log = await finished(env, session_id)
        assert log[-1].final.text == "3 * 14 = 42." and log[-1].turn_id == paused[0].turn_id
        assert "taken over" in [e.status.text for e in log if payload(e) == "status"]
        assert await checkpoints(env, session_id) == []


async def test_approval_pauses_the_turn_and_resolving_it_finishes_the_same_turn(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="careful")
    paused = await stream(env.gateway.SendMessage(message(session_id, "What is 17 * 23?"), timeout=TIMEOUT_S))
    assert kinds(paused)[-2:] == ["approval_required", "status"]
    approval = paused[-2].approval_required
    assert approval.action_name == "calculator"
    assert json_format.MessageToDict(approval.arguments) == {"expression": "17 * 23"}
    assert paused[-1].status.state == events_pb2.TURN_STATE_PAUSED
    assert paused[-1].status.interrupt_id == approval.interrupt_id
    turn_id = paused[0].turn_id
    session = await session_of(env, session_id)
    assert session.active_turn_id == "" and session.message_count == 0  # no lease held while paused

    # The paused session takes no new message: it names what it waits for.
    error = await rpc_error(stream(env.gateway.SendMessage(message(session_id, "hello"), timeout=TIMEOUT_S)))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    info, _ = status_details(error)
    assert info is not None and info.reason == "TURN_IN_PROGRESS"
    assert (info.metadata["interrupt_id"], info.metadata["turn_id"]) == (approval.interrupt_id, turn_id)

    resolve = gateway_pb2.ResolveApprovalRequest(
        session_id=session_id, interrupt_id=approval.interrupt_id, decision=events_pb2.APPROVAL_DECISION_APPROVE
    )
    resumed = await stream(env.gateway.ResolveApproval(resolve, timeout=TIMEOUT_S))
    assert {e.turn_id for e in resumed} == {turn_id}
    assert resumed[-1].final.text == "17 * 23 = 391."
    assert [m.role for m in resumed[-1].final.new_messages] == [
        messages_pb2.ROLE_USER,
        messages_pb2.ROLE_ASSISTANT,
        messages_pb2.ROLE_TOOL,
        messages_pb2.ROLE_ASSISTANT,
    ]
    assert (await session_of(env, session_id)).message_count == 4

    log = await whole_log(env, session_id)
    assert [e.seq for e in log] == list(range(1, len(log) + 1))  # one log, no gaps, one turn
    assert {e.turn_id for e in log} == {turn_id}
    assert kinds(log).count("final") == 1

    # Answering again: the turn is no longer paused.
    error = await rpc_error(stream(env.gateway.ResolveApproval(resolve, timeout=TIMEOUT_S)))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    info, _ = status_details(error)
    assert info is not None and info.reason == "TURN_NOT_FOUND"

    after = await stream(env.gateway.SendMessage(message(session_id, "thanks"), timeout=TIMEOUT_S))
    assert after[-1].HasField("final")  # the session is free again


async def test_edit_and_reject_through_answer_interrupt(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="careful")
    paused = await stream(env.gateway.SendMessage(message(session_id, "What is 2 + 2?"), timeout=TIMEOUT_S))
    interrupt_id = paused[-1].status.interrupt_id
    edited = struct_pb2.Struct()
    edited.update({"expression": "20 + 22"})
    answer = gateway_pb2.AnswerInterruptRequest(
        session_id=session_id,
        interrupt_id=interrupt_id,
        approval=turns_pb2.ApprovalAnswer(decision=events_pb2.APPROVAL_DECISION_EDIT, edited_arguments=edited),
    )
    resumed = await stream(env.gateway.AnswerInterrupt(answer, timeout=TIMEOUT_S))
    assert only(resumed, "tool_call_finished").result_summary == "42"

    paused = await stream(env.gateway.SendMessage(message(session_id, "What is 9 - 1?"), timeout=TIMEOUT_S))
    reject = gateway_pb2.ResolveApprovalRequest(
        session_id=session_id,
        interrupt_id=paused[-1].status.interrupt_id,
        decision=events_pb2.APPROVAL_DECISION_REJECT,
        reason="not on a Sunday",
    )
    resumed = await stream(env.gateway.ResolveApproval(reject, timeout=TIMEOUT_S))
    assert (
        resumed[-1].final.text == 'The calculator tool failed: "a human reviewer rejected this call: not on a Sunday".'
    )


async def test_answers_that_do_not_fit_are_refused_naming_the_field(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="careful")
    paused = await stream(env.gateway.SendMessage(message(session_id, "What is 3 * 3?"), timeout=TIMEOUT_S))
    interrupt_id = paused[-1].status.interrupt_id

    wrong_kind = gateway_pb2.AnswerInterruptRequest(session_id=session_id, interrupt_id=interrupt_id, user_input="9")
    error = await rpc_error(stream(env.gateway.AnswerInterrupt(wrong_kind, timeout=TIMEOUT_S)))
    _, violations = status_details(error)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violations and violations[0][0] == "user_input" and "waits for an approval" in violations[0][1]

    bad = gateway_pb2.ResolveApprovalRequest(session_id=session_id, decision=events_pb2.APPROVAL_DECISION_EDIT)
    error = await rpc_error(stream(env.gateway.ResolveApproval(bad, timeout=TIMEOUT_S)))
    _, violations = status_details(error)
    assert [field for field, _ in violations] == ["interrupt_id"]  # the fields' rules first
    bad.interrupt_id = interrupt_id
    error = await rpc_error(stream(env.gateway.ResolveApproval(bad, timeout=TIMEOUT_S)))
    _, violations = status_details(error)
    assert [field for field, _ in violations] == ["edited_arguments"]

    empty = gateway_pb2.AnswerInterruptRequest(session_id=session_id, interrupt_id=interrupt_id)
    error = await rpc_error(stream(env.gateway.AnswerInterrupt(empty, timeout=TIMEOUT_S)))
    _, violations = status_details(error)
    assert [field for field, _ in violations] == ["answer"]

    unknown = gateway_pb2.ResolveApprovalRequest(
        session_id=session_id, interrupt_id="int_nope", decision=events_pb2.APPROVAL_DECISION_APPROVE
    )
    error = await rpc_error(stream(env.gateway.ResolveApproval(unknown, timeout=TIMEOUT_S)))
    assert error.code() == grpc.StatusCode.NOT_FOUND

    # Still paused and answerable after all that.
    approve = gateway_pb2.ResolveApprovalRequest(
        session_id=session_id, interrupt_id=interrupt_id, decision=events_pb2.APPROVAL_DECISION_APPROVE
    )
    resumed = await stream(env.gateway.ResolveApproval(approve, timeout=TIMEOUT_S))
    assert resumed[-1].final.text == "3 * 3 = 9."


async def test_an_unknown_decision_is_refused_at_every_layer_and_never_approves(env: Env) -> None:
    """Fail closed: a decision value outside APPROVE/EDIT/REJECT is INVALID_ARGUMENT wherever it arrives."""
    session_id = await new_session(env.gateway, agent="careful")
    paused = await stream(env.gateway.SendMessage(message(session_id, "What is 6 * 7?"), timeout=TIMEOUT_S))
    interrupt_id = paused[-1].status.interrupt_id
    turn_id = paused[0].turn_id

    resolve = gateway_pb2.ResolveApprovalRequest(session_id=session_id, interrupt_id=interrupt_id, decision=99)  # type: ignore[arg-type]
    error = await rpc_error(stream(env.gateway.ResolveApproval(resolve, timeout=TIMEOUT_S)))
    _, violations = status_details(error)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violations == [
        (
            "decision",
            "must be one of APPROVAL_DECISION_APPROVE, APPROVAL_DECISION_EDIT, APPROVAL_DECISION_REJECT, not 99",
        )
    ]

    answer = gateway_pb2.AnswerInterruptRequest(
        session_id=session_id,
        interrupt_id=interrupt_id,
        approval=turns_pb2.ApprovalAnswer(decision=77),  # type: ignore[arg-type]
    )
    error = await rpc_error(stream(env.gateway.AnswerInterrupt(answer, timeout=TIMEOUT_S)))
    _, violations = status_details(error)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and violations[0][0] == "approval.decision"

    # Behind the gateway too: sessions will not record it, the runtime will not resume with it.
    decide = sessions_pb2.DecideCheckpointRequest(
        tenant_id=SUITE_SETTINGS.tenant_id,
        session_id=session_id,
        interrupt_id=interrupt_id,
        decision=sessions_pb2.CheckpointDecision(approval=42),  # type: ignore[arg-type]
    )
    error = await rpc_error(env.stubs["sessions"].DecideCheckpoint(decide, timeout=TIMEOUT_S))
    _, violations = status_details(error)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and violations[0][0] == "decision.approval"
    resume = runtime_pb2.ResumeTurnRequest(
        tenant_id=SUITE_SETTINGS.tenant_id,
        session_id=session_id,
        turn_id=turn_id,
        interrupt_id=interrupt_id,
        lease_token=1,
        approval=runtime_pb2.ApprovalAnswer(decision=5),  # type: ignore[arg-type]
    )
    continued = runtime_pb2.ContinueTurnRequest(resume=resume)
    error = await rpc_error(env.stubs["runtime"].ContinueTurn(continued, timeout=TIMEOUT_S))
    _, violations = status_details(error)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and violations[0][0] == "resume.approval.decision"

    # Nothing ran: the calculator was never called and the turn still waits for a real answer.
    assert "tool_call_finished" not in kinds(await whole_log(env, session_id))
    reject = gateway_pb2.ResolveApprovalRequest(
        session_id=session_id, interrupt_id=interrupt_id, decision=events_pb2.APPROVAL_DECISION_REJECT, reason="no"
    )
    resumed = await stream(env.gateway.ResolveApproval(reject, timeout=TIMEOUT_S))
    assert "rejected this call: no" in resumed[-1].final.text


async def test_the_first_decision_wins(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="careful")
    paused = await stream(env.gateway.SendMessage(message(session_id, "What is 4 * 4?"), timeout=TIMEOUT_S))
    interrupt_id = paused[-1].status.interrupt_id
    # A reviewer's decision lands while the runtime is down: recorded, not yet resumed.
    sessions = env.stubs["sessions"]
    await sessions.DecideCheckpoint(
        sessions_pb2.DecideCheckpointRequest(
            tenant_id=SUITE_SETTINGS.tenant_id,
            session_id=session_id,
            interrupt_id=interrupt_id,
            decision=sessions_pb2.CheckpointDecision(approval=events_pb2.APPROVAL_DECISION_REJECT, text="no"),
        ),
        timeout=TIMEOUT_S,
    )
    approve = gateway_pb2.ResolveApprovalRequest(
        session_id=session_id, interrupt_id=interrupt_id, decision=events_pb2.APPROVAL_DECISION_APPROVE
    )
    error = await rpc_error(stream(env.gateway.ResolveApproval(approve, timeout=TIMEOUT_S)))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION and "answered differently" in (error.details() or "")
    # The same decision again resumes the turn with it.
    reject = gateway_pb2.ResolveApprovalRequest(
        session_id=session_id, interrupt_id=interrupt_id, decision=events_pb2.APPROVAL_DECISION_REJECT, reason="no"
    )
    resumed = await stream(env.gateway.ResolveApproval(reject, timeout=TIMEOUT_S))
    assert "rejected this call: no" in resumed[-1].final.text


# --------------------------------------------------------------------------- user input and client tools


async def test_ask_user_pauses_for_the_answer(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="careful")
    paused = await stream(env.gateway.SendMessage(message(session_id, "@ask_user Which currency?"), timeout=TIMEOUT_S))
    asked = paused[-2].user_input_requested
    assert asked.prompt == "Which currency?"
    answer = gateway_pb2.AnswerInterruptRequest(
        session_id=session_id, interrupt_id=asked.interrupt_id, user_input="euros"
    )
    resumed = await stream(env.gateway.AnswerInterrupt(answer, timeout=TIMEOUT_S))
    assert resumed[-1].final.text == "The ask_user tool returned: euros"


async def test_client_tools_declared_per_turn(env: Env) -> None:
    session_id = await new_session(env.gateway, scope={"end_user": "u_7"})
    parameters = struct_pb2.Struct()
    parameters.update({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
    read_file = messages_pb2.ToolSpec(
        name="read_file", description="Read a file on the user's machine", parameters=parameters
    )
    request = message(session_id, '@read_file {"path": "notes.txt"}', client_tools=[read_file])
    paused = await stream(env.gateway.SendMessage(request, timeout=TIMEOUT_S))
    started = only(paused, "tool_call_started")
    assert started.source == "client"
    call = paused[-2].client_tool_call
    assert call.call.name == "read_file" and json_format.MessageToDict(call.call.arguments) == {"path": "notes.txt"}
    assert call.call.id == started.correlation_id
    assert dict(call.scope) == {"end_user": "u_7"}  # the session's scope, as every tool call gets it

    answer = gateway_pb2.AnswerInterruptRequest(
        session_id=session_id,
        interrupt_id=call.interrupt_id,
        tool_result=turns_pb2.ClientToolResult(content="buy milk"),
    )
    resumed = await stream(env.gateway.AnswerInterrupt(answer, timeout=TIMEOUT_S))
    assert resumed[-1].final.text == "The read_file tool returned: buy milk"

    # The tool exists for that turn only; a failing client tool goes back to the model.
    paused = await stream(env.gateway.SendMessage(request, timeout=TIMEOUT_S))
    failed = gateway_pb2.AnswerInterruptRequest(
        session_id=session_id,
        interrupt_id=paused[-1].status.interrupt_id,
        tool_result=turns_pb2.ClientToolResult(content="permission denied", is_error=True),
    )
    resumed = await stream(env.gateway.AnswerInterrupt(failed, timeout=TIMEOUT_S))
    assert not only(resumed, "tool_call_finished").ok
    assert resumed[-1].final.text == 'The read_file tool failed: "permission denied".'

    plain = await stream(env.gateway.SendMessage(message(session_id, '@read_file {"path": "x"}'), timeout=TIMEOUT_S))
    assert "tool_call_started" not in kinds(plain) and plain[-1].HasField("final")


# --------------------------------------------------------------------------- cancelling a paused turn


async def test_cancel_gives_a_paused_turn_up(env: Env) -> None:
    session_id = await new_session(env.gateway, agent="careful")
    paused = await stream(env.gateway.SendMessage(message(session_id, "What is 6 * 6?"), timeout=TIMEOUT_S))
    turn_id = paused[0].turn_id
    idle = await whole_log(env, session_id)  # stop_when_idle ends on a paused session
    assert idle[-1].status.state == events_pb2.TURN_STATE_PAUSED

    reply = await env.gateway.CancelTurn(gateway_pb2.CancelTurnRequest(session_id=session_id), timeout=TIMEOUT_S)
    assert (reply.cancelled, reply.turn_id) == (True, turn_id)
    log = await whole_log(env, session_id)
    assert log[-1].turn_id == turn_id and log[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
    session = await session_of(env, session_id)
    assert session.message_count == 3 and session.active_turn_id == ""  # user, tool call, "cancelled" result

    again = await env.gateway.CancelTurn(gateway_pb2.CancelTurnRequest(session_id=session_id), timeout=TIMEOUT_S)
    assert (again.cancelled, again.turn_id) == (False, "")
    after = await stream(env.gateway.SendMessage(message(session_id, "hello"), timeout=TIMEOUT_S))
    assert after[-1].HasField("final")


# --------------------------------------------------------------------------- per-turn options


async def test_send_message_options_reach_the_runtime(env: Env) -> None:
    session_id = await new_session(env.gateway)
    single = await stream(
        env.gateway.SendMessage(message(session_id, "What is 5 * 5?", runtime="single-shot"), timeout=TIMEOUT_S)
    )
    assert "tool_call_started" not in kinds(single) and single[-1].final.metrics.runtime == "single-shot"

    schema = struct_pb2.Struct()
    schema.update({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]})
    shaped = await stream(
        env.gateway.SendMessage(
            message(session_id, '@final_response {"answer": "yes"}', output_schema=schema), timeout=TIMEOUT_S
        )
    )
    assert json_format.MessageToDict(shaped[-1].final.structured_output) == {"answer": "yes"}

    limited = await stream(
        env.gateway.SendMessage(
            message(session_id, "What is 1 + 1?", limits=turns_pb2.TurnLimits(max_iterations=1)), timeout=TIMEOUT_S
        )
    )
    assert limited[-1].error.kind == events_pb2.ERROR_KIND_LOOP_LIMIT

    budget = turns_pb2.CostBudget(max_total_tokens=5, action=turns_pb2.BUDGET_ACTION_ERROR)
    over = await stream(env.gateway.SendMessage(message(session_id, "hi", cost_budget=budget), timeout=TIMEOUT_S))
    assert over[-1].error.kind == events_pb2.ERROR_KIND_BUDGET_EXCEEDED

    # A runtime the runtime does not have is refused before any turn starts, naming the field.
    refused = await rpc_error(
        stream(env.gateway.SendMessage(message(session_id, "hi", runtime="warp-drive"), timeout=TIMEOUT_S))
    )
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT and "warp-drive" in (refused.details() or "")
    assert [field for field, _ in status_details(refused)[1]] == ["runtime"]


async def test_sessions_are_only_opened_with_primary_agents(env: Env) -> None:
    error = await rpc_error(env.gateway.CreateSession(gateway_pb2.CreateSessionRequest(agent="helper")))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    _, violations = status_details(error)
    assert violations[0][0] == "agent" and "subagent" in violations[0][1]
    listed = await env.gateway.ListAgents(gateway_pb2.ListAgentsRequest(), timeout=TIMEOUT_S)
    modes = {a.name: a.mode for a in listed.agents}
    assert modes["helper"] != modes["boss"]


async def test_an_interceptor_that_requires_approval_pauses_the_call_like_interrupt_on(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """HITLInterceptor (seed 002): the policy asks for a human; the same approval events and answers follow."""
    tmp = tmp_path_factory.mktemp("hitl")
    policy_dir = tmp / "policy"
    shutil.copytree(Path(DEFAULT_AGENTS_DIR).parent / "policy", policy_dir)
    (policy_dir / "interceptors.yaml").write_text(
        "interceptors:\n  - {type: HITLInterceptor, tools: [calculator], description: 'ops must approve {tool}'}\n"
    )
    async with agents_suite(tmp, policy_dir=policy_dir) as hitl:
        session_id = await new_session(hitl.gateway)  # the default agent: no interrupt_on of its own
        paused = await stream(hitl.gateway.SendMessage(message(session_id, "What is 6 * 7?"), timeout=TIMEOUT_S))
        assert kinds(paused)[-2:] == ["approval_required", "status"]
        approval = paused[-2].approval_required
        assert approval.action_name == "calculator" and approval.description == "ops must approve calculator"
        assert "tool_call_finished" not in kinds(paused)  # nothing ran before the answer
        reject = gateway_pb2.ResolveApprovalRequest(
            session_id=session_id,
            interrupt_id=approval.interrupt_id,
            decision=events_pb2.APPROVAL_DECISION_REJECT,
            reason="not now",
        )
        rejected = await stream(hitl.gateway.ResolveApproval(reject, timeout=TIMEOUT_S))
        assert "rejected this call: not now" in rejected[-1].final.text
        paused = await stream(hitl.gateway.SendMessage(message(session_id, "What is 6 * 7?"), timeout=TIMEOUT_S))
        approve = gateway_pb2.ResolveApprovalRequest(
            session_id=session_id,
            interrupt_id=paused[-1].status.interrupt_id,
            decision=events_pb2.APPROVAL_DECISION_APPROVE,
        )
        resumed = await stream(hitl.gateway.ResolveApproval(approve, timeout=TIMEOUT_S))
        assert only(resumed, "tool_call_finished").result_summary == "42"
        assert resumed[-1].final.text == "6 * 7 = 42."
