"""The context service wired into the runtime's loop: compaction of a long conversation before a model
call (the summary stored and put into the system prompt), get_tool_response for archived results, and
rehydration of the session on the first turn a fresh runtime replica runs.

The model is served through the OpenAI SDK by a local fake that records every request, so the test
sees exactly what the model was sent: the system prompt and the live transcript.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import pytest_asyncio

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2
from gateway import main as gateway_main
from services.kit.server import RunningServer, start
from services.runtime import main as runtime_main
from tests.fakes.providers import Call, FakeOpenAI, Reply
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session
from tests.integration.test_pause_resume import Env, agents_suite, message, stream

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]

LONG = """
name: long
prompts_dir: default
model: gpt-4o
tools: [calculator]
default_role: assistant
compaction: {max_tokens: 700, context_token_limit: 300, summary_token_limit: 80, model: local}
"""
FILLER = "The quarterly report covers revenue, costs and the outlook for the next year in detail. "


@dataclass
class ContextEnv:
    env: Env
    openai: FakeOpenAI
    settings: Any


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def ctx(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ContextEnv]:
    tmp = tmp_path_factory.mktemp("context")
    async with FakeOpenAI() as openai:
        (tmp / "key").write_text("sk-test\n")
        (tmp / "providers.yaml").write_text(
            f"providers:\n  openai: {{base_url: '{openai.url}/v1', api_key_file: key}}\n"
        )
        async with agents_suite(tmp, agent_files={"long.yaml": LONG}, providers_file=tmp / "providers.yaml") as env:
            settings = SUITE_SETTINGS.model_copy(
                update={
                    "agents_dir": tmp / "agents",
                    "providers_file": tmp / "providers.yaml",
                    **{f"{n}_addr": env.suite.servers[n].address for n in ("models", "sessions", "context", "policy")},
                }
            )
            yield ContextEnv(env, openai, settings)


def sent(openai: FakeOpenAI, index: int = -1) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt, the other messages) of a model request."""
    body = openai.model_requests[index].json()
    messages = body["messages"]
    assert messages[0]["role"] == "system"
    return messages[0]["content"], messages[1:]


async def rehydration(ctx: ContextEnv, session_id: str) -> Any:
    return await ctx.env.stubs["sessions"].GetRehydrationPayload(
        sessions_pb2.GetRehydrationPayloadRequest(tenant_id=SUITE_SETTINGS.tenant_id, session_id=session_id),
        timeout=TIMEOUT_S,
    )


async def test_a_long_conversation_is_compacted_and_a_fresh_replica_rehydrates_it(ctx: ContextEnv) -> None:
    gateway, openai = ctx.env.gateway, ctx.openai
    session_id = await new_session(gateway, agent="long")

    # A tool turn first: its result is what compaction archives later.
    openai.then(
        Reply(calls=[Call("calculator", ['{"expression": "', '17 * 23"}'], id="call_calc")]), Reply(text=["391."])
    )
    first = await stream(gateway.SendMessage(message(session_id, "What is 17 * 23?"), timeout=TIMEOUT_S))
    assert first[-1].final.text == "391."

    compacted: list[events_pb2.ContextCompacted] = []
    for i in range(8):
        events = await stream(gateway.SendMessage(message(session_id, f"Part {i}: {FILLER * 4}"), timeout=TIMEOUT_S))
        assert events[-1].HasField("final"), events[-1]
        compacted += [e.context_compacted for e in events if e.HasField("context_compacted")]
        if compacted:
            break
    assert compacted, "the conversation never reached its compaction budget"
    assert compacted[0].summary_tokens > 0 and compacted[0].archived_count >= 1

    stored = await rehydration(ctx, session_id)
    assert stored.summary.text and stored.summary.covered_message_count > 0
    system, transcript = sent(openai)  # the call right after compaction
    assert stored.summary.text[:40] in system  # the new summary went into the system prompt
    assert len(transcript) < stored.session.message_count

    # The next turn on this replica: the remembered summary, only the messages after it.
    await stream(gateway.SendMessage(message(session_id, "And the outlook?"), timeout=TIMEOUT_S))
    system, transcript = sent(openai)
    assert stored.summary.text[:40] in system
    stored = await rehydration(ctx, session_id)
    assert len(transcript) == stored.session.message_count - 2 - stored.summary.covered_message_count + 1

    # The archived calculator result stays readable through get_tool_response.
    openai.then(
        Reply(calls=[Call("get_tool_response", ['{"execution_id": "call_calc"}'], id="call_read")]),
        Reply(text=["It was 391."]),
    )
    events = await stream(gateway.SendMessage(message(session_id, "What did the calculator say?"), timeout=TIMEOUT_S))
    offered = [t["function"]["name"] for t in openai.model_requests[-2].json()["tools"]]
    assert "get_tool_response" in offered
    read = next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))
    assert read.ok and read.result_summary == "391"

    # A fresh runtime replica (no memory of this session) and a gateway that uses it: the context
    # service rehydrates the session, so the prompt still carries the summary.
    runtime = await start(runtime_main.build, ctx.settings, "127.0.0.1:0")
    settings = ctx.settings.model_copy(update={"runtime_addr": runtime.address, "dev_mode": True})
    gateway2: RunningServer = await start(gateway_main.build, settings, "127.0.0.1:0")
    try:
        async with grpc.aio.insecure_channel(gateway2.address) as channel:
            other = gateway_pb2_grpc.GatewayServiceStub(channel)
            events = await stream(other.SendMessage(message(session_id, "Summarize, please."), timeout=TIMEOUT_S))
            assert events[-1].HasField("final")
        system, transcript = sent(openai)
        stored = await rehydration(ctx, session_id)
        assert stored.summary.text[:40] in system
        assert all(m.get("content") != "What is 17 * 23?" for m in transcript)  # covered: not resent
        # The live transcript reaches the model once, as chat messages, not again inside the prompt.
        assert any(m.get("content") == "What did the calculator say?" for m in transcript)
        assert "What did the calculator say?" not in system
    finally:
        await gateway2.stop(0)
        await runtime.stop(0)
