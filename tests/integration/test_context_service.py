"""ContextService over gRPC with the real suite: budgets and bad input, rehydration from the
sessions service, compaction with summary storage, and the tool-result archive."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import struct_pb2

from cogmesh.common.v1 import messages_pb2
from cogmesh.context.v1 import context_pb2, context_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from services.context import main as context_main
from services.kit.server import App, RunningServer, mount, start
from services.models import main as models_main
from services.sessions import main as sessions_main
from services.sessions.servicer import SessionsServicer
from services.sessions.store import MemorySessionStore
from services.suite.settings import SuiteSettings
from tests.integration.conftest import SUITE_SETTINGS, status_details

pytestmark = pytest.mark.asyncio(loop_scope="module")

TENANT = SUITE_SETTINGS.tenant_id
USER, ASSISTANT, TOOL = messages_pb2.ROLE_USER, messages_pb2.ROLE_ASSISTANT, messages_pb2.ROLE_TOOL


async def expect_invalid(call: Any, request: Any, *fields: str) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(request)
    err = caught.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    info, violations = status_details(err)
    assert info is not None and info.reason == "INVALID_ARGUMENT"
    assert sorted(f for f, _ in violations) == sorted(fields), violations
    return err.details() or ""


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def stubs() -> AsyncIterator[dict[str, Any]]:
    """Models and sessions, then context pointed at them (context calls both)."""
    async with context_with_dependencies(SUITE_SETTINGS) as found:
        yield found


@contextlib.asynccontextmanager
async def context_with_dependencies(settings: SuiteSettings) -> AsyncIterator[dict[str, Any]]:
    servers: list[RunningServer] = []
    channels: list[grpc.aio.Channel] = []
    try:
        models = await start(models_main.build, settings, "127.0.0.1:0")
        servers.append(models)
        sessions = await start(sessions_main.build, settings, "127.0.0.1:0")
        servers.append(sessions)
        wired = settings.model_copy(update={"models_addr": models.address, "sessions_addr": sessions.address})
        context = await start(context_main.build, wired, "127.0.0.1:0")
        servers.append(context)
        channels = [grpc.aio.insecure_channel(s.address) for s in (sessions, context)]
        yield {
            "sessions": sessions_pb2_grpc.SessionsServiceStub(channels[0]),
            "context": context_pb2_grpc.ContextServiceStub(channels[1]),
        }
    finally:
        for channel in channels:
            await channel.close()
        for server in reversed(servers):
            await server.stop(0)


# --------------------------------------------------------------------------- BuildContext


async def test_build_context_reports_packs_hash_and_tool_budget(stubs: dict[str, Any]) -> None:
    reply = await stubs["context"].BuildContext(
        context_pb2.BuildContextRequest(
            agent="default",
            goal="Help with arithmetic",
            phase="warm-up",
            skill_instructions=[f"skill {i}: " + "do things carefully " * 30 for i in range(20)],
            last_messages=[
                messages_pb2.Message(role=USER, content="What is 2+2?"),
                messages_pb2.Message(role=ASSISTANT, content="error: the provider timed out"),
                messages_pb2.Message(role=ASSISTANT, content="2+2 = 4."),
            ],
            summary="The user likes short answers.",
            budget=context_pb2.ContextBudget(total_tokens=2000, tools_max=300),
        )
    )
    assert len(reply.prompt_hash) == 16
    assert "## Goal\nHelp with arithmetic" in reply.system_prompt
    assert "2+2 = 4." in reply.system_prompt and "timed out" not in reply.system_prompt
    actions = {p.name: p.action for p in reply.packs}
    assert actions["skills"] == context_pb2.PACK_ACTION_TRUNCATED
    assert "skills" in reply.truncated_packs
    assert reply.tool_budget_tokens == 2000 - reply.tokens_used
    skills = next(p for p in reply.packs if p.name == "skills")
    assert skills.tokens <= 300 + 5  # the cap covers the body; the heading adds a few tokens
    assert [p.priority for p in reply.packs] == sorted(
        (p.priority for p in reply.packs), key=lambda x: float(x.lstrip("P"))
    )


async def test_pack_cap_larger_than_the_whole_budget_is_invalid(stubs: dict[str, Any]) -> None:
    details = await expect_invalid(
        stubs["context"].BuildContext,
        context_pb2.BuildContextRequest(
            agent="default", budget=context_pb2.ContextBudget(total_tokens=500, goal_max=600, summary_max=501)
        ),
        "budget.goal_max",
        "budget.summary_max",
    )
    assert "larger than the whole budget" in details


async def test_budget_too_small_for_the_never_dropped_packs_is_invalid(stubs: dict[str, Any]) -> None:
    details = await expect_invalid(
        stubs["context"].BuildContext,
        context_pb2.BuildContextRequest(
            agent="default", budget=context_pb2.ContextBudget(total_tokens=5, guardrails_reserved=1)
        ),
        "budget.total_tokens",
    )
    assert "never dropped" in details


async def test_small_total_clamps_default_caps_instead_of_failing(stubs: dict[str, Any]) -> None:
    reply = await stubs["context"].BuildContext(
        context_pb2.BuildContextRequest(
            agent="default", goal="g " * 2000, budget=context_pb2.ContextBudget(total_tokens=900)
        )
    )
    assert reply.tokens_used <= 900 and "goal" in reply.truncated_packs


async def test_rehydrate_needs_a_session(stubs: dict[str, Any]) -> None:
    await expect_invalid(
        stubs["context"].BuildContext,
        context_pb2.BuildContextRequest(agent="default", rehydrate=True, rehydrate_last_n=5000),
        "rehydrate_last_n",
    )
    # The fields' rules first (context.proto), then what rehydrating needs.
    await expect_invalid(
        stubs["context"].BuildContext,
        context_pb2.BuildContextRequest(agent="default", rehydrate=True),
        "tenant_id",
        "session_id",
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stubs["context"].BuildContext(
            context_pb2.BuildContextRequest(
                agent="default", rehydrate=True, tenant_id=TENANT, session_id=uuid.uuid4().hex
            )
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    info, _ = status_details(caught.value)
    assert info is not None and info.reason == "SESSION_NOT_FOUND"


async def new_session_with_lease(sessions: Any) -> tuple[str, int]:
    created = await sessions.CreateSession(
        sessions_pb2.CreateSessionRequest(tenant_id=TENANT, agent="default", user_id="u1", topic_id=uuid.uuid4().hex)
    )
    session_id = created.session.session_id
    lease = await sessions.AcquireTurnLease(
        sessions_pb2.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=session_id, turn_id="t1")
    )
    return session_id, lease.lease_token


async def test_first_turn_after_restart_is_rebuilt_from_the_sessions_service(stubs: dict[str, Any]) -> None:
    sessions, context = stubs["sessions"], stubs["context"]
    session_id, token = await new_session_with_lease(sessions)
    await sessions.AppendMessages(
        sessions_pb2.AppendMessagesRequest(
            tenant_id=TENANT,
            session_id=session_id,
            lease_token=token,
            messages=[
                messages_pb2.Message(role=USER, content="I want to open a deposit"),
                messages_pb2.Message(role=ASSISTANT, content="error: provider failed"),
                messages_pb2.Message(role=ASSISTANT, content="Which currency?"),
                messages_pb2.Message(role=USER, content="Euros, for a year."),
            ],
        )
    )
    await sessions.UpdateSummary(
        sessions_pb2.UpdateSummaryRequest(
            tenant_id=TENANT, session_id=session_id, text="User compared three banks.", covered_message_count=1
        )
    )
    data = struct_pb2.Struct()
    data.update({"currency": "EUR"})
    await sessions.SaveGoal(
        sessions_pb2.SaveGoalRequest(
            tenant_id=TENANT, session_id=session_id, goal=sessions_pb2.Goal(text="Open a deposit", data=data)
        )
    )
    await sessions.SetPhase(
        sessions_pb2.SetPhaseRequest(
            tenant_id=TENANT, session_id=session_id, phase=sessions_pb2.PhaseState(phase="recommendation")
        )
    )

    reply = await context.BuildContext(
        context_pb2.BuildContextRequest(
            agent="default", tenant_id=TENANT, session_id=session_id, rehydrate=True, rehydrate_last_n=3
        )
    )

    prompt = reply.system_prompt
    assert "## Summary\nUser compared three banks." in prompt
    assert "## Goal\nOpen a deposit\ncurrency: EUR" in prompt
    assert "## Phase\nrecommendation" in prompt
    assert "user: Euros, for a year." in prompt and "Which currency?" in prompt
    assert "I want to open a deposit" not in prompt  # only the last 3 messages
    assert "provider failed" not in prompt  # error messages filtered
    report = reply.rehydration
    assert (report.summary_loaded, report.goal_loaded, report.phase_loaded, report.messages_loaded) == (
        True,
        True,
        True,
        3,
    )
    assert list(report.unavailable) == []

    # A caller that sends the transcript as chat messages gets the rest without them.
    lean = await context.BuildContext(
        context_pb2.BuildContextRequest(
            agent="default", tenant_id=TENANT, session_id=session_id, rehydrate=True, rehydrate_without_messages=True
        )
    )
    assert "## Summary\nUser compared three banks." in lean.system_prompt
    assert "Euros, for a year." not in lean.system_prompt and lean.rehydration.messages_loaded == 0

    # Without rehydration the same request has none of it, and no report.
    bare = await context.BuildContext(context_pb2.BuildContextRequest(agent="default"))
    assert "Summary" not in bare.system_prompt and not bare.HasField("rehydration")


# --------------------------------------------------------------------------- CompactHistory


def long_transcript(turns: int, result_chars: int = 2000) -> list[messages_pb2.Message]:
    out = []
    for i in range(turns):
        call_id = f"call_{i}"
        args = struct_pb2.Struct()
        args.update({"expression": f"{i} * 7"})
        out += [
            messages_pb2.Message(role=USER, content=f"Turn {i}: what is {i} * 7?", turn_id=f"t{i}"),
            messages_pb2.Message(
                role=ASSISTANT,
                tool_calls=[messages_pb2.ToolCall(id=call_id, name="calculator", arguments=args)],
                turn_id=f"t{i}",
            ),
            messages_pb2.Message(
                role=TOOL,
                content=f"{i * 7} " + "x" * result_chars,
                tool_call_id=call_id,
                name="calculator",
                turn_id=f"t{i}",
            ),
            messages_pb2.Message(role=ASSISTANT, content=f"{i} * 7 = {i * 7}.", turn_id=f"t{i}"),
        ]
    return out


async def test_compaction_summarizes_archives_and_stores_the_summary(stubs: dict[str, Any]) -> None:
    sessions, context = stubs["sessions"], stubs["context"]
    session_id, token = await new_session_with_lease(sessions)
    transcript = long_transcript(12)
    await sessions.AppendMessages(
        sessions_pb2.AppendMessagesRequest(
            tenant_id=TENANT, session_id=session_id, lease_token=token, messages=transcript
        )
    )
    limits = context_pb2.CompactionLimits(max_tokens=3000, context_token_limit=1500, summary_token_limit=300)

    reply = await context.CompactHistory(
        context_pb2.CompactHistoryRequest(
            tenant_id=TENANT,
            session_id=session_id,
            agent="default",
            messages=transcript,
            limits=limits,
            store_summary=True,
            lease_token=token,
        )
    )

    assert reply.compacted and reply.summarizer == "extractive:cogmesh-local"
    assert reply.tokens_before > 3000 and reply.tokens_after <= 1500
    assert reply.event.summary_tokens == reply.summary_tokens <= 300
    assert reply.event.archived_count == len(reply.archived) > 0
    assert reply.summarized_messages + len(reply.messages) == len(transcript)
    assert reply.covered_message_count == reply.summarized_messages
    kept_originals = transcript[reply.summarized_messages :]
    assert [m.turn_id for m in reply.messages] == [m.turn_id for m in kept_originals]
    assert reply.messages[0].role == USER

    for archived in reply.archived:
        original = next(m for m in transcript if m.tool_call_id == archived.tool_call_id)
        got = await context.GetToolResponse(
            context_pb2.GetToolResponseRequest(
                tenant_id=TENANT, session_id=session_id, execution_id=archived.execution_id
            )
        )
        assert (got.content, got.tool_name, got.tool_call_id) == (original.content, "calculator", archived.tool_call_id)
    # The summary points at archived results by execution id, so the model can ask for them.
    named = re.findall(r"executionId:'([^']+)'", reply.summary)
    assert named and set(named) <= {a.execution_id for a in reply.archived}

    assert reply.summary_stored is True
    payload = await sessions.GetRehydrationPayload(
        sessions_pb2.GetRehydrationPayloadRequest(tenant_id=TENANT, session_id=session_id)
    )
    assert payload.summary.text == reply.summary
    assert payload.summary.covered_message_count == reply.summarized_messages

    # Within budget: nothing changes and nothing is stored or archived.
    small = await context.CompactHistory(
        context_pb2.CompactHistoryRequest(
            tenant_id=TENANT,
            session_id=session_id,
            agent="default",
            messages=list(reply.messages),
            summary=reply.summary,
            limits=limits,
        )
    )
    assert not small.compacted and not small.HasField("event") and list(small.messages) == list(reply.messages)


async def test_compaction_bad_input_names_fields(stubs: dict[str, Any]) -> None:
    compact = stubs["context"].CompactHistory
    await expect_invalid(compact, context_pb2.CompactHistoryRequest(), "tenant_id", "session_id", "agent")
    await expect_invalid(
        compact,
        context_pb2.CompactHistoryRequest(
            tenant_id=TENANT,
            session_id="s",
            agent="default",
            messages=[messages_pb2.Message(content="no role")],
            limits=context_pb2.CompactionLimits(max_tokens=-1, chunk_tokens=-2),
        ),
        "limits.max_tokens",
        "limits.chunk_tokens",
    )
    await expect_invalid(  # the fields' rules kept, a message's own problems
        compact,
        context_pb2.CompactHistoryRequest(
            tenant_id=TENANT, session_id="s", agent="default", messages=[messages_pb2.Message(content="no role")]
        ),
        "messages[0].role",
    )
    # A summary as large as the whole transcript budget cannot work.
    await expect_invalid(
        compact,
        context_pb2.CompactHistoryRequest(
            tenant_id=TENANT,
            session_id="s",
            agent="default",
            limits=context_pb2.CompactionLimits(max_tokens=1000, context_token_limit=2000, summary_token_limit=2000),
        ),
        "limits.context_token_limit",
        "limits.summary_token_limit",
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await compact(context_pb2.CompactHistoryRequest(tenant_id=TENANT, session_id="s", agent="nobody"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_get_tool_response_bad_input_and_unknown_id(stubs: dict[str, Any]) -> None:
    get = stubs["context"].GetToolResponse
    await expect_invalid(get, context_pb2.GetToolResponseRequest(), "tenant_id", "session_id", "execution_id")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await get(context_pb2.GetToolResponseRequest(tenant_id=TENANT, session_id="s", execution_id="nope"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "nope" in (caught.value.details() or "")


# --------------------------------------------------------------------------- an older sessions service


class SessionsWithoutSummaries(SessionsServicer):
    """The sessions service as it was before rehydration payloads and summaries: those RPCs are UNIMPLEMENTED."""

    async def GetRehydrationPayload(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")

    async def UpdateSummary(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")


async def test_older_sessions_service_degrades_without_failing_turns() -> None:
    async def build_old_sessions(settings: SuiteSettings, clients: Any) -> App:
        servicer = SessionsWithoutSummaries(MemorySessionStore())
        return App("sessions", [mount(servicer, sessions_pb2, sessions_pb2_grpc, "SessionsService")])

    models = await start(models_main.build, SUITE_SETTINGS, "127.0.0.1:0")
    sessions = await start(build_old_sessions, SUITE_SETTINGS, "127.0.0.1:0")
    wired = SUITE_SETTINGS.model_copy(update={"models_addr": models.address, "sessions_addr": sessions.address})
    context = await start(context_main.build, wired, "127.0.0.1:0")
    channels = [grpc.aio.insecure_channel(s.address) for s in (sessions, context)]
    try:
        old = sessions_pb2_grpc.SessionsServiceStub(channels[0])
        stub = context_pb2_grpc.ContextServiceStub(channels[1])
        session_id, token = await new_session_with_lease(old)
        transcript = long_transcript(12)
        await old.AppendMessages(
            sessions_pb2.AppendMessagesRequest(
                tenant_id=TENANT, session_id=session_id, lease_token=token, messages=transcript
            )
        )

        built = await stub.BuildContext(
            context_pb2.BuildContextRequest(agent="default", tenant_id=TENANT, session_id=session_id, rehydrate=True)
        )
        assert list(built.rehydration.unavailable) == ["summary", "goal", "phase"]
        assert built.rehydration.messages_loaded == 10 and "11 * 7 = 77." in built.system_prompt

        compacted = await stub.CompactHistory(
            context_pb2.CompactHistoryRequest(
                tenant_id=TENANT,
                session_id=session_id,
                agent="default",
                messages=transcript,
                limits=context_pb2.CompactionLimits(max_tokens=3000, context_token_limit=1500),
                store_summary=True,
            )
        )
        assert compacted.compacted and compacted.summary and compacted.summary_stored is False
    finally:
        for channel in channels:
            await channel.close()
        for server in (context, sessions, models):
            await server.stop(0)
