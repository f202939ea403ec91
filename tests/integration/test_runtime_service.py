"""The runtime service in the whole suite: real provider SDKs against local fake providers, the Node
ToolService and a Python MCP server as child processes, cancellation, failover, limits, structured output,
the runtime registry, agent files with hot reload, and bad input."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import json_format

from cogmesh.common.v1 import events_pb2, messages_pb2, resources_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.lib.agents import DEFAULT_AGENTS_DIR
from services.runtime.structured import RESPOND_TOOL
from services.suite.inprocess import Suite, start_suite
from tests.fakes.processes import ROOT, node_tool_server
from tests.fakes.providers import Call, Fail, FakeAnthropic, FakeGoogle, FakeOpenAI, Reply
from tests.integration.conftest import (
    STUB_CLASSES,
    SUITE_SETTINGS,
    TIMEOUT_S,
    new_session,
    payload,
    send,
    status_details,
)

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]

AGENTS = {
    "gpt.yaml": """
name: gpt
system_prompt: You are terse.
model: gpt-4o
tools: [calculator, word_count, mcp__py__add]
config: {fallback_models: [sonnet], temperature: 0.3}
""",
    "claude.yaml": "name: claude\nsystem_prompt: Be kind.\nmodel: sonnet\n",
    "gem.md": "---\nmodel: gemini\ndescription: Gemini agent\n---\nYou are Gemini.\n",
    "helper.md": "---\nmode: subagent\ndescription: Helps other agents\n---\nHelp.\n",
    "tight.yaml": "name: tight\nsystem_prompt: x\nmodel: gpt-4o\nbudget: {max_total_tokens: 10}\n",
    "keyless.yaml": "name: keyless\nsystem_prompt: x\nmodel: deepseek-chat\n",
    "odd.yaml": "name: odd\nsystem_prompt: x\nruntime: warp-drive\n",
    "onecall.yaml": "name: onecall\nsystem_prompt: x\nmodel: local\nruntime: single-shot\ntools: [calculator]\n",
}


@dataclass
class Env:
    suite: Suite
    stubs: dict[str, Any]
    openai: FakeOpenAI
    anthropic: FakeAnthropic
    google: FakeGoogle
    agents_dir: Path

    @property
    def gateway(self) -> Any:
        return self.stubs["gateway"]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    tmp = tmp_path_factory.mktemp("runtime")
    agents_dir = tmp / "agents"
    shutil.copytree(DEFAULT_AGENTS_DIR, agents_dir)
    for name, text in AGENTS.items():
        (agents_dir / name).write_text(text)
    async with (
        FakeOpenAI() as openai,
        FakeAnthropic() as anthropic,
        FakeGoogle() as google,
        node_tool_server() as node_address,
    ):
        (tmp / "key").write_text("sk-integration\n")
        (tmp / "providers.yaml").write_text(
            "providers:\n"
            f"  openai: {{base_url: '{openai.url}/v1', api_key_file: key}}\n"
            f"  anthropic: {{base_url: '{anthropic.url}', api_key_file: key}}\n"
            f"  google: {{base_url: '{google.url}', api_key_file: key}}\n"
            "  deepseek: {api_key_env: [COGMESH_TEST_UNSET_DEEPSEEK_KEY]}\n"
        )
        (tmp / "tools.yaml").write_text(
            "servers:\n"
            f"  node:\n    transport: grpc\n    address: {node_address}\n"
            f"  py:\n    transport: stdio\n    command: {sys.executable}\n"
            f"    args: [-m, tests.fakes.mcp_server, stdio]\n    cwd: {ROOT}\n"
        )
        settings = SUITE_SETTINGS.model_copy(
            update={
                "agents_dir": agents_dir,
                "providers_file": tmp / "providers.yaml",
                "tool_servers_file": tmp / "tools.yaml",
                "call_timeout_s": 10,
            }
        )
        suite = await start_suite(settings)
        channels = {name: grpc.aio.insecure_channel(server.address) for name, server in suite.servers.items()}
        try:
            stubs = {name: STUB_CLASSES[name](channel) for name, channel in channels.items()}
            yield Env(suite, stubs, openai, anthropic, google, agents_dir)
        finally:
            for channel in channels.values():
                await channel.close()
            await suite.stop(0)


def of(events: list[events_pb2.RuntimeEvent], kind: str) -> list[Any]:
    return [getattr(e, kind) for e in events if payload(e) == kind]


async def test_openai_turn_with_a_node_tool_and_catalogue_pricing(env: Env) -> None:
    env.openai.then(
        Reply(calls=[Call("word_count", ['{"text": ', '"one two three"}'], id="call_w")], usage=(1000, 20)),
        Reply(text=["There are ", "3 words."], usage=(1200, 10)),
    )
    session_id = await new_session(env.gateway, agent="gpt")
    events = await send(env.gateway, session_id, "Count: one two three")

    (started,) = of(events, "tool_call_started")
    assert (started.name, started.source, started.server, started.correlation_id) == (
        "word_count",
        "remote",
        "node",
        "call_w",
    )
    (done,) = of(events, "tool_call_finished")
    assert (done.ok, done.result_summary) == (True, "3")
    usage = of(events, "usage")
    assert [(u.model, u.provider) for u in usage] == [("gpt-4o", "openai")] * 2
    assert usage[0].cost_usd == pytest.approx((1000 * 2.5 + 20 * 10) / 1e6)  # the catalogue's gpt-4o price
    final = events[-1].final
    assert final.text == "There are 3 words." and final.model == "gpt-4o"
    assert [m.role for m in final.new_messages] == [
        messages_pb2.ROLE_USER,
        messages_pb2.ROLE_ASSISTANT,
        messages_pb2.ROLE_TOOL,
        messages_pb2.ROLE_ASSISTANT,
    ]
    second = env.openai.model_requests[-1].json()
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_w", "content": "3"}
    assert second["temperature"] == 0.3
    assert {t["function"]["name"] for t in second["tools"]} == {"calculator", "word_count", "mcp__py__add"}


async def test_anthropic_and_google_turns_stream_text(env: Env) -> None:
    env.anthropic.then(Reply(text=["Hello ", "from ", "Claude."]))
    events = await send(env.gateway, await new_session(env.gateway, agent="claude"), "hi")
    assert [d.text for d in of(events, "assistant_delta")] == ["Hello ", "from ", "Claude."]
    assert events[-1].final.model == "claude-sonnet-4-20250514"
    assert "Be kind." in env.anthropic.model_requests[-1].json()["system"]

    env.google.then(Reply(text=["Gemini ", "here."]))
    events = await send(env.gateway, await new_session(env.gateway, agent="gem"), "hi")
    assert events[-1].final.text == "Gemini here." and events[-1].final.model == "gemini-2.5-pro"


async def test_mcp_tool_through_the_gateway(env: Env) -> None:
    env.openai.then(Reply(calls=[Call("mcp__py__add", ['{"a": 20, "b": 22}'])]), Reply(text=["42"]))
    events = await send(env.gateway, await new_session(env.gateway, agent="gpt"), "add")
    (done,) = of(events, "tool_call_finished")
    assert (done.name, done.ok, done.result_summary) == ("mcp__py__add", True, "42")


async def test_rate_limit_retry_then_failover_to_the_fallback_model(env: Env) -> None:
    env.openai.then(
        Fail(429, "slow down", headers={"retry-after-ms": "20"}),
        Fail(500, "down", headers={"retry-after-ms": "1"}),
        Fail(500, "down", headers={"retry-after-ms": "1"}),
    )
    env.anthropic.then(Reply(text=["Claude took over."]))
    events = await send(env.gateway, await new_session(env.gateway, agent="gpt"), "hello")
    notices = of(events, "native_notice")
    assert [n.kind for n in notices] == ["retry", "retry", "failover"]
    assert json_format.MessageToDict(notices[-1].metadata)["to_model"] == "claude-sonnet-4-20250514"
    final = events[-1].final
    assert (final.text, final.model, list(final.metrics.failed_models)) == (
        "Claude took over.",
        "claude-sonnet-4-20250514",
        ["gpt-4o"],
    )


async def test_cancel_aborts_the_provider_stream_and_keeps_partial_text(env: Env) -> None:
    env.openai.then(Reply(text=[f"w{i} " for i in range(500)], delay_s=0.02))
    session_id = await new_session(env.gateway, agent="gpt")
    disconnects = env.openai.disconnects
    stream = env.gateway.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content="talk"))
    events: list[events_pb2.RuntimeEvent] = []
    cancelled = False
    async for response in stream:
        events.extend(response.events)
        if not cancelled and len(of(events, "assistant_delta")) >= 3:
            reply = await env.gateway.CancelTurn(gateway_pb2.CancelTurnRequest(session_id=session_id))
            assert reply.cancelled
            cancelled = True
    error = events[-1].error
    assert error.kind == events_pb2.ERROR_KIND_CANCELLED
    streamed = "".join(d.text for d in of(events, "assistant_delta"))
    assert error.partial_text == streamed and streamed.startswith("w0 w1 w2 ")
    assert len(streamed.split()) < 100  # stopped long before the 500 words
    again = await env.gateway.CancelTurn(gateway_pb2.CancelTurnRequest(session_id=session_id))
    assert not again.cancelled  # a second cancel is harmless
    await asyncio.wait_for(env.openai.wait_for_disconnects(disconnects + 1), 30)  # the HTTP stream was aborted
    assert env.openai.disconnects == disconnects + 1
    stored = await env.stubs["sessions"].ListMessages(
        sessions_pb2.ListMessagesRequest(tenant_id=SUITE_SETTINGS.tenant_id, session_id=session_id)
    )
    assert [m.content for m in stored.messages] == ["talk", streamed]


async def test_cost_budget_and_session_totals(env: Env) -> None:
    env.openai.then(Reply(text=["too ", "much"], usage=(50, 5)))
    events = await send(env.gateway, await new_session(env.gateway, agent="tight"), "hi")
    assert events[-1].error.kind == events_pb2.ERROR_KIND_BUDGET_EXCEEDED
    assert "tokens 55 > 10" in events[-1].error.message

    session_id = await new_session(env.gateway, agent="claude")
    env.anthropic.then(Reply(text=["one"], usage=(100, 10)), Reply(text=["two"], usage=(200, 20)))
    first = (await send(env.gateway, session_id, "a"))[-1].final.metrics
    second = (await send(env.gateway, session_id, "b"))[-1].final.metrics
    assert (first.session_total_tokens, second.session_total_tokens) == (110, 330)
    assert second.session_cost_usd == pytest.approx(first.cost_usd + second.cost_usd)


async def test_missing_provider_key_and_unknown_agent_runtime_end_the_turn_clearly(env: Env) -> None:
    events = await send(env.gateway, await new_session(env.gateway, agent="keyless"), "hi")
    error = events[-1].error
    assert error.kind == events_pb2.ERROR_KIND_INVALID_REQUEST
    assert "deepseek-chat" in error.message and "$COGMESH_TEST_UNSET_DEEPSEEK_KEY" in error.message

    events = await send(env.gateway, await new_session(env.gateway, agent="odd"), "hi")
    assert "unknown runtime 'warp-drive' (from the agent's runtime)" in events[-1].error.message


async def test_single_shot_runtime_from_the_agent(env: Env) -> None:
    events = await send(env.gateway, await new_session(env.gateway, agent="onecall"), "What is 6 * 7?")
    final = events[-1].final
    assert (final.text, final.metrics.runtime, final.metrics.model_calls) == ("6 * 7 = 42.", "single-shot", 1)
    assert not of(events, "tool_call_started")


async def test_list_runtimes(env: Env) -> None:
    reply = await env.stubs["runtime"].ListRuntimes(runtime_pb2.ListRuntimesRequest(), timeout=TIMEOUT_S)
    assert reply.default_runtime == "cogmesh"
    by_name = {r.name: r for r in reply.runtimes}
    assert set(by_name) == {"cogmesh", "single-shot"}
    assert by_name["cogmesh"].is_default and by_name["cogmesh"].capabilities.mcp
    assert not by_name["single-shot"].capabilities.tools


async def test_list_agents_shows_modes_and_hot_reloads(env: Env) -> None:
    reply = await env.gateway.ListAgents(gateway_pb2.ListAgentsRequest(), timeout=TIMEOUT_S)
    modes = {a.name: a.mode for a in reply.agents}
    assert modes["helper"] == resources_pb2.AGENT_MODE_SUBAGENT and modes["gpt"] == resources_pb2.AGENT_MODE_PRIMARY
    (env.agents_dir / "fresh.md").write_text("---\nmode: all\ndescription: Added while running\n---\nHi.\n")
    try:
        for _ in range(40):  # registries check the folder at most once a second
            reply = await env.gateway.ListAgents(gateway_pb2.ListAgentsRequest(), timeout=TIMEOUT_S)
            if "fresh" in {a.name for a in reply.agents}:
                break
            await asyncio.sleep(0.1)
        fresh = next(a for a in reply.agents if a.name == "fresh")
        assert (fresh.mode, fresh.description) == (resources_pb2.AGENT_MODE_ALL, "Added while running")
        # Every service reloads on its own clock (at most a second apart): within a few seconds,
        # a session with the new agent runs through all of them.
        session_id = await new_session(env.gateway, agent="fresh")
        for _ in range(20):
            events = await send(env.gateway, session_id, "hello")
            if payload(events[-1]) == "final" or "unknown agent 'fresh'" not in events[-1].error.message:
                break
            await asyncio.sleep(0.25)
        assert payload(events[-1]) == "final", events[-1]
    finally:
        (env.agents_dir / "fresh.md").unlink()


# --------------------------------------------------------------------------- StartTurn directly


@pytest_asyncio.fixture(loop_scope="module")
async def leased(env: Env) -> AsyncIterator[tuple[str, str, int]]:
    """A fresh gpt session whose turn lease this test holds: (session_id, turn_id, lease_token)."""
    session_id = await new_session(env.gateway, agent="gpt")
    turn_id = f"turn-{session_id[:8]}"
    lease = await env.stubs["sessions"].AcquireTurnLease(
        sessions_pb2.AcquireTurnLeaseRequest(
            tenant_id=SUITE_SETTINGS.tenant_id, session_id=session_id, turn_id=turn_id, ttl_seconds=60
        )
    )
    yield session_id, turn_id, lease.lease_token
    await env.stubs["sessions"].ReleaseTurnLease(
        sessions_pb2.ReleaseTurnLeaseRequest(
            tenant_id=SUITE_SETTINGS.tenant_id, session_id=session_id, lease_token=lease.lease_token
        )
    )


def run_request(leased: tuple[str, str, int], **fields: Any) -> runtime_pb2.RunTurnRequest:
    session_id, turn_id, token = leased
    base: dict[str, Any] = {
        "tenant_id": SUITE_SETTINGS.tenant_id,
        "session_id": session_id,
        "turn_id": turn_id,
        "content": "hi",
        "lease_token": token,
    }
    return runtime_pb2.RunTurnRequest(**(base | fields))


async def start_turn(env: Env, request: runtime_pb2.RunTurnRequest) -> None:
    await env.stubs["runtime"].StartTurn(runtime_pb2.StartTurnRequest(turn=request), timeout=TIMEOUT_S)


async def run_direct(env: Env, request: runtime_pb2.RunTurnRequest) -> list[events_pb2.RuntimeEvent]:
    """The turn started as the gateway starts it (StartTurn), its events read from the session's log
    until the turn's end frees the session."""
    await start_turn(env, request)
    subscribe = gateway_pb2.SubscribeRequest(session_id=request.session_id, stop_when_idle=True)
    return [e async for r in env.gateway.Subscribe(subscribe, timeout=TIMEOUT_S) for e in r.events]


def refused(events: list[events_pb2.RuntimeEvent]) -> events_pb2.TurnError:
    """The error a turn the runtime could not build ended with, its only event."""
    assert [payload(e) for e in events] == ["error"], events
    error = events[-1].error
    assert error.kind == events_pb2.ERROR_KIND_INVALID_REQUEST and not error.retryable, error
    return error


async def test_structured_output_with_one_repair(env: Env, leased: tuple[str, str, int]) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    env.openai.then(
        Reply(calls=[Call(RESPOND_TOOL, ['{"town": "Oslo"}'])]),
        Reply(calls=[Call(RESPOND_TOOL, ['{"city": ', '"Oslo"}'])]),
    )
    request = run_request(
        leased, output_schema=json_format.ParseDict(schema, runtime_pb2.RunTurnRequest().output_schema)
    )
    events = await run_direct(env, request)
    final = events[-1].final
    assert json_format.MessageToDict(final.structured_output) == {"city": "Oslo"}
    repair = env.openai.model_requests[-1].json()["messages"][-1]
    assert repair["role"] == "tool" and "'city' is a required property" in repair["content"]
    offered = env.openai.model_requests[-1].json()["tools"]
    assert any(t["function"]["name"] == RESPOND_TOOL for t in offered)


async def test_turn_limits_from_the_request(env: Env, leased: tuple[str, str, int]) -> None:
    env.openai.then(
        Reply(calls=[Call("calculator", ['{"expression": "1+1"}']), Call("calculator", ['{"expression": "2+2"}'])]),
        Reply(text=["Only one."]),
    )
    request = run_request(leased, limits=runtime_pb2.TurnLimits(max_tool_calls=1))
    events = await run_direct(env, request)
    assert sorted(f.ok for f in of(events, "tool_call_finished")) == [False, True]
    assert [n.kind for n in of(events, "native_notice")] == ["tool_limit"]
    assert "tools" not in env.openai.model_requests[-1].json()
    assert events[-1].final.text == "Only one."


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"limits": runtime_pb2.TurnLimits(max_iterations=-1)}, "turn.limits.max_iterations"),
        ({"cost_budget": runtime_pb2.CostBudget(max_cost_usd=-1)}, "turn.cost_budget.max_cost_usd"),
    ],
)
async def test_bad_turn_requests_name_the_problem(
    env: Env, leased: tuple[str, str, int], fields: dict[str, Any], expected: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await start_turn(env, run_request(leased, **fields))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    _, violations = status_details(caught.value)
    assert expected in [field for field, _ in violations]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"runtime": "warp"}, "unknown runtime 'warp'"),
        ({"model": "no-such-model"}, "no-such-model"),
    ],
)
async def test_names_found_unknown_while_the_turn_is_built_end_it(
    env: Env, leased: tuple[str, str, int], fields: dict[str, Any], expected: str
) -> None:
    """Found after StartTurn answered: the turn's end names the problem. (The gateway asks first:
    test_bad_input.py's unknown-runtime row and test_an_unknown_model_is_not_found_before_the_turn_starts.)"""
    error = refused(await run_direct(env, run_request(leased, **fields)))
    assert expected in error.message


async def test_invalid_output_schema_and_client_tools(env: Env, leased: tuple[str, str, int]) -> None:
    bad_schema = json_format.ParseDict({"type": "banana"}, runtime_pb2.RunTurnRequest().output_schema)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await start_turn(env, run_request(leased, output_schema=bad_schema))
    _, violations = status_details(caught.value)
    assert violations and violations[0][0] == "turn.output_schema" and "banana" in violations[0][1]

    bad_tools = [
        messages_pb2.ToolSpec(name="pick file"),
        messages_pb2.ToolSpec(name="calculator"),
        messages_pb2.ToolSpec(name="twice"),
        messages_pb2.ToolSpec(name="twice"),
        messages_pb2.ToolSpec(
            name="listy",
            parameters=json_format.ParseDict({"type": "array"}, runtime_pb2.RunTurnRequest().output_schema),
        ),
    ]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await start_turn(env, run_request(leased, client_tools=bad_tools))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    _, violations = status_details(caught.value)
    assert [field for field, _ in violations] == [
        "turn.client_tools[0].name",
        "turn.client_tools[3].name",
        "turn.client_tools[4].parameters",
    ]

    # A name the agent already uses is refused once the agent's tools are known: the turn ends with it.
    events = await run_direct(env, run_request(leased, client_tools=[messages_pb2.ToolSpec(name="calculator")]))
    assert "'calculator' is already one of the agent's tools" in refused(events).message


async def test_continue_turn_of_an_unknown_interrupt_is_not_found(env: Env, leased: tuple[str, str, int]) -> None:
    session_id, turn_id, token = leased
    resume = runtime_pb2.ResumeTurnRequest(
        tenant_id=SUITE_SETTINGS.tenant_id, session_id=session_id, turn_id=turn_id, interrupt_id="i1", lease_token=token
    )
    request = runtime_pb2.ContinueTurnRequest(resume=resume)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await env.stubs["runtime"].ContinueTurn(request, timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    info, _ = status_details(caught.value)
    assert info is not None and info.reason == "TURN_NOT_FOUND"

    request.resume.ClearField("lease_token")
    request.resume.user_input = ""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await env.stubs["runtime"].ContinueTurn(request, timeout=TIMEOUT_S)
    _, violations = status_details(caught.value)
    assert [field for field, _ in violations] == ["resume.lease_token", "resume.user_input"]
