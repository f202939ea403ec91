"""The loop's limits, budgets, failover, parallel tools, breakers, structured output and interceptors.

The model here is scripted (the provider adapters have their own tests against real
SDKs); tools are real coroutines.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import pytest
from google.protobuf import json_format

from cogmesh.common.v1 import events_pb2
from services.lib.llm import (
    ChatMessage,
    ModelError,
    TextDelta,
    ToolCallChunk,
    ToolCallRequest,
    ToolSchema,
    UsageChunk,
)
from services.runtime.budget import CostBudget, CostTracker, Limits
from services.runtime.calculator import CALCULATOR_SCHEMA, calculator_tool
from services.runtime.engines import Capabilities, RuntimeRegistry, UnknownRuntime, default_registry
from services.runtime.local_model import LocalModel
from services.runtime.loop import run_turn
from services.runtime.phases import Intercept, Phase, PhaseContext
from services.runtime.structured import RESPOND_TOOL, OutputSpec
from services.runtime.tools.base import Tool, ToolContext, ToolError, ToolUnavailable, builtin
from services.runtime.tools.breaker import BreakerRegistry, CircuitState
from services.runtime.turn import ModelChoice, ModelInfo, Turn, Verdict
from tests.fakes.models import ScriptedModel, calls, text

INFO = ModelInfo("primary-1", "acme", input_per_million_usd=1000.0, output_per_million_usd=2000.0)


async def allow(name: str, arguments: Mapping[str, Any]) -> Verdict:
    return Verdict(True, "ok", arguments)


def make_turn(model: Any, **overrides: Any) -> Turn:
    values: dict[str, Any] = {
        "turn_id": "t1",
        "system_prompt": "be brief",
        "history": [],
        "user_text": "go",
        "model": model,
        "model_info": INFO,
        "tools": {"calculator": builtin(CALCULATOR_SCHEMA, calculator_tool)},
        "check_tool": allow,
        "retry_base_s": 0.001,
        "tool_retry_base_s": 0.001,
    }
    return Turn(**(values | overrides))


async def run(turn: Turn) -> list[events_pb2.RuntimeEvent]:
    async def collect() -> list[events_pb2.RuntimeEvent]:
        return [event async for event in run_turn(turn)]

    return await asyncio.wait_for(collect(), 10)


def kinds(events: list[events_pb2.RuntimeEvent]) -> list[str]:
    return [e.WhichOneof("payload") or "" for e in events]


def notices(events: list[events_pb2.RuntimeEvent], kind: str) -> list[events_pb2.NativeNotice]:
    return [e.native_notice for e in events if e.HasField("native_notice") and e.native_notice.kind == kind]


def finished(events: list[events_pb2.RuntimeEvent]) -> list[events_pb2.ToolCallFinished]:
    """Tool results in call order (calls refused without running are reported first)."""
    done = [e.tool_call_finished for e in events if e.HasField("tool_call_finished")]
    return sorted(done, key=lambda f: f.correlation_id)


def tool(name: str, function: Any, **options: Any) -> Tool:
    schema = ToolSchema(name, name, {"type": "object"})

    async def run_it(arguments: Mapping[str, Any], context: ToolContext) -> str:
        return str(await function(arguments))

    return Tool(schema, run_it, **options)


# --------------------------------------------------------------------------- failover and retries


async def test_failover_to_the_next_model_is_visible_as_a_notice() -> None:
    primary = ScriptedModel([ModelError("HTTP 503", kind="provider_error", retryable=True)] * 3)
    backup = ScriptedModel([text("from backup")])
    fallback = ModelChoice(ModelInfo("backup-1", "other"), backup)
    turn = make_turn(primary, fallbacks=[fallback], model_retries=2)
    events = await run(turn)

    assert len(primary.calls) == 3  # the first call and two retries
    assert [n.metadata["reason"] for n in notices(events, "retry")] == ["provider_error", "provider_error"]
    failover = notices(events, "failover")
    assert len(failover) == 1
    assert json_format.MessageToDict(failover[0].metadata) == {
        "from_model": "primary-1",
        "to_model": "backup-1",
        "reason": "provider_error",
    }
    final = events[-1].final
    assert final.text == "from backup" and final.model == "backup-1"
    assert list(final.metrics.failed_models) == ["primary-1"]


async def test_rate_limit_waits_for_retry_after_then_succeeds() -> None:
    model = ScriptedModel([ModelError("429", kind="rate_limited", retryable=True, retry_after_s=0.2), text("ok")])
    started = time.perf_counter()
    events = await run(make_turn(model))
    assert time.perf_counter() - started >= 0.2
    (notice,) = notices(events, "retry")
    assert notice.metadata["wait_s"] == 0.2
    assert events[-1].final.text == "ok"


async def test_retry_after_longer_than_allowed_fails_over_at_once() -> None:
    primary = ScriptedModel([ModelError("429", kind="rate_limited", retryable=True, retry_after_s=120)])
    backup = ScriptedModel([text("backup answers")])
    turn = make_turn(primary, fallbacks=[ModelChoice(ModelInfo("b", "x"), backup)], retry_max_wait_s=1)
    events = await run(turn)
    assert len(primary.calls) == 1 and not notices(events, "retry")
    assert events[-1].final.model == "b"


async def test_context_length_fails_over_without_retrying() -> None:
    primary = ScriptedModel([ModelError("too long", kind="context_length")])
    backup = ScriptedModel([text("big context model")])
    events = await run(make_turn(primary, fallbacks=[ModelChoice(ModelInfo("b", "x"), backup)]))
    assert len(primary.calls) == 1 and events[-1].final.model == "b"


async def test_no_failover_for_a_bad_request_and_the_error_is_typed() -> None:
    primary = ScriptedModel([ModelError("bad field", kind="invalid_request")])
    backup = ScriptedModel([text("never")])
    events = await run(make_turn(primary, fallbacks=[ModelChoice(ModelInfo("b", "x"), backup)]))
    error = events[-1].error
    assert (error.kind, error.retryable) == (events_pb2.ERROR_KIND_INVALID_REQUEST, False)
    assert "primary-1" in error.message and not backup.calls


async def test_a_stream_cut_after_text_keeps_the_text_and_is_not_repeated() -> None:
    cut = ModelError("connection lost", kind="provider_error", retryable=True)
    primary = ScriptedModel([(text("half an ans", usage=(1, 1))[:1], cut)])
    backup = ScriptedModel([text("other")])
    turn = make_turn(primary, fallbacks=[ModelChoice(ModelInfo("b", "x"), backup)])
    events = await run(turn)
    error = events[-1].error
    assert (error.kind, error.retryable, error.partial_text) == (
        events_pb2.ERROR_KIND_PROVIDER_ERROR,
        True,
        "half an ans",
    )
    assert len(primary.calls) == 1 and not backup.calls
    assert turn.new_messages[-1] == ChatMessage("assistant", "half an ans")


# --------------------------------------------------------------------------- cost


async def test_cost_budget_error_ends_the_turn_typed() -> None:
    model = ScriptedModel([calls(("calculator", {"expression": "1+1"}), usage=(100, 50)), text("never")])
    turn = make_turn(model, cost_budget=CostBudget(max_total_tokens=120))
    events = await run(turn)
    error = events[-1].error
    assert error.kind == events_pb2.ERROR_KIND_BUDGET_EXCEEDED
    assert "tokens 150 > 120" in error.message
    assert "tool_call_started" not in kinds(events)  # the over-budget step's tools are not run


async def test_cost_budget_warn_reports_once_and_goes_on() -> None:
    model = ScriptedModel([calls(("calculator", {"expression": "1+1"})), text("2")])
    turn = make_turn(model, cost_budget=CostBudget(max_cost_usd=0.001, action="warn"))
    events = await run(turn)
    assert len(notices(events, "budget_warning")) == 1
    final = events[-1].final
    usage = [e.usage for e in events if e.HasField("usage")]
    assert final.metrics.cost_usd == pytest.approx(2 * (10 * 1000 + 5 * 2000) / 1e6)
    assert usage[-1].turn_cost_usd == pytest.approx(final.metrics.cost_usd)


async def test_session_budget_counts_earlier_turns() -> None:
    session = CostTracker()
    session.record("primary-1", 1000, 0, 0.0)
    model = ScriptedModel([text("hi", usage=(10, 5))])
    turn = make_turn(model, session_cost=session, cost_budget=CostBudget(max_total_tokens=1010, per_session=True))
    events = await run(turn)
    assert events[-1].error.kind == events_pb2.ERROR_KIND_BUDGET_EXCEEDED
    assert "session" in events[-1].error.message
    assert session.total_tokens == 1015


async def test_final_metrics_carry_session_totals_and_runtime() -> None:
    session = CostTracker()
    session.record("m", 7, 3, 0.5)
    events = await run(make_turn(ScriptedModel([text("x", usage=(10, 5))]), session_cost=session, runtime="eng"))
    metrics = events[-1].final.metrics
    assert (metrics.session_total_tokens, metrics.runtime) == (25, "eng")
    assert metrics.session_cost_usd == pytest.approx(0.5 + (10 * 1000 + 5 * 2000) / 1e6)


# --------------------------------------------------------------------------- tool limits


async def test_tool_limit_finalize_takes_the_tools_away() -> None:
    model = ScriptedModel([calls(("calculator", {"expression": "1+1"}), ("calculator", {"expression": "2+2"}))])
    turn = make_turn(model, limits=Limits(max_tool_calls=1))
    events = await run(turn)
    results = finished(events)
    assert [r.ok for r in results] == [True, False]
    assert "tool call limit (1)" in results[1].result_summary
    (notice,) = notices(events, "tool_limit")
    assert "answer without tools" in notice.text
    messages, offered = model.calls[1]
    assert offered == [] and messages[-1].role == "system" and "limit" in messages[-1].content
    assert events[-1].final.text == "done"


async def test_tool_limit_error_mode_ends_the_turn() -> None:
    model = ScriptedModel([calls(("calculator", {"expression": "1+1"}))])
    events = await run(make_turn(model, limits=Limits(max_tool_calls=1, on_tool_limit="error")))
    assert events[-1].error.kind == events_pb2.ERROR_KIND_BUDGET_EXCEEDED


async def test_mcp_limit_stops_offering_mcp_tools() -> None:
    async def echo(arguments: Mapping[str, Any]) -> str:
        return "e"

    mcp = tool("mcp__srv__echo", echo, source="mcp", server="srv")
    model = ScriptedModel([calls(("mcp__srv__echo", {}), ("mcp__srv__echo", {})), text("end")])
    tools = {"calculator": builtin(CALCULATOR_SCHEMA, calculator_tool), mcp.name: mcp}
    events = await run(make_turn(model, tools=tools, limits=Limits(max_mcp_calls=1)))
    assert [r.ok for r in finished(events)] == [True, False]
    assert "MCP tool call limit (1)" in finished(events)[1].result_summary
    assert model.calls[1][1] == ["calculator"]


async def test_loop_limit() -> None:
    model = ScriptedModel([calls(("calculator", {"expression": "1+1"}))] * 5)
    events = await run(make_turn(model, limits=Limits(max_iterations=2)))
    assert events[-1].error.kind == events_pb2.ERROR_KIND_LOOP_LIMIT and "2 model calls" in events[-1].error.message


async def test_wall_clock_limit_ends_the_turn_with_its_partial_text() -> None:
    model = ScriptedModel([text(*[f"w{i} " for i in range(100)])], delay_s=0.02)
    turn = make_turn(model, limits=Limits(max_wall_clock_s=0.15))
    events = await run(turn)
    error = events[-1].error
    assert error.kind == events_pb2.ERROR_KIND_DEADLINE_EXCEEDED and "0.15s" in error.message
    assert error.partial_text.startswith("w0 w1 ") and turn.new_messages[-1].content == error.partial_text


# --------------------------------------------------------------------------- tools


async def test_parallel_tool_calls_run_concurrently_up_to_the_limit() -> None:
    # Concurrency is counted, not timed: the most calls running at once.
    async def three_naps(limit: int) -> tuple[int, list[events_pb2.RuntimeEvent], Turn]:
        running = peak = 0
        all_in = asyncio.Event()

        async def nap(arguments: Mapping[str, Any]) -> str:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            if running == limit:
                all_in.set()
            await all_in.wait()  # no call ends before `limit` of them run at once
            running -= 1
            if running == 0:
                all_in.clear()
            return f"slept {arguments['n']}"

        script = ScriptedModel([calls(("nap", {"n": 0}), ("nap", {"n": 1}), ("nap", {"n": 2})), text("end")])
        turn = make_turn(script, tools={"nap": tool("nap", nap)}, limits=Limits(max_parallel_tools=limit))
        events = await run(turn)
        return peak, events, turn

    peak, events, turn = await three_naps(3)
    assert peak == 3
    assert kinds(events)[2:8] == ["tool_call_started"] * 3 + ["tool_call_finished"] * 3
    peak, events, turn = await three_naps(1)
    assert peak == 1
    tool_messages = [m for m in turn.new_messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_messages] == ["c0", "c1", "c2"]  # call order, whatever finished first
    assert [m.content for m in tool_messages] == ["slept 0", "slept 1", "slept 2"]


async def test_invalid_arguments_go_back_to_the_model_without_running_the_tool() -> None:
    ran = []

    async def never(arguments: Mapping[str, Any]) -> str:
        ran.append(arguments)
        return "ran"

    calc = builtin(CALCULATOR_SCHEMA, never)
    bad = [ToolCallChunk(ToolCallRequest("x1", "calculator", {}, "the arguments are not valid JSON")), UsageChunk(1, 1)]
    model = ScriptedModel([calls(("calculator", {"expr": 1})), bad, text("gave up")])
    events = await run(make_turn(model, tools={"calculator": calc}))
    results = finished(events)
    assert "invalid arguments for calculator" in results[0].result_summary
    assert "'expression' is a required property" in results[0].result_summary
    assert "not valid JSON" in results[1].result_summary
    assert not ran and events[-1].final.text == "gave up"


async def test_retries_then_circuit_breaker_per_server() -> None:
    clock = [0.0]
    breakers = BreakerRegistry(failure_threshold=3, cooldown_s=30, clock=lambda: clock[0])
    attempts = []
    healthy = [False]

    async def remote(arguments: Mapping[str, Any]) -> str:
        attempts.append(1)
        if not healthy[0]:
            raise ToolUnavailable("connection refused")
        return "fine"

    flaky = tool("flaky", remote, source="remote", server="srv", retries=1)
    model = ScriptedModel([calls(("flaky", {})), calls(("flaky", {})), text("end")])
    events = await run(make_turn(model, tools={"flaky": flaky}, breakers=breakers))
    results = finished(events)
    assert [r.attempts for r in results] == [2, 1]  # 3 failures open the circuit during the second call
    assert breakers.get("srv").state is CircuitState.OPEN
    assert len(attempts) == 3 and "connection refused" in results[0].result_summary

    model = ScriptedModel([calls(("flaky", {})), text("end")])
    events = await run(make_turn(model, tools={"flaky": flaky}, breakers=breakers))
    assert "circuit open" in finished(events)[0].result_summary and len(attempts) == 3  # refused without a call

    clock[0] += 31  # cooldown over: one probe goes through, and it succeeds
    healthy[0] = True
    model = ScriptedModel([calls(("flaky", {})), text("end")])
    events = await run(make_turn(model, tools={"flaky": flaky}, breakers=breakers))
    assert finished(events)[0].ok and breakers.get("srv").state is CircuitState.CLOSED


async def test_a_tool_error_is_not_retried_and_keeps_the_circuit_closed() -> None:
    breakers = BreakerRegistry(failure_threshold=1)
    attempts = []

    async def refuse(arguments: Mapping[str, Any]) -> str:
        attempts.append(1)
        raise ToolError("no such city")

    model = ScriptedModel([calls(("w", {})), text("sorry")])
    w = tool("w", refuse, source="remote", server="weather", retries=3)
    events = await run(make_turn(model, tools={"w": w}, breakers=breakers))
    assert len(attempts) == 1 and finished(events)[0].result_summary == "error: no such city"
    assert breakers.get("weather").state is CircuitState.CLOSED


async def test_tool_call_events_carry_source_and_server() -> None:
    async def echo(arguments: Mapping[str, Any]) -> str:
        return "e"

    mcp = tool("mcp__srv__echo", echo, source="mcp", server="srv")
    events = await run(make_turn(ScriptedModel([calls(("mcp__srv__echo", {}))]), tools={mcp.name: mcp}))
    started = next(e.tool_call_started for e in events if e.HasField("tool_call_started"))
    assert (started.source, started.server, started.correlation_id) == ("mcp", "srv", "c0")


# --------------------------------------------------------------------------- structured output

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}, "unit": {"type": "string"}},
    "required": ["answer"],
}


async def test_structured_output_through_the_respond_tool() -> None:
    model = ScriptedModel([calls((RESPOND_TOOL, {"answer": 42, "unit": "m"}))])
    events = await run(make_turn(model, output=OutputSpec.of(SCHEMA)))
    final = events[-1].final
    assert json_format.MessageToDict(final.structured_output) == {"answer": 42, "unit": "m"}
    assert RESPOND_TOOL in model.calls[0][1]
    assert "tool_call_started" not in kinds(events)  # the respond tool is internal


async def test_invalid_structured_output_is_repaired_once() -> None:
    model = ScriptedModel([calls((RESPOND_TOOL, {"answer": "many"})), calls((RESPOND_TOOL, {"answer": 7}))])
    turn = make_turn(model, output=OutputSpec.of(SCHEMA))
    events = await run(turn)
    assert json_format.MessageToDict(events[-1].final.structured_output) == {"answer": 7}
    repair = model.calls[1][0][-1]
    assert repair.role == "tool" and "answer: 'many' is not of type 'integer'" in repair.content


async def test_structured_output_invalid_twice_is_a_typed_error() -> None:
    model = ScriptedModel([calls((RESPOND_TOOL, {"unit": "m"}))] * 2)
    events = await run(make_turn(model, output=OutputSpec.of(SCHEMA)))
    error = events[-1].error
    assert error.kind == events_pb2.ERROR_KIND_OUTPUT_INVALID and "'answer' is a required property" in error.message


async def test_structured_output_from_json_text_and_wrapped_schemas() -> None:
    model = ScriptedModel([text('Here: ```json\n{"answer": 3}\n```')])
    events = await run(make_turn(model, output=OutputSpec.of(SCHEMA)))
    assert json_format.MessageToDict(events[-1].final.structured_output) == {"answer": 3}

    listing = OutputSpec.of({"type": "array", "items": {"type": "string"}})
    model = ScriptedModel([calls((RESPOND_TOOL, {"value": ["a", "b"]}))])
    events = await run(make_turn(model, output=listing))
    assert json_format.MessageToDict(events[-1].final.structured_output) == ["a", "b"]

    model = ScriptedModel([text("not json"), text("still not")])
    events = await run(make_turn(model, output=OutputSpec.of(SCHEMA)))
    assert events[-1].error.kind == events_pb2.ERROR_KIND_OUTPUT_INVALID and len(model.calls) == 2


# --------------------------------------------------------------------------- interceptors


async def test_interceptors_change_prompt_args_and_results_and_can_stop() -> None:
    seen: list[Phase] = []

    async def hook(context: PhaseContext) -> Intercept | None:
        seen.append(context.phase)
        if context.phase is Phase.PRE_RUN:
            return Intercept(system_prompt="rewritten prompt")
        if context.phase is Phase.PRE_ACT:
            return Intercept(tool_args={"expression": "6 * 7"})
        if context.phase is Phase.POST_ACT:
            return Intercept(tool_result=context.tool_result + " (checked)")
        return None

    model = ScriptedModel([calls(("calculator", {"expression": "1 + 1"})), text("fine")])
    turn = make_turn(model, interceptors=[hook])
    events = await run(turn)
    assert model.calls[0][0][0].content == "rewritten prompt"
    started = next(e.tool_call_started for e in events if e.HasField("tool_call_started"))
    assert json_format.MessageToDict(started.arguments) == {"expression": "6 * 7"}
    assert [m.content for m in turn.new_messages if m.role == "tool"] == ["42 (checked)"]
    assert seen == [
        Phase.PRE_RUN,
        Phase.PRE_THINK,
        Phase.POST_THINK,
        Phase.PRE_ACT,
        Phase.POST_ACT,
        Phase.PRE_THINK,
        Phase.POST_THINK,
        Phase.POST_RUN,
    ]

    async def guard(context: PhaseContext) -> Intercept | None:
        return Intercept(stop="no arithmetic on Sundays") if context.phase is Phase.PRE_ACT else None

    model = ScriptedModel([calls(("calculator", {"expression": "1 + 1"}))])
    turn = make_turn(model, interceptors=[guard])
    events = await run(turn)
    assert events[-1].error.kind == events_pb2.ERROR_KIND_GUARDRAIL and "Sundays" in events[-1].error.message
    assert [m.role for m in turn.new_messages] == ["user", "assistant", "tool"]  # the call is answered


# --------------------------------------------------------------------------- engines


def test_runtime_selection_order_and_unknown_names() -> None:
    registry = default_registry()
    assert registry.list_available() == ["cogmesh", "single-shot"]
    assert registry.select().name == "cogmesh"
    assert registry.select(env_default="single-shot").name == "single-shot"
    assert registry.select(agent_runtime="cogmesh", env_default="single-shot").name == "cogmesh"
    assert registry.select("single-shot", "cogmesh", "cogmesh").name == "single-shot"
    with pytest.raises(UnknownRuntime, match="'nope' \\(from the agent's runtime\\)"):
        registry.select(agent_runtime="nope")
    assert registry.get_capabilities("cogmesh") == Capabilities(
        tools=True,
        mcp=True,
        streaming=True,
        cancellation=True,
        structured_output=True,
        failover=True,
        cost_budget=True,
        pause_resume=True,
        delegation=True,
    )
    custom = RuntimeRegistry(default="x")
    assert not custom.is_registered("x")
    custom.register("x", run_turn)
    assert custom.unregister("x") and not custom.unregister("x")


async def test_single_shot_engine_makes_one_call_without_tools() -> None:
    engine = default_registry().select("single-shot")
    turn = make_turn(LocalModel())
    turn.user_text = "What is 2 + 2?"
    events = [e async for e in engine.run(turn)]
    assert events[-1].final.text == "2 + 2 = 4." and events[-1].final.metrics.model_calls == 1


async def test_cancel_during_tools_keeps_the_step_text_once() -> None:
    started = asyncio.Event()

    async def hang(arguments: Mapping[str, Any]) -> str:
        started.set()
        await asyncio.sleep(60)
        return "never"

    step = [TextDelta("Let me check."), ToolCallChunk(ToolCallRequest("c0", "slow", {})), UsageChunk(1, 1)]
    turn = make_turn(ScriptedModel([step]), tools={"slow": tool("slow", hang)})
    task = asyncio.create_task(run(turn))
    await asyncio.wait_for(started.wait(), 5)
    assert turn.request_cancel()
    events = await task
    assert events[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
    assert events[-1].error.partial_text == "Let me check."
    assert [(m.role, m.content) for m in turn.new_messages] == [
        ("user", "go"),
        ("assistant", "Let me check."),
        ("tool", "error: the turn was cancelled before this tool call finished"),
    ]
