"""The agent loop's own overhead per model step and per tool call, against calling the model adapter directly.

    .venv/bin/python -m bench.runtime [--iterations N]

The model is the built-in zero-latency local model (`cogmesh-local`), so what is
measured is the loop: events, usage and cost, the tool budget, argument checks
against the tool's JSON Schema, the policy hook (an in-process allow), timeouts,
circuit breakers and message bookkeeping. Each baseline does the same model and
tool work by hand in the same run: consuming the adapter's stream and calling the
tool coroutine directly. Overhead = (loop time - baseline time) / model steps, and
per tool call for the tool-heavy rows. Two more rows price what round two added, still
without the network: a policy link that answers at once at all seven phases (the loop's
own cost of the phases: contexts, merging, event buffering), and a turn that pauses
for an approval, goes through its checkpoint bytes (JSON encode and decode) and
resumes on a fresh Turn. Writes the table to bench/results/runtime.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from services.lib.llm import (
    ChatMessage,
    ModelChunk,
    TextDelta,
    ToolCallChunk,
    ToolCallRequest,
    ToolSchema,
    UsageChunk,
)
from services.runtime.budget import Limits
from services.runtime.calculator import CALCULATOR_SCHEMA, calculator_tool
from services.runtime.local_model import LocalModel
from services.runtime.loop import run_turn
from services.runtime.phases import Intercept, Phase, PhaseContext
from services.runtime.steps.state import decode_snapshot, encode_snapshot
from services.runtime.tools.base import builtin
from services.runtime.turn import Decision, ModelInfo, ResumePoint, Turn, Verdict, interrupt_matcher

RESULTS = Path(__file__).resolve().parent / "results" / "runtime.md"
INFO = ModelInfo("cogmesh-local", "local", 1.0, 2.0)
LIMIT_US = 1000.0  # the bound: under 1 ms of loop overhead per step


class FanOutModel:
    """Zero-latency model: first step calls the calculator `fan_out` times, second step answers."""

    name = "fan-out"

    def __init__(self, fan_out: int) -> None:
        self.fan_out = fan_out

    async def stream(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSchema]) -> AsyncIterator[ModelChunk]:
        if messages[-1].role == "tool":
            yield TextDelta("done")
        else:
            for i in range(self.fan_out):
                yield ToolCallChunk(ToolCallRequest(f"c{i}", "calculator", {"expression": f"{i} + 1"}))
        yield UsageChunk(10, 5)


async def allow(name: str, arguments: Mapping[str, Any]) -> Verdict:
    return Verdict(True, "ok", arguments)


class InstantPolicy:
    """The policy link answering at once, with work at every phase: the loop's own cost of the phases."""

    phases = frozenset(Phase)
    state: dict[str, Any] | None = None

    async def run_phase(self, context: PhaseContext) -> Intercept:
        return Intercept()

    async def check_calls(
        self, calls: Sequence[tuple[ToolCallRequest, Mapping[str, Any]]], context: PhaseContext
    ) -> list[Verdict]:
        return [Verdict(True, "ok", arguments) for _, arguments in calls]

    async def check_result(self, context: PhaseContext) -> Intercept:
        return Intercept()


def turn(model: Any, text: str, **extra: Any) -> Turn:
    return Turn(
        turn_id="bench",
        system_prompt="You are a benchmark.",
        history=[],
        user_text=text,
        model=model,
        model_info=INFO,
        tools={"calculator": builtin(CALCULATOR_SCHEMA, calculator_tool)},
        check_tool=allow,
        limits=Limits(max_parallel_tools=8),
        **extra,
    )


async def loop_turn(model: Any, text: str, **extra: Any) -> int:
    events = 0
    async for _ in run_turn(turn(model, text, **extra)):
        events += 1
    return events


APPROVE = interrupt_matcher({"calculator": True})


async def paused_turn(model: Any, text: str) -> int:
    """Pause for an approval, checkpoint bytes out and back in, resume on a fresh Turn."""
    first = turn(model, text, interrupt_on=APPROVE)
    events = 0
    async for _ in run_turn(first):
        events += 1
    assert first.pause is not None
    snapshot = decode_snapshot(encode_snapshot(first.pause.snapshot))
    second = turn(model, text, interrupt_on=APPROVE, resume=ResumePoint(snapshot, Decision("approve")))
    async for _ in run_turn(second):
        events += 1
    return events


async def drain(model: Any, messages: list[ChatMessage], tools: list[ToolSchema]) -> list[ModelChunk]:
    return [chunk async for chunk in model.stream(messages, tools)]


async def direct_text(model: Any, text: str) -> None:
    """What a text-only turn costs without the loop: one pass over the adapter's stream."""
    await drain(model, [ChatMessage("system", "You are a benchmark."), ChatMessage("user", text)], [CALCULATOR_SCHEMA])


async def direct_tools(model: Any, text: str) -> None:
    """A tool turn by hand: model step, every tool call, model step."""
    messages = [ChatMessage("system", "You are a benchmark."), ChatMessage("user", text)]
    chunks = await drain(model, messages, [CALCULATOR_SCHEMA])
    requests = [c.call for c in chunks if isinstance(c, ToolCallChunk)]
    messages.append(ChatMessage("assistant", "", tuple(requests)))
    for request in requests:
        result = await calculator_tool(request.arguments)
        messages.append(ChatMessage("tool", result, tool_call_id=request.id, name=request.name))
    await drain(model, messages, [CALCULATOR_SCHEMA])


async def measure(work: Callable[[], Awaitable[Any]], iterations: int) -> float:
    """Microseconds per call, best of 5 rounds of `iterations` calls (after a warm-up).

    Best, not median: on a shared machine other processes only ever add time.
    """
    for _ in range(max(10, iterations // 10)):
        await work()
    rounds = []
    for _ in range(5):
        gc.collect()
        started = time.perf_counter()
        for _ in range(iterations):
            await work()
        rounds.append((time.perf_counter() - started) / iterations * 1e6)
    return min(rounds)


async def main(iterations: int) -> str:
    local = LocalModel()
    echo = "hello there, how are you today?"
    calc = "What is 17 * 23?"
    fan = FanOutModel(5)
    policy = InstantPolicy()
    cases = [
        # name, model steps, tool calls, baseline, loop
        ("text reply (1 step, 0 tools)", 1, 0, lambda: direct_text(local, echo), lambda: loop_turn(local, echo)),
        ("calculator turn (2 steps, 1 tool)", 2, 1, lambda: direct_tools(local, calc), lambda: loop_turn(local, calc)),
        ("5 parallel tools (2 steps, 5 tools)", 2, 5, lambda: direct_tools(fan, "go"), lambda: loop_turn(fan, "go")),
        (
            "calculator turn, policy at all 7 phases (in-process)",
            2,
            1,
            lambda: direct_tools(local, calc),
            lambda: loop_turn(local, calc, policy=policy),
        ),
        (
            "calculator turn paused for approval, checkpoint, resumed",
            2,
            1,
            lambda: direct_tools(local, calc),
            lambda: paused_turn(local, calc),
        ),
    ]
    lines = [
        "# Runtime loop overhead",
        "",
        f"Built-in zero-latency model, {iterations} turns x 5 rounds, best round; baseline = the same model stream(s) "
        "and tool calls done by hand in the same run.",
        "",
        "| case | baseline µs/turn | loop µs/turn | ratio | overhead µs/step | overhead µs/tool call | < 1 ms/step |",
        "|---|---:|---:|---:|---:|---:|:---:|",
    ]
    worst = 0.0
    for name, steps, tools, baseline, looped in cases:
        base_us = await measure(baseline, iterations)
        loop_us = await measure(looped, iterations)
        overhead = loop_us - base_us
        per_step = overhead / steps
        per_tool = f"{overhead / tools:.1f}" if tools else "-"
        worst = max(worst, per_step)
        ok = "yes" if per_step < LIMIT_US else "NO"
        ratio = loop_us / base_us
        lines.append(f"| {name} | {base_us:.1f} | {loop_us:.1f} | {ratio:.2f}x | {per_step:.1f} | {per_tool} | {ok} |")
    lines += ["", f"Worst overhead per model step: {worst:.1f} µs ({worst / LIMIT_US:.1%} of the 1 ms bound).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=400)
    args = parser.parse_args()
    table = asyncio.run(main(args.iterations))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(table, encoding="utf-8")
    print(table)
