"""The memory tools and the memory context pack through the gateway, the runtime and the real memory
service: a fact saved in one session of an end user is found in the next session of the same end
user (by search_memories, and in the system prompt), never in another end user's or tenant's; the
model cannot pick the namespace; an agent without the pack makes no memory call at all.

The model is the OpenAI SDK against a local fake whose script decides the tool calls; every request
it receives is recorded, so the test reads the exact system prompt and tool results the model got.
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

from cogmesh.common.v1 import events_pb2
from cogmesh.context.v1 import context_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.memory.v1 import memory_pb2, memory_pb2_grpc
from gateway import main as gateway_main
from gateway.auth import hash_key
from services.kit.clients import Clients
from services.kit.server import start
from services.lib.agents import DEFAULT_AGENTS_DIR, AgentDefinition
from services.lib.context.builder import RECALLED_HEADING
from services.memory import main as memory_main
from services.runtime import main as runtime_main
from services.runtime.tools.base import ToolContext, ToolError
from services.runtime.tools.memory_tools import tools_for_agent
from services.suite.inprocess import Suite, start_suite
from tests.fakes.providers import Call, FakeOpenAI, Reply
from tests.integration.conftest import STUB_CLASSES, SUITE_SETTINGS, TIMEOUT_S
from tests.support.tcp_proxy import TcpProxy

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]

KEYS = {"key-acme": ("acme", "acme-app"), "key-globex": ("globex", "globex-app")}
KEEPER = """
name: keeper
system_prompt: You remember things about the user.
model: gpt-4o
tools: [save_memory, search_memories]
memory: {context: {enabled: true, limit: 3, max_tokens: 200, timeout_ms: 60000}}  # no deadline a busy machine meets
"""
# The memory tools without the pack, under other names.
PLAIN = """
name: plain
system_prompt: You help.
model: gpt-4o
tools: [remember, recall]
memory: {save_tool: remember, search_tool: recall, namespace: ["{end_user}", notes]}
"""
FACT = "Prefers dark roast coffee"


def bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


@dataclass
class Env:
    suite: Suite
    stubs: dict[str, Any]
    openai: FakeOpenAI
    settings: Any
    memory: memory_pb2_grpc.MemoryServiceStub  # the gateway's MemoryService

    @property
    def gateway(self) -> Any:
        return self.stubs["gateway"]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    tmp = tmp_path_factory.mktemp("memtools")
    agents_dir = tmp / "agents"
    shutil.copytree(DEFAULT_AGENTS_DIR, agents_dir)
    (agents_dir / "keeper.yaml").write_text(KEEPER)
    (agents_dir / "plain.yaml").write_text(PLAIN)
    (tmp / "keys.yaml").write_text(
        "keys:\n"
        + "".join(f"  - {{sha256: {hash_key(k)}, tenant: {t}, principal: {p}}}\n" for k, (t, p) in KEYS.items())
    )
    async with FakeOpenAI() as openai:
        (tmp / "key").write_text("sk-memtools\n")
        (tmp / "providers.yaml").write_text(
            f"providers:\n  openai: {{base_url: '{openai.url}/v1', api_key_file: key}}\n"
        )
        settings = SUITE_SETTINGS.model_copy(
            update={
                "agents_dir": agents_dir,
                "providers_file": tmp / "providers.yaml",
                "api_keys_file": tmp / "keys.yaml",
            }
        )
        suite = await start_suite(settings)
        channels = {name: grpc.aio.insecure_channel(s.address) for name, s in suite.servers.items()}
        try:
            stubs = {name: STUB_CLASSES[name](channel) for name, channel in channels.items()}
            settings = settings.model_copy(
                update={f"{n}_addr": suite.servers[n].address for n in ("models", "sessions", "context", "policy")}
            )
            yield Env(suite, stubs, openai, settings, memory_pb2_grpc.MemoryServiceStub(channels["gateway"]))
        finally:
            for channel in channels.values():
                await channel.close()
            await suite.stop(0)


async def session(gateway: Any, key: str, agent: str = "keeper", **scope: str) -> str:
    request = gateway_pb2.CreateSessionRequest(agent=agent, scope=scope)
    reply = await gateway.CreateSession(request, metadata=bearer(key), timeout=TIMEOUT_S)
    return reply.session.session_id  # type: ignore[no-any-return]


async def turn(gateway: Any, key: str, session_id: str, text: str) -> list[events_pb2.RuntimeEvent]:
    request = gateway_pb2.SendMessageRequest(session_id=session_id, content=text)
    events = [e async for r in gateway.SendMessage(request, metadata=bearer(key), timeout=TIMEOUT_S) for e in r.events]
    assert events[-1].HasField("final"), events[-1]
    return events


def calling(name: str, arguments: dict[str, Any], answer: str = "Done.") -> list[Reply]:
    return [Reply(calls=[Call(name, [json.dumps(arguments)], id=f"call_{name}")]), Reply(text=[answer])]


def system_prompt(openai: FakeOpenAI, index: int) -> str:
    messages = openai.model_requests[index].json()["messages"]
    assert messages[0]["role"] == "system"
    return str(messages[0]["content"])


def tool_result(openai: FakeOpenAI) -> str:
    """The tool result the model was sent in the last request."""
    messages = openai.model_requests[-1].json()["messages"]
    return str(next(m["content"] for m in reversed(messages) if m["role"] == "tool"))


def finished(events: list[events_pb2.RuntimeEvent]) -> events_pb2.ToolCallFinished:
    return next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))


def notices(events: list[events_pb2.RuntimeEvent]) -> list[tuple[str, str]]:
    return [(e.native_notice.kind, e.native_notice.text) for e in events if e.HasField("native_notice")]


async def memories(env: Env, key: str, *namespace: str) -> list[memory_pb2.Memory]:
    request = memory_pb2.ListMemoriesRequest(namespace_prefix=list(namespace))
    reply = await env.memory.ListMemories(request, metadata=bearer(key), timeout=TIMEOUT_S)
    return list(reply.memories)


async def test_a_fact_saved_in_one_session_is_found_in_the_next_session_of_the_same_end_user(env: Env) -> None:
    gw, openai = env.gateway, env.openai
    first = await session(gw, "key-acme", end_user="alice")
    openai.then(*calling("save_memory", {"text": FACT}, "Noted."))
    events = await turn(gw, "key-acme", first, "Remember that I like dark roast.")
    assert finished(events).ok, finished(events)
    assert tool_result(openai).startswith("Saved under key 'm_")
    assert RECALLED_HEADING not in system_prompt(openai, -2)  # nothing saved yet: no pack
    # The same fact again (other spacing and case) replaces it: still one memory.
    openai.then(*calling("save_memory", {"text": "prefers dark  roast coffee"}, "Noted."))
    await turn(gw, "key-acme", first, "I really like dark roast.")
    assert tool_result(openai).startswith("Updated the memory under key 'm_")
    saved = await memories(env, "key-acme", "end_user=alice", "memories")
    assert [m.text for m in saved] == ["prefers dark  roast coffee"]
    assert dict(saved[0].value.fields.items())["agent"].string_value == "keeper"

    # A new session of alice: the pack puts the fact into the system prompt, and the search tool finds it.
    second = await session(gw, "key-acme", end_user="alice")
    openai.then(*calling("search_memories", {"query": "coffee", "limit": 5}, "Dark roast."))
    events = await turn(gw, "key-acme", second, "Which coffee should I order?")
    assert finished(events).ok
    prompt = system_prompt(openai, -2)
    assert f"## {RECALLED_HEADING}\n- [{saved[0].key}] prefers dark roast coffee" in prompt
    assert tool_result(openai) == f"1 saved memory, best first:\n- [{saved[0].key}] prefers dark roast coffee"
    assert not notices(events)


async def test_another_end_user_or_tenant_finds_nothing_and_the_model_cannot_pick_the_namespace(env: Env) -> None:
    gw, openai = env.gateway, env.openai
    alice = await session(gw, "key-acme", end_user="alice")
    openai.then(*calling("save_memory", {"text": "Allergic to peanuts"}))
    await turn(gw, "key-acme", alice, "Please remember I am allergic to peanuts.")

    for key, scope in [("key-acme", {"end_user": "bob"}), ("key-globex", {"end_user": "alice"})]:
        other = await session(gw, key, **scope)
        openai.then(*calling("search_memories", {"query": "peanuts allergic"}))
        events = await turn(gw, key, other, "Am I allergic to peanuts?")
        assert finished(events).ok
        assert tool_result(openai) == "No saved memory matches 'peanuts allergic'."
        assert RECALLED_HEADING not in system_prompt(openai, -2)

        # Naming alice's namespace is an unknown argument: rejected, nothing found.
        openai.then(
            *calling(
                "search_memories",
                {"query": "peanuts", "namespace": ["end_user=alice", "memories"], "tenant_id": "acme"},
            )
        )
        events = await turn(gw, key, other, "Look in alice's memories for peanuts.")
        assert not finished(events).ok
        result = tool_result(openai)
        assert "namespace" in result and "Allergic" not in result
    assert await memories(env, "key-globex", "end_user=alice") == []


async def test_a_session_without_the_end_user_scope_gets_clear_errors_and_a_notice(env: Env) -> None:
    gw, openai = env.gateway, env.openai
    anonymous = await session(gw, "key-acme", project="apollo")
    openai.then(*calling("save_memory", {"text": "Likes tea"}))
    events = await turn(gw, "key-acme", anonymous, "Remember that I like tea.")
    assert not finished(events).ok
    assert "the session has no scope 'end_user'" in tool_result(openai)
    assert any(
        kind == "memory" and "no memories were recalled: the session has no scope 'end_user'" in text
        for kind, text in notices(events)
    ), notices(events)


async def test_the_context_service_hash_covers_the_recalled_memories(env: Env) -> None:
    context = env.stubs["context"]

    async def hash_of(*texts: str) -> str:
        request = context_pb2.BuildContextRequest(
            agent="keeper",
            user_text="coffee?",
            recalled_memories=[context_pb2.RecalledMemory(key=f"k{i}", text=t) for i, t in enumerate(texts)],
        )
        return (await context.BuildContext(request, timeout=TIMEOUT_S)).prompt_hash  # type: ignore[no-any-return]

    assert len({await hash_of(), await hash_of("Likes tea"), await hash_of("Likes coffee")}) == 3
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await hash_of("")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "recalled_memories[0].text" in (caught.value.details() or "")


async def test_renamed_tools_without_the_pack_make_no_memory_call_until_one_is_used(env: Env, tmp_path: Path) -> None:
    """A runtime whose memory address is a counting proxy: turns of an agent without the pack open
    no connection to the memory service; its first memory tool call does."""
    proxy = await TcpProxy(env.suite.servers["memory"].address).start()
    settings = env.settings.model_copy(update={"memory_addr": proxy.address})
    runtime = await start(runtime_main.build, settings, "127.0.0.1:0")
    gateway = await start(
        gateway_main.build,
        settings.model_copy(
            update={"runtime_addr": runtime.address, "memory_addr": env.suite.servers["memory"].address}
        ),
        "127.0.0.1:0",
    )
    try:
        async with grpc.aio.insecure_channel(gateway.address) as channel:
            gw = gateway_pb2_grpc.GatewayServiceStub(channel)
            plain = await session(gw, "key-acme", agent="plain", end_user="carol")
            env.openai.then(Reply(text=["Hello."]))
            await turn(gw, "key-acme", plain, "Hello there, what about coffee?")
            offered = {t["function"]["name"] for t in env.openai.model_requests[-1].json()["tools"]}
            assert {"remember", "recall"} <= offered and not {"save_memory", "search_memories"} & offered
            assert proxy.connections == 0  # no pack: no search before the model call

            env.openai.then(*calling("remember", {"text": "Works nights", "key": "schedule"}))
            events = await turn(gw, "key-acme", plain, "Remember that I work nights.")
            assert finished(events).ok and proxy.connections >= 1
        saved = await memories(env, "key-acme", "end_user=carol", "notes")
        assert [(m.key, m.text) for m in saved] == [("schedule", "Works nights")]
    finally:
        await gateway.stop(0)
        await runtime.stop(0)
        await proxy.close()


async def test_a_full_namespace_is_a_tool_error_naming_the_setting() -> None:
    """The tools against a memory service of their own that holds one memory per namespace."""
    settings = SUITE_SETTINGS.model_copy(update={"memory_max_items": 1})
    memory = await start(memory_main.build, settings, "127.0.0.1:0")
    clients = Clients(settings.model_copy(update={"memory_addr": memory.address}))
    try:
        tools = tools_for_agent(clients, AgentDefinition(name="keeper", tools=["save_memory"]))
        context = ToolContext(tenant_id="acme", session_id="s1", scope={"end_user": "dave"})
        assert (await tools["save_memory"].run({"text": "Likes tea"}, context)).startswith("Saved")
        with pytest.raises(ToolError, match="COGMESH_MEMORY_MAX_ITEMS") as caught:
            await tools["save_memory"].run({"text": "Likes cake"}, context)
        assert str(caught.value).startswith("cannot save the memory: namespace ['end_user=dave', 'memories'] is full")
        # Saving a known fact again replaces it: no new item, no error.
        assert (await tools["save_memory"].run({"text": "likes TEA"}, context)).startswith("Updated")
    finally:
        await clients.close()
        await memory.stop(0)
