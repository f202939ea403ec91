from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from cogmesh.common.v1 import events_pb2
from services.lib.llm import ChatMessage, ModelChunk, ToolCallChunk, ToolCallRequest, ToolSchema, UsageChunk
from services.runtime.budget import Limits
from services.runtime.calculator import CALCULATOR_SCHEMA, calculator_tool
from services.runtime.local_model import LocalModel
from services.runtime.loop import run_turn
from services.runtime.tools.base import builtin
from services.runtime.turn import ModelInfo, Turn, Verdict

INFO = ModelInfo("cogmesh-local", "local", input_per_million_usd=1.0, output_per_million_usd=2.0)


async def allow(name: str, arguments: Mapping[str, Any]) -> Verdict:
    return Verdict(True, "ok", arguments)


def make_turn(text: str, **overrides: Any) -> Turn:
    values: dict[str, Any] = {
        "turn_id": "t1",
        "system_prompt": "be brief",
        "history": [],
        "user_text": text,
        "model": LocalModel(),
        "model_info": INFO,
        "tools": {"calculator": builtin(CALCULATOR_SCHEMA, calculator_tool)},
        "check_tool": allow,
    }
    return Turn(**(values | overrides))


async def run(turn: Turn) -> list[events_pb2.RuntimeEvent]:
    return [event async for event in run_turn(turn)]


def kinds(events: list[events_pb2.RuntimeEvent]) -> list[str]:
    return [e.WhichOneof("payload") or "" for e in events]


async def test_calculator_turn_events_messages_and_cost() -> None:
    turn = make_turn("What is 17 * 23?")
    events = await run(turn)
    assert kinds(events) == [
        "status",
        "usage",
        "tool_call_started",
        "tool_call_finished",
        "assistant_delta",
        "assistant_delta",
        "usage",
        "final",
    ]
    assert events[3].tool_call_finished.ok and events[3].tool_call_finished.result_summary == "391"
    final = events[-1].final
    assert final.text == "17 * 23 = 391."
    assert (final.metrics.model_calls, final.metrics.tool_calls) == (2, 1)
    usage = [e.usage for e in events if e.HasField("usage")]
    tokens_in = sum(u.input_tokens for u in usage)
    tokens_out = sum(u.output_tokens for u in usage)
    assert final.metrics.cost_usd == (tokens_in * 1.0 + tokens_out * 2.0) / 1e6
    assert [m.role for m in turn.new_messages] == ["user", "assistant", "tool", "assistant"]
    assert all(e.turn_id == "t1" for e in events)


async def test_denied_tool_result_goes_back_to_the_model() -> None:
    async def deny(name: str, arguments: Mapping[str, Any]) -> Verdict:
        return Verdict(False, f"tool {name!r} is denied by policy", {})

    events = await run(make_turn("What is 2 + 2?", check_tool=deny))
    finished = next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))
    assert not finished.ok and "denied by policy" in finished.result_summary
    assert "failed" in events[-1].final.text and "denied by policy" in events[-1].final.text


async def test_a_failing_or_slow_tool_does_not_end_the_turn() -> None:
    async def slow(arguments: Mapping[str, Any]) -> str:
        await asyncio.sleep(5)
        return "late"

    tool = builtin(CALCULATOR_SCHEMA, slow)
    events = await run(make_turn("What is 2 + 2?", tools={"calculator": tool}, limits=Limits(tool_timeout_s=0.05)))
    finished = next(e.tool_call_finished for e in events if e.HasField("tool_call_finished"))
    assert not finished.ok and "timed out" in finished.result_summary
    assert events[-1].HasField("final")


class LoopingModel:
    name = "looper"

    async def stream(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> AsyncIterator[ModelChunk]:
        yield ToolCallChunk(ToolCallRequest(f"c{len(messages)}", "calculator", {"expression": "1+1"}))
        yield UsageChunk(1, 1)


async def test_loop_limit_ends_with_a_typed_error() -> None:
    events = await run(make_turn("go", model=LoopingModel(), limits=Limits(max_iterations=3)))
    assert events[-1].error.kind == events_pb2.ERROR_KIND_LOOP_LIMIT
    assert kinds(events).count("tool_call_started") == 3


async def test_cancel_mid_stream_keeps_partial_text() -> None:
    turn = make_turn("hello there", model=LocalModel(delay_s=0.02))
    seen: list[events_pb2.RuntimeEvent] = []
    async for event in run_turn(turn):
        seen.append(event)
        if event.HasField("assistant_delta") and kinds(seen).count("assistant_delta") == 2:
            assert turn.request_cancel()
    error = seen[-1].error
    assert error.kind == events_pb2.ERROR_KIND_CANCELLED and not error.retryable
    streamed = "".join(e.assistant_delta.text for e in seen if e.HasField("assistant_delta"))
    assert error.partial_text == streamed != ""
    assert turn.new_messages[-1].content == streamed
    assert not turn.request_cancel()  # the turn is over: a second cancel is harmless


async def test_cancel_interrupts_a_pending_tool_and_closes_the_call() -> None:
    started = asyncio.Event()

    async def hang(arguments: Mapping[str, Any]) -> str:
        started.set()
        await asyncio.sleep(60)
        return "never"

    turn = make_turn("What is 1 + 1?", tools={"calculator": builtin(CALCULATOR_SCHEMA, hang)})
    task = asyncio.create_task(run(turn))
    await asyncio.wait_for(started.wait(), 2)
    assert turn.request_cancel()
    events = await asyncio.wait_for(task, 2)
    assert events[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
    assert [m.role for m in turn.new_messages] == ["user", "assistant", "tool"]
    assert turn.new_messages[-1].content.startswith("error: the turn was cancelled")
