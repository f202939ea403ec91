"""OpenTelemetry GenAI semantic conventions on the runtime's spans and metrics (issue 28, item 4).

Real suite turns, spans taken from the process's tracer provider by an in-memory exporter:
the invoke_agent / chat / execute_tool tree of a turn that delegates to a subagent (built-in
model and calculator) under the runtime's StartTurn span, the attributes the conventions ask
for, message content left out by default and recorded once the setting is on, and an OpenAI
model called through the real `openai` SDK against a local fake provider, answering and
failing. The GenAI client metrics are read from the Prometheus registry.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import pytest_asyncio
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import REGISTRY

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from services.kit.config import Settings
from services.kit.telemetry import GENAI, configure_tracing
from services.lib.agents import DEFAULT_AGENTS_DIR
from services.suite.inprocess import Suite, start_suite
from tests.fakes.providers import Fail, FakeOpenAI, Reply
from tests.integration.conftest import STUB_CLASSES, SUITE_SETTINGS, TIMEOUT_S, new_session, send

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning"),
]

START_TURN = "/cogmesh.runtime.v1.RuntimeService/StartTurn"
CONTENT = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)
GPT = "name: gpt\nsystem_prompt: You are terse.\nmodel: gpt-4o\nconfig: {temperature: 0.3, max_tokens: 256}\n"


@dataclass
class Env:
    suite: Suite
    gateway: Any
    openai: FakeOpenAI
    spans: InMemorySpanExporter

    async def turn(self, agent: str, content: str) -> tuple[str, list[events_pb2.RuntimeEvent], list[ReadableSpan]]:
        """Run one turn; its session, its events and every span of its trace once the runtime is done."""
        session_id = await new_session(self.gateway, agent=agent)
        events = await send(self.gateway, session_id, content)
        return session_id, events, await self.trace_of(events[-1].turn_id)

    async def trace_of(self, turn_id: str) -> list[ReadableSpan]:
        """Every span of the turn's trace, once the runtime is done with it."""
        runner = self.suite.servers["runtime"].app.mounts[0].servicer.runner
        await asyncio.wait_for(runner.idle(), TIMEOUT_S)  # the turn's task (and its spans) end after its last write
        agents = [s for s in self.spans.get_finished_spans() if (s.attributes or {}).get("cogmesh.turn_id") == turn_id]
        assert agents, f"no span of turn {turn_id}"
        trace_id = agents[0].context.trace_id
        return [s for s in self.spans.get_finished_spans() if s.context.trace_id == trace_id]


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    assert configure_tracing("test", Settings(), [SimpleSpanProcessor(exporter)]) is not None
    assert not GENAI.capture_content  # the default
    yield exporter
    exporter.shutdown()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def env(spans: InMemorySpanExporter, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    tmp = tmp_path_factory.mktemp("genai")
    agents_dir = tmp / "agents"
    shutil.copytree(DEFAULT_AGENTS_DIR, agents_dir)
    (agents_dir / "gpt.yaml").write_text(GPT)
    async with FakeOpenAI() as openai:
        (tmp / "key").write_text("sk-integration\n")
        (tmp / "providers.yaml").write_text(
            f"providers:\n  openai: {{base_url: '{openai.url}/v1', api_key_file: key}}\n"
        )
        settings = SUITE_SETTINGS.model_copy(
            update={"agents_dir": agents_dir, "providers_file": tmp / "providers.yaml", "call_timeout_s": 10}
        )
        suite = await start_suite(settings)
        channel = grpc.aio.insecure_channel(suite.gateway_address)
        try:
            yield Env(suite, STUB_CLASSES["gateway"](channel), openai, spans)
        finally:
            await channel.close()
            await suite.stop(0)


@pytest.fixture
def capture_content() -> Iterator[None]:
    """COGMESH_GENAI_CAPTURE_CONTENT=1, as a process started with it sets it."""
    configure_tracing("test", Settings(genai_capture_content=True))
    try:
        yield
    finally:
        configure_tracing("test", Settings())


def by_id(tree: list[ReadableSpan], span: ReadableSpan) -> ReadableSpan:
    assert span.parent is not None, f"{span.name} has no parent"
    return next(s for s in tree if s.context.span_id == span.parent.span_id)


def children(tree: list[ReadableSpan], parent: ReadableSpan, prefix: str = "") -> list[ReadableSpan]:
    found = [
        s
        for s in tree
        if s.parent is not None and s.parent.span_id == parent.context.span_id and s.name.startswith(prefix)
    ]
    return sorted(found, key=lambda s: s.start_time or 0)


def named(tree: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return sorted((s for s in tree if s.name == name), key=lambda s: s.start_time or 0)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    assert span.attributes is not None
    return dict(span.attributes)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def chat_labels(provider: str, model: str, response_model: str, error_type: str = "") -> dict[str, str]:
    return {
        "gen_ai_operation_name": "chat",
        "gen_ai_provider_name": provider,
        "gen_ai_request_model": model,
        "gen_ai_response_model": response_model,
        "error_type": error_type,
    }


def token_labels(provider: str, model: str, response_model: str, kind: str) -> dict[str, str]:
    return {
        "gen_ai_operation_name": "chat",
        "gen_ai_provider_name": provider,
        "gen_ai_token_type": kind,
        "gen_ai_request_model": model,
        "gen_ai_response_model": response_model,
    }


async def test_a_delegating_turn_is_a_tree_of_agent_model_and_tool_spans(env: Env) -> None:
    local = chat_labels("cogmesh", "cogmesh-local", "cogmesh-local")
    calls_before = sample("gen_ai_client_operation_duration_seconds_count", **local)
    input_before = sample(
        "gen_ai_client_token_usage_sum", **token_labels("cogmesh", "cogmesh-local", "cogmesh-local", "input")
    )

    task = json.dumps({"agent": "arithmetic", "task": "What is 6 * 7?"})
    session_id, events, tree = await env.turn("planner", f"@task {task}")
    final = events[-1].final
    assert final.text == "The task tool returned: 6 * 7 = 42."

    # The turn's agent hangs under the runtime's StartTurn server span.
    [planner] = named(tree, "invoke_agent planner")
    start_turn = by_id(tree, planner)
    assert (start_turn.name, start_turn.kind) == (START_TURN, SpanKind.SERVER)
    assert planner.kind == SpanKind.INTERNAL and planner.status.status_code == StatusCode.UNSET
    assert {
        k: attrs(planner)[k]
        for k in (
            "gen_ai.operation.name",
            "gen_ai.agent.name",
            "gen_ai.conversation.id",
            "gen_ai.provider.name",
            "gen_ai.request.model",
            "cogmesh.outcome",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "cogmesh.cost_usd",
        )
    } == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "planner",
        "gen_ai.conversation.id": session_id,
        "gen_ai.provider.name": "cogmesh",
        "gen_ai.request.model": "cogmesh-local",
        "cogmesh.outcome": "final",
        "gen_ai.usage.input_tokens": final.metrics.input_tokens,  # its subagent's included
        "gen_ai.usage.output_tokens": final.metrics.output_tokens,
        "cogmesh.cost_usd": 0.0,
    }

    # Its model calls and its delegation, in order; the subagent's run nests inside the task call.
    planner_steps = children(tree, planner, "chat ") + children(tree, planner, "execute_tool ")
    assert [s.name for s in sorted(planner_steps, key=lambda s: s.start_time or 0)] == [
        "chat cogmesh-local",
        "execute_tool task",
        "chat cogmesh-local",
    ]
    [task_span] = children(tree, planner, "execute_tool ")
    delegation = next(e.delegation for e in events if e.HasField("delegation"))
    assert {
        k: attrs(task_span)[k]
        for k in (
            "gen_ai.operation.name",
            "gen_ai.tool.name",
            "gen_ai.tool.call.id",
            "gen_ai.tool.type",
            "cogmesh.tool.source",
        )
    } == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "task",
        "gen_ai.tool.call.id": delegation.correlation_id,
        "gen_ai.tool.type": "extension",
        "cogmesh.tool.source": "internal",
    }
    [arithmetic] = children(tree, task_span)
    assert arithmetic.name == "invoke_agent arithmetic" and attrs(arithmetic)["gen_ai.agent.name"] == "arithmetic"
    assert attrs(arithmetic)["gen_ai.conversation.id"] == session_id
    steps = children(tree, arithmetic, "chat ") + children(tree, arithmetic, "execute_tool ")
    assert [s.name for s in sorted(steps, key=lambda s: s.start_time or 0)] == [
        "chat cogmesh-local",
        "execute_tool calculator",
        "chat cogmesh-local",
    ]
    [calculator] = children(tree, arithmetic, "execute_tool ")
    started = next(e.tool_call_started for e in events if e.HasField("tool_call_started") and e.agent == "arithmetic")
    assert attrs(calculator)["gen_ai.tool.call.id"] == started.correlation_id
    assert (
        attrs(calculator)["cogmesh.tool.source"] == "builtin" and attrs(calculator)["gen_ai.agent.name"] == "arithmetic"
    )

    # Every model call: what was asked, what came back, what it cost.
    usages = [e.usage for e in events if e.HasField("usage")]
    chats = named(tree, "chat cogmesh-local")
    assert len(chats) == len(usages) == 4
    assert [by_id(tree, s).name for s in chats] == [
        "invoke_agent planner",
        "invoke_agent arithmetic",
        "invoke_agent arithmetic",
        "invoke_agent planner",
    ]
    for span, usage in zip(chats, usages, strict=True):
        found = attrs(span)
        assert span.kind == SpanKind.INTERNAL  # the built-in model runs in the runtime's process
        assert found["gen_ai.operation.name"] == "chat" and found["gen_ai.provider.name"] == "cogmesh"
        assert found["gen_ai.request.model"] == found["gen_ai.response.model"] == "cogmesh-local"
        assert (found["gen_ai.usage.input_tokens"], found["gen_ai.usage.output_tokens"]) == (
            usage.input_tokens,
            usage.output_tokens,
        )
        assert found["cogmesh.cost_usd"] == usage.cost_usd == 0.0
        assert found["gen_ai.conversation.id"] == session_id and found["gen_ai.request.stream"] is True
        assert found["gen_ai.response.time_to_first_chunk"] >= 0
        assert "gen_ai.request.temperature" not in found  # not set by these agents
    assert [attrs(s)["gen_ai.response.finish_reasons"] for s in chats] == [
        ("tool_call",),
        ("tool_call",),
        ("stop",),
        ("stop",),
    ]
    # Content is off by default: no prompt, answer, argument or result on any span.
    assert [(s.name, k) for s in tree for k in CONTENT if k in attrs(s)] == []

    # The GenAI client metrics: one duration per call, input and output tokens per call.
    assert sample("gen_ai_client_operation_duration_seconds_count", **local) == calls_before + 4
    input_tokens = sample(
        "gen_ai_client_token_usage_sum", **token_labels("cogmesh", "cogmesh-local", "cogmesh-local", "input")
    )
    assert input_tokens == input_before + sum(u.input_tokens for u in usages)


@pytest.mark.usefixtures("capture_content")
async def test_content_is_on_the_spans_once_the_setting_is_on(env: Env) -> None:
    _, events, tree = await env.turn("default", "What is 17 * 23?")
    assert events[-1].final.text == "17 * 23 = 391."

    [agent] = named(tree, "invoke_agent default")
    found = attrs(agent)
    assert json.loads(found["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "What is 17 * 23?"}]}
    ]
    assert json.loads(found["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "17 * 23 = 391."}], "finish_reason": "stop"}
    ]
    [instructions] = json.loads(found["gen_ai.system_instructions"])
    assert instructions["type"] == "text" and instructions["content"]

    first, second = named(tree, "chat cogmesh-local")
    assert json.loads(attrs(first)["gen_ai.system_instructions"]) == [instructions]  # not among the messages
    assert json.loads(attrs(first)["gen_ai.input.messages"])[-1] == {
        "role": "user",
        "parts": [{"type": "text", "content": "What is 17 * 23?"}],
    }
    [asked] = json.loads(attrs(first)["gen_ai.output.messages"])
    call_id = asked["parts"][0]["id"]
    assert asked == {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": call_id, "name": "calculator", "arguments": {"expression": "17 * 23"}}],
        "finish_reason": "tool_call",
    }
    assert json.loads(attrs(second)["gen_ai.input.messages"])[-1] == {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": call_id, "response": "391"}],
    }
    [calculator] = named(tree, "execute_tool calculator")
    assert json.loads(attrs(calculator)["gen_ai.tool.call.arguments"]) == {"expression": "17 * 23"}
    assert attrs(calculator)["gen_ai.tool.call.result"] == "391"


async def test_an_openai_model_call_is_a_client_span_with_its_request_settings_and_cost(env: Env) -> None:
    labels = token_labels("openai", "gpt-4o", "", "input")
    input_before = sample("gen_ai_client_token_usage_sum", **labels)
    env.openai.then(Reply(text=["Hello", " there."], usage=(50, 5)))
    session_id, events, tree = await env.turn("gpt", "hi")
    assert events[-1].final.text == "Hello there."
    [usage] = [e.usage for e in events if e.HasField("usage")]
    assert usage.cost_usd > 0  # catalogue pricing

    [call] = named(tree, "chat gpt-4o")
    assert call.kind == SpanKind.CLIENT and call.status.status_code == StatusCode.UNSET
    assert by_id(tree, call).name == "invoke_agent gpt"
    found = attrs(call)
    assert {
        k: found[k]
        for k in found
        if k.startswith(("gen_ai.", "cogmesh.cost")) and k != "gen_ai.response.time_to_first_chunk"
    } == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.request.stream": True,
        "gen_ai.request.temperature": 0.3,
        "gen_ai.request.max_tokens": 256,
        "gen_ai.agent.name": "gpt",
        "gen_ai.conversation.id": session_id,
        "gen_ai.usage.input_tokens": 50,
        "gen_ai.usage.output_tokens": 5,
        "gen_ai.response.finish_reasons": ("stop",),
        "cogmesh.cost_usd": usage.cost_usd,
    }  # no gen_ai.response.model: the adapters do not report the model the provider answered with
    assert sample("gen_ai_client_token_usage_sum", **labels) == input_before + 50


async def test_a_failing_model_call_marks_its_span_and_its_agent_as_errors(env: Env) -> None:
    failed = chat_labels("openai", "gpt-4o", "", "invalid_request")
    before = sample("gen_ai_client_operation_duration_seconds_count", **failed)
    env.openai.then(Fail(400, "unsupported parameter"))
    _, events, tree = await env.turn("gpt", "hi")
    error = events[-1].error
    assert error.kind == events_pb2.ERROR_KIND_INVALID_REQUEST

    [call] = named(tree, "chat gpt-4o")
    assert call.status.status_code == StatusCode.ERROR and "unsupported parameter" in (call.status.description or "")
    assert attrs(call)["error.type"] == "invalid_request"
    assert "gen_ai.usage.input_tokens" not in attrs(call) and "gen_ai.response.finish_reasons" not in attrs(call)
    [agent] = named(tree, "invoke_agent gpt")
    assert agent.status.status_code == StatusCode.ERROR and agent.status.description == error.message
    assert attrs(agent)["error.type"] == "invalid_request" and attrs(agent)["cogmesh.outcome"] == "error"
    assert sample("gen_ai_client_operation_duration_seconds_count", **failed) == before + 1


async def test_a_cancelled_turn_ends_its_model_call_and_its_agent_as_cancelled(env: Env) -> None:
    env.openai.then(Reply(text=[f"w{i} " for i in range(500)], delay_s=0.02))
    session_id = await new_session(env.gateway, agent="gpt")
    events: list[events_pb2.RuntimeEvent] = []
    cancelled = False
    async for response in env.gateway.SendMessage(
        gateway_pb2.SendMessageRequest(session_id=session_id, content="talk")
    ):
        events.extend(response.events)
        if not cancelled and len([e for e in events if e.HasField("assistant_delta")]) >= 3:
            cancelled = (await env.gateway.CancelTurn(gateway_pb2.CancelTurnRequest(session_id=session_id))).cancelled
            assert cancelled
    assert events[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
    tree = await env.trace_of(events[-1].turn_id)

    [call] = named(tree, "chat gpt-4o")  # cut off mid-stream
    assert call.status.status_code == StatusCode.ERROR and attrs(call)["error.type"] == "cancelled"
    assert attrs(call)["gen_ai.response.time_to_first_chunk"] >= 0 and "gen_ai.usage.input_tokens" not in attrs(call)
    [agent] = named(tree, "invoke_agent gpt")
    assert agent.status.status_code == StatusCode.ERROR
    assert (attrs(agent)["error.type"], attrs(agent)["cogmesh.outcome"]) == ("cancelled", "error")
