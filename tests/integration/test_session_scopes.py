"""Session scopes through the gateway: what an API key may set, what it sees, and where the scope goes.

The whole suite runs with a keys file, the OpenAI SDK against a local fake, a Python
ToolService and a Python HookService in this process (both record what reaches them over
gRPC) and the Python MCP server over stdio.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import struct_pb2

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.memory.v1 import memory_pb2, memory_pb2_grpc
from cogmesh.policy.v1 import hooks_pb2, hooks_pb2_grpc
from cogmesh.tools.v1 import tools_pb2, tools_pb2_grpc
from gateway.auth import hash_key
from services.kit.protos import struct_to_dict
from services.lib.agents import DEFAULT_AGENTS_DIR
from services.suite.inprocess import Suite, start_suite
from tests.fakes.processes import ROOT
from tests.fakes.providers import Call, FakeOpenAI, Reply
from tests.integration.conftest import STUB_CLASSES, SUITE_SETTINGS, TIMEOUT_S, payload, status_details

pytestmark = pytest.mark.asyncio(loop_scope="module")

DEFAULT_POLICY = ROOT / "services" / "defaults" / "policy"
# tenant, principal, scope rules
KEYS = {
    "key-app": ("acme", "backend", ""),  # may set any scope key
    "key-alice": ("acme", "alice-web", "{pin: {end_user: alice}, allow: [project]}"),
    "key-bob": ("acme", "bob-web", "{pin: {end_user: bob}, allow: []}"),
    "key-org": ("acme", "org-web", "{pin: {org: alice}}"),  # pins, no allow: sets nothing else
    "key-globex": ("globex", "globex-app", ""),
}
AGENT = """
name: scoped
system_prompt: You help.
model: gpt-4o
tools: [lookup_order, mcp__py__whoami]
"""


def bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


class RecordingTools(tools_pb2_grpc.ToolServiceServicer):
    """A ToolService whose one tool echoes what the runtime sent with the call."""

    def __init__(self) -> None:
        self.calls: list[tools_pb2.CallToolRequest] = []

    async def ListTools(self, request: Any, context: Any) -> tools_pb2.ListToolsResponse:
        schema = struct_pb2.Struct()
        schema.update({"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]})
        return tools_pb2.ListToolsResponse(
            tools=[messages_pb2.ToolSpec(name="lookup_order", description="Find an order.", parameters=schema)]
        )

    async def CallTool(self, request: tools_pb2.CallToolRequest, context: Any) -> tools_pb2.CallToolResponse:
        self.calls.append(request)
        return tools_pb2.CallToolResponse(content=f"order {request.arguments['order']} of {request.scope['end_user']}")


class RecordingHooks(hooks_pb2_grpc.HookServiceServicer):
    def __init__(self) -> None:
        self.contexts: list[tuple[str, hooks_pb2.HookContext]] = []

    async def PreToolUse(self, request: hooks_pb2.PreToolUseRequest, context: Any) -> hooks_pb2.PreToolUseResponse:
        self.contexts.append(("PreToolUse", request.context))
        return hooks_pb2.PreToolUseResponse()

    async def UserPromptSubmit(
        self, request: hooks_pb2.UserPromptSubmitRequest, context: Any
    ) -> hooks_pb2.UserPromptSubmitResponse:
        self.contexts.append(("UserPromptSubmit", request.context))
        return hooks_pb2.UserPromptSubmitResponse()


@dataclass
class Env:
    suite: Suite
    stubs: dict[str, Any]
    memory: memory_pb2_grpc.MemoryServiceStub
    openai: FakeOpenAI
    tools: RecordingTools
    hooks: RecordingHooks
    channels: list[grpc.aio.Channel] = field(default_factory=list)

    @property
    def gateway(self) -> Any:
        return self.stubs["gateway"]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    tmp = tmp_path_factory.mktemp("scopes")
    agents_dir, policy_dir = tmp / "agents", tmp / "policy"
    shutil.copytree(DEFAULT_AGENTS_DIR, agents_dir)
    shutil.copytree(DEFAULT_POLICY, policy_dir)
    (agents_dir / "scoped.yaml").write_text(AGENT)
    (tmp / "keys.yaml").write_text(
        "keys:\n"
        + "".join(
            f"  - {{sha256: {hash_key(key)}, tenant: {tenant}, principal: {name}"
            + (f", scope: {rules}" if rules else "")
            + "}\n"
            for key, (tenant, name, rules) in KEYS.items()
        )
    )
    tools, hooks = RecordingTools(), RecordingHooks()
    server = grpc.aio.server()
    tools_pb2_grpc.add_ToolServiceServicer_to_server(tools, server)
    hooks_pb2_grpc.add_HookServiceServicer_to_server(hooks, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    policy = (policy_dir / "policy.yaml").read_text()
    hook_list = (
        f"hooks:\n  - {{event: PreToolUse, name: py-guard, remote: '127.0.0.1:{port}', fail: closed}}\n"
        f"  - {{event: UserPromptSubmit, name: py-prompt, remote: '127.0.0.1:{port}', fail: closed}}\n"
    )
    (policy_dir / "policy.yaml").write_text(policy.replace("hooks: []\n", hook_list))
    async with FakeOpenAI() as openai:
        (tmp / "key").write_text("sk-scopes\n")
        (tmp / "providers.yaml").write_text(
            f"providers:\n  openai: {{base_url: '{openai.url}/v1', api_key_file: key}}\n"
        )
        (tmp / "tools.yaml").write_text(
            "servers:\n"
            f"  rec:\n    transport: grpc\n    address: 127.0.0.1:{port}\n"
            f"  py:\n    transport: stdio\n    command: {sys.executable}\n"
            f"    args: [-m, tests.fakes.mcp_server, stdio]\n    cwd: {ROOT}\n"
        )
        settings = SUITE_SETTINGS.model_copy(
            update={
                "agents_dir": agents_dir,
                "policy_dir": policy_dir,
                "providers_file": tmp / "providers.yaml",
                "tool_servers_file": tmp / "tools.yaml",
                "api_keys_file": tmp / "keys.yaml",
            }
        )
        suite = await start_suite(settings)
        channels = {name: grpc.aio.insecure_channel(s.address) for name, s in suite.servers.items()}
        try:
            stubs = {name: STUB_CLASSES[name](channel) for name, channel in channels.items()}
            memory = memory_pb2_grpc.MemoryServiceStub(channels["gateway"])
            yield Env(suite, stubs, memory, openai, tools, hooks)
        finally:
            for channel in channels.values():
                await channel.close()
            await suite.stop(0)
            await server.stop(0)


async def create(env: Env, key: str, **scope: str) -> Any:
    request = gateway_pb2.CreateSessionRequest(agent="scoped", scope=scope)
    return (await env.gateway.CreateSession(request, metadata=bearer(key), timeout=TIMEOUT_S)).session


async def refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await asyncio.wait_for(call, TIMEOUT_S)
    return caught.value


async def turn(env: Env, key: str, session_id: str, text: str) -> list[events_pb2.RuntimeEvent]:
    request = gateway_pb2.SendMessageRequest(session_id=session_id, content=text)
    return [
        e async for r in env.gateway.SendMessage(request, metadata=bearer(key), timeout=TIMEOUT_S) for e in r.events
    ]


async def test_the_api_key_decides_what_scope_a_session_gets(env: Env) -> None:
    alice = await create(env, "key-alice", project="apollo")
    assert dict(alice.scope) == {"end_user": "alice", "project": "apollo"}  # the pinned value filled in
    got = await env.gateway.GetSession(
        gateway_pb2.GetSessionRequest(session_id=alice.session_id), metadata=bearer("key-alice")
    )
    assert dict(got.session.scope) == {"end_user": "alice", "project": "apollo"}
    assert dict((await create(env, "key-alice", end_user="alice")).scope) == {"end_user": "alice"}

    for key, scope, words in [
        ("key-alice", {"end_user": "bob"}, "pins 'end_user' to another value"),
        ("key-alice", {"team": "red"}, "may not set scope key 'team' (it may set: project)"),
        ("key-bob", {"project": "apollo"}, "(it may set: none)"),
        ("key-org", {"role": "admin"}, "may not set scope key 'role' (it may set: none)"),
    ]:
        error = await refused(create(env, key, **scope))
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED, error.details()
        assert words in (error.details() or "")
        info, _ = status_details(error)
        assert info is not None and info.reason == "SCOPE_DENIED" and info.metadata["scope_key"] in scope

    error = await refused(create(env, "key-app", Team="red", end_user="x/y"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    _, bad = status_details(error)
    assert {where for where, _ in bad} == {'scope["Team"]', 'scope["end_user"]'}
    # The unpinned key sets what it likes.
    assert dict((await create(env, "key-app", end_user="carol", region="eu")).scope) == {
        "end_user": "carol",
        "region": "eu",
    }


async def test_another_scope_s_sessions_are_not_found(env: Env) -> None:
    alice = (await create(env, "key-alice")).session_id
    bob = (await create(env, "key-bob")).session_id
    gw = env.gateway
    attempts = [
        gw.GetSession(gateway_pb2.GetSessionRequest(session_id=alice), metadata=bearer("key-bob")),
        gw.CancelTurn(gateway_pb2.CancelTurnRequest(session_id=alice), metadata=bearer("key-bob")),
        turn(env, "key-bob", alice, "hi"),
        collect(
            gw.Subscribe(
                gateway_pb2.SubscribeRequest(session_id=alice, stop_when_idle=True), metadata=bearer("key-bob")
            )
        ),
        gw.GetSession(gateway_pb2.GetSessionRequest(session_id=alice), metadata=bearer("key-globex")),
    ]
    for attempt in attempts:
        error = await refused(attempt)
        assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()
        assert error.details() == f"session {alice!r} not found"  # word for word a missing session's answer
    deleted = await gw.DeleteSession(gateway_pb2.DeleteSessionRequest(session_id=alice), metadata=bearer("key-bob"))
    assert deleted.deleted is False

    async def listed(key: str, **scope_filter: str) -> set[str]:
        request = gateway_pb2.ListSessionsRequest(page_size=1000, scope_filter=scope_filter)
        return {s.session_id for s in (await gw.ListSessions(request, metadata=bearer(key))).sessions}

    assert alice in await listed("key-alice") and bob not in await listed("key-alice")
    assert bob in await listed("key-bob") and alice not in await listed("key-bob")
    assert await listed("key-bob", end_user="alice") == set()  # a filter cannot widen the pins
    assert {alice, bob} <= await listed("key-app")
    by_alice = await listed("key-app", end_user="alice")
    assert alice in by_alice and bob not in by_alice
    assert (await gw.GetSession(gateway_pb2.GetSessionRequest(session_id=alice), metadata=bearer("key-app"))).session


async def collect(call: Any) -> list[Any]:
    return [r async for r in call]


async def test_scope_reaches_tools_and_hooks_and_the_model_cannot_change_it(env: Env) -> None:
    session = await create(env, "key-alice", project="apollo")
    scope = {"end_user": "alice", "project": "apollo"}
    # The model tries to act for someone else: its arguments are only arguments.
    env.openai.then(
        Reply(
            calls=[
                Call("lookup_order", ['{"order": "17", "end_user": "mallory", "scope": {"end_user": "mallory"}}']),
                Call("mcp__py__whoami", ['{"scope": {"end_user": "mallory"}}'], id="call_who"),
            ]
        ),
        Reply(text=["done"]),
    )
    before = len(env.tools.calls)
    events = await turn(env, "key-alice", session.session_id, "where is my order 17?")
    assert events[-1].final.text == "done", [payload(e) for e in events]

    (remote,) = env.tools.calls[before:]
    assert dict(remote.scope) == scope
    assert (remote.session_id, remote.tenant_id) == (session.session_id, "acme")
    assert struct_to_dict(remote.arguments)["end_user"] == "mallory"  # passed as an argument, nothing more
    finished = {e.tool_call_finished.name: e.tool_call_finished for e in events if payload(e) == "tool_call_finished"}
    assert finished["lookup_order"].result_summary == "order 17 of alice"
    assert finished["mcp__py__whoami"].ok
    results = {m.tool_call_id: m.content for m in events[-1].final.new_messages if m.role == messages_pb2.ROLE_TOOL}
    mcp_meta = json.loads(results["call_who"])
    assert mcp_meta["dev.cogmesh/scope"] == scope
    assert mcp_meta["dev.cogmesh/session_id"] == session.session_id

    mine = [(event, c) for event, c in env.hooks.contexts if c.session_id == session.session_id]
    assert {event for event, _ in mine} == {"UserPromptSubmit", "PreToolUse"}
    assert all(dict(c.session_scope) == scope for _, c in mine)


async def test_a_pinned_key_reaches_only_its_own_memory_namespaces(env: Env) -> None:
    def put(key: str, namespace: list[str], text: str) -> Any:
        request = memory_pb2.PutMemoryRequest(namespace=namespace, key="fact", text=text)
        return env.memory.PutMemory(request, metadata=bearer(key), timeout=TIMEOUT_S)

    await put("key-alice", ["end_user=alice", "memories"], "alice likes green tea")
    await put("key-bob", ["end_user=bob", "memories"], "bob likes green tea too")
    for key, namespace in [("key-alice", ["end_user=bob", "memories"]), ("key-bob", ["end_user=alice", "memories"])]:
        error = await refused(put(key, namespace, "planted"))
        assert error.code() == grpc.StatusCode.NOT_FOUND
        error = await refused(
            env.memory.GetMemory(memory_pb2.GetMemoryRequest(namespace=namespace, key="fact"), metadata=bearer(key))
        )
        assert error.code() == grpc.StatusCode.NOT_FOUND

    async def search(key: str, prefix: list[str]) -> list[str]:
        request = memory_pb2.SearchMemoriesRequest(namespace_prefix=prefix, query="green tea", limit=10)
        reply = await env.memory.SearchMemories(request, metadata=bearer(key), timeout=TIMEOUT_S)
        return [r.memory.text for r in reply.results]

    assert await search("key-alice", []) == ["alice likes green tea"]  # an empty prefix narrowed to the pins
    assert await search("key-bob", []) == ["bob likes green tea too"]
    assert sorted(await search("key-app", [])) == ["alice likes green tea", "bob likes green tea too"]
    # Pinned to another key with the same value: labels name the key, so alice's are not its own.
    assert await search("key-org", []) == []
    assert (
        await refused(put("key-org", ["end_user=alice", "memories"], "planted"))
    ).code() == grpc.StatusCode.NOT_FOUND
    await put("key-org", ["org=alice", "notes"], "the org likes green tea")
    assert await search("key-org", []) == ["the org likes green tea"]
