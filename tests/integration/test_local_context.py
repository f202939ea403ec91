"""The system prompt built in the runtime's process (services/runtime/local_context.py).

The runtime answers BuildContext with the context service's own library, so (a) its answer
to every request equals the service's, field for field and error for error; (b) a turn makes
no ContextService call and its model gets the prompt the service would have built; (c) a
prompt file edited on disk reaches the next turn; (d) compaction still goes to the context
service, and the prompt rebuilt with the new summary is built locally.

Calls are counted with the servers' own RPC metrics: the suite runs in this process. The
model is the OpenAI SDK against a local fake that records each request's system prompt.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from grpc_status import rpc_status

from cogmesh.common.v1 import messages_pb2
from cogmesh.context.v1 import context_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.memory.v1 import memory_pb2, memory_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2
from services.kit.errors import CogmeshError
from services.lib.agents import DEFAULT_AGENTS_DIR, AgentRegistry
from services.lib.context.builder import RECALLED_HEADING
from services.lib.context.prompt_files import PromptFiles
from services.lib.tokens import ScriptAwareCounter
from services.runtime.local_context import LocalContext
from services.suite.inprocess import Suite, start_suite
from tests.fakes.providers import Call, FakeOpenAI, Reply
from tests.integration.conftest import STUB_CLASSES, SUITE_SETTINGS, TIMEOUT_S
from tests.integration.test_data_plane import served

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]

# An agent of its own prompt folder, which (c) edits while the suite runs.
EDITED = """
name: edited
prompts_dir: edited
model: gpt-4o
default_role: assistant
"""
# Compaction on a small budget (as in test_runtime_context), summarized by the built-in model.
LONG = """
name: long
prompts_dir: default
model: gpt-4o
tools: [calculator]
default_role: assistant
compaction: {max_tokens: 700, context_token_limit: 300, summary_token_limit: 80, model: local}
"""
# The memory context pack: the runtime recalls before building the prompt.
KEEPER = """
name: keeper
system_prompt: You remember things about the user.
model: gpt-4o
tools: [save_memory]
memory: {context: {enabled: true, limit: 3, max_tokens: 200, timeout_ms: 60000}}
"""
FILLER = "The quarterly report covers revenue, costs and the outlook for the next year in detail. "
SUMMARY = "The user asked for the quarterly figures; the assistant computed 17 * 23 = 391 with the calculator."
RECALLED = [("m_1", "Prefers dark roast coffee"), ("", "Lives in Lisbon, works on\n  the billing team")]


@dataclass
class Env:
    suite: Suite
    stubs: dict[str, Any]
    openai: FakeOpenAI
    agents_dir: Path
    memory: memory_pb2_grpc.MemoryServiceStub  # the gateway's

    @property
    def gateway(self) -> Any:
        return self.stubs["gateway"]

    @property
    def local(self) -> LocalContext:
        local = self.suite.servers["runtime"].app.mounts[0].servicer.builder.local_context
        assert isinstance(local, LocalContext), "the runtime builds no prompt in process"
        return local

    async def remote(self, request: context_pb2.BuildContextRequest) -> context_pb2.BuildContextResponse:
        return await self.stubs["context"].BuildContext(request, timeout=TIMEOUT_S)  # type: ignore[no-any-return]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    tmp = tmp_path_factory.mktemp("local_context")
    agents_dir = tmp / "agents"
    shutil.copytree(DEFAULT_AGENTS_DIR, agents_dir)
    (agents_dir / "edited" / "roles").mkdir(parents=True)
    (agents_dir / "edited" / "identity.md").write_text("You are Edith, version one.\n")
    (agents_dir / "edited" / "roles" / "assistant.md").write_text("Answer briefly.\n")
    for name, text in {"edited.yaml": EDITED, "long.yaml": LONG, "keeper.yaml": KEEPER}.items():
        (agents_dir / name).write_text(text)
    async with FakeOpenAI() as openai:
        (tmp / "key").write_text("sk-local-context\n")
        (tmp / "providers.yaml").write_text(
            f"providers:\n  openai: {{base_url: '{openai.url}/v1', api_key_file: key}}\n"
        )
        # Not the default counter: the runtime must count with the suite's setting, as the service does.
        settings = SUITE_SETTINGS.model_copy(
            update={"agents_dir": agents_dir, "providers_file": tmp / "providers.yaml", "token_counter": "script"}
        )
        suite = await start_suite(settings)
        channels = {name: grpc.aio.insecure_channel(s.address) for name, s in suite.servers.items()}
        try:
            stubs = {name: STUB_CLASSES[name](channel) for name, channel in channels.items()}
            memory = memory_pb2_grpc.MemoryServiceStub(channels["gateway"])
            yield Env(suite, stubs, openai, agents_dir, memory)
        finally:
            for channel in channels.values():
                await channel.close()
            await suite.stop(0)


def system_prompt(openai: FakeOpenAI, index: int = -1) -> str:
    messages = openai.model_requests[index].json()["messages"]
    assert messages[0]["role"] == "system"
    return str(messages[0]["content"])


async def turn(env: Env, session_id: str, text: str) -> list[Any]:
    request = gateway_pb2.SendMessageRequest(session_id=session_id, content=text)
    events = [e async for r in env.gateway.SendMessage(request, timeout=TIMEOUT_S) for e in r.events]
    assert events[-1].HasField("final"), events[-1]
    return events


async def session(env: Env, agent: str, **scope: str) -> str:
    request = gateway_pb2.CreateSessionRequest(agent=agent, scope=scope)
    return (await env.gateway.CreateSession(request, timeout=TIMEOUT_S)).session.session_id  # type: ignore[no-any-return]


def context_calls(before: Any) -> dict[str, int]:
    return {name: count for name, count in (served() - before).items() if name.startswith("ContextService/")}


def requests_for(registry: AgentRegistry, name: str) -> list[context_pb2.BuildContextRequest]:
    """What the runtime asks for an agent (each role, with and without a summary and memories), and more."""
    agent = registry.get(name)
    roles = {"", agent.default_role} | set(PromptFiles().roles(agent.prompts_dir) if agent.prompts_dir else [])
    requests = []
    for role in sorted(roles):
        for summary in ("", SUMMARY):
            for recalled in ([], RECALLED):
                request = context_pb2.BuildContextRequest(
                    agent=name, role_id=role, user_text="What is 17 * 23?", summary=summary
                )
                if recalled:
                    request.recalled_memories.extend(context_pb2.RecalledMemory(key=k, text=t) for k, t in recalled)
                    request.budget.recalled_memories_max = agent.memory.context.max_tokens
                requests.append(request)
    # Every other field, with caps small enough that packs are truncated and dropped.
    everything = context_pb2.BuildContextRequest(
        agent=name,
        role_id=agent.default_role,
        goal="Close the quarter's books " * 20,
        phase="review",
        skill_instructions=["Use the calculator for arithmetic.", "Cite the report's page."],
        last_messages=[
            *(messages_pb2.Message(role=messages_pb2.ROLE_USER, content=f"message {i}: {FILLER}") for i in range(12)),
            messages_pb2.Message(
                role=messages_pb2.ROLE_ASSISTANT, tool_calls=[messages_pb2.ToolCall(name="calculator")]
            ),
            messages_pb2.Message(role=messages_pb2.ROLE_TOOL, name="calculator", content="391"),
            messages_pb2.Message(role=messages_pb2.ROLE_ASSISTANT, content="Error: the tool timed out"),
        ],
        memory={"project": "billing", "quarter": "Q3"},
        user_profile={"name": "Alice", "locale": "pt-PT"},
        summary=SUMMARY * 30,
        recalled_memories=[context_pb2.RecalledMemory(key=k, text=t) for k, t in RECALLED],
        budget=context_pb2.ContextBudget(goal_max=12, messages_max=60, summary_max=40, recalled_memories_max=8),
    )
    return [*requests, everything]


async def test_local_answers_equal_the_context_services_for_every_shipped_agent_and_role(env: Env) -> None:
    registry = AgentRegistry.load_dir(env.agents_dir)
    shipped = AgentRegistry.load_dir(DEFAULT_AGENTS_DIR).names()
    assert shipped and set(shipped) <= set(registry.names())
    assert isinstance(env.local.builder.counter, ScriptAwareCounter)  # COGMESH_TOKEN_COUNTER, as the service
    compared = 0
    for name in registry.names():
        for request in requests_for(registry, name):
            local = await env.local.BuildContext(request)
            assert local == await env.remote(request), (name, request.role_id)
            assert local.system_prompt and len(local.prompt_hash) == 16
            compared += 1
    assert compared >= 5 * len(shipped) * 2  # each agent: roles x summary x memories + one with every field
    # The default agent's prompt really has its role, summary and memories in it.
    request = requests_for(registry, "default")[-2]  # role "assistant", summary, memories
    built = await env.local.BuildContext(request)
    assert "## Role: assistant" in built.system_prompt and SUMMARY in built.system_prompt
    assert f"## {RECALLED_HEADING}\n- [m_1] Prefers dark roast coffee" in built.system_prompt

    # A bad request fails the same way: same code, message and details (BadRequest, ErrorInfo).
    bad = [
        context_pb2.BuildContextRequest(agent="nobody"),
        context_pb2.BuildContextRequest(agent="default", role_id="no such role!"),
        context_pb2.BuildContextRequest(agent="default", budget=context_pb2.ContextBudget(total_tokens=5)),
        context_pb2.BuildContextRequest(agent="default", recalled_memories=[context_pb2.RecalledMemory(text=" ")]),
        context_pb2.BuildContextRequest(),
    ]
    for request in bad:
        with pytest.raises(CogmeshError) as local_error:
            await env.local.BuildContext(request)
        with pytest.raises(grpc.aio.AioRpcError) as remote_error:
            await env.remote(request)
        assert local_error.value.to_status() == rpc_status.from_call(remote_error.value), request  # type: ignore[arg-type]
    # Rehydration reads the session: the runtime leaves it to the service.
    assert not LocalContext.answers(context_pb2.BuildContextRequest(agent="default", rehydrate=True))


async def test_a_turn_makes_no_context_call_and_its_model_gets_the_services_prompt(env: Env) -> None:
    openai = env.openai
    session_id = await session(env, "edited")
    before = served()
    await turn(env, session_id, "hello there")
    await turn(env, session_id, "and again")
    assert context_calls(before) == {}
    expected = await env.remote(
        context_pb2.BuildContextRequest(agent="edited", role_id="assistant", user_text="and again")
    )
    assert system_prompt(openai) == expected.system_prompt
    assert "You are Edith, version one." in expected.system_prompt and "Answer briefly." in expected.system_prompt

    # With the memory context pack: a memory saved in one session is recalled into the next one's prompt.
    first = await session(env, "keeper", end_user="alice")
    openai.then(
        Reply(calls=[Call("save_memory", [json.dumps({"text": "Prefers dark roast coffee"})], id="call_save")]),
        Reply(text=["Ok."]),
    )
    await turn(env, first, "Remember that I like dark roast.")
    saved = await env.memory.ListMemories(
        memory_pb2.ListMemoriesRequest(namespace_prefix=["end_user=alice", "memories"]), timeout=TIMEOUT_S
    )
    assert [m.text for m in saved.memories] == ["Prefers dark roast coffee"]
    second = await session(env, "keeper", end_user="alice")
    before = served()
    await turn(env, second, "Which coffee should I order?")
    assert context_calls(before) == {}
    request = context_pb2.BuildContextRequest(agent="keeper", user_text="Which coffee should I order?")
    request.recalled_memories.add(key=saved.memories[0].key, text="Prefers dark roast coffee")
    request.budget.recalled_memories_max = 200
    expected = await env.remote(request)
    assert system_prompt(openai) == expected.system_prompt and RECALLED_HEADING in expected.system_prompt

    # A subagent's prompt (planner delegates to arithmetic, built-in model) is built in process too.
    planner = await session(env, "planner")
    before = served()
    events = await turn(env, planner, '@task {"agent": "arithmetic", "task": "What is 6 * 7?"}')
    assert any(e.HasField("delegation") for e in events)
    assert context_calls(before) == {}


async def test_a_prompt_file_edited_on_disk_reaches_the_next_turn(env: Env) -> None:
    openai, folder = env.openai, env.agents_dir / "edited"
    session_id = await session(env, "edited")
    await turn(env, session_id, "who are you?")
    assert "version one" in system_prompt(openai)

    (folder / "identity.md").write_text("You are Edith, version two, after an edit.\n")
    (folder / "guardrails.md").write_text("Never share the billing codes.\n")
    before = served()
    await turn(env, session_id, "and now?")
    prompt = system_prompt(openai)
    assert "version two, after an edit" in prompt and "version one" not in prompt
    assert "## Guardrails\nNever share the billing codes." in prompt
    assert context_calls(before) == {}
    request = context_pb2.BuildContextRequest(agent="edited", role_id="assistant", user_text="and now?")
    assert prompt == (await env.remote(request)).system_prompt  # the service reads the edit too

    # A role file added on disk is a role at once, here as in the service.
    (folder / "roles" / "auditor.md").write_text("Check every figure twice.\n")
    request = context_pb2.BuildContextRequest(agent="edited", role_id="auditor")
    local = await env.local.BuildContext(request)
    assert "## Role: auditor\nCheck every figure twice." in local.system_prompt
    assert local == await env.remote(request)


async def test_compaction_goes_to_the_context_service_and_the_rebuilt_prompt_is_local(env: Env) -> None:
    openai = env.openai
    session_id = await session(env, "long")
    before = served()
    compacted = None
    for i in range(8):
        text = f"Part {i}: {FILLER * 4}"
        events = await turn(env, session_id, text)
        compacted = next((e for e in events if e.HasField("context_compacted")), None)
        if compacted is not None:
            break
    assert compacted is not None, "the conversation never reached its compaction budget"
    calls = context_calls(before)
    assert calls.get("ContextService/CompactHistory", 0) >= 1 and "ContextService/BuildContext" not in calls, calls

    stored = await env.stubs["sessions"].GetRehydrationPayload(
        sessions_pb2.GetRehydrationPayloadRequest(tenant_id=SUITE_SETTINGS.tenant_id, session_id=session_id),
        timeout=TIMEOUT_S,
    )
    assert stored.summary.text
    # The model call right after compaction got the prompt rebuilt with the new summary: the service's.
    request = context_pb2.BuildContextRequest(
        agent="long", role_id="assistant", user_text=text, summary=stored.summary.text
    )
    expected = await env.remote(request)
    assert system_prompt(openai) == expected.system_prompt
    assert "## Summary\n" in expected.system_prompt
