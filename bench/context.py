"""BuildContext latency: a session of 200 messages and 20 skills, cold and warm, over gRPC and in-process.

    .venv/bin/python -m bench.context [--iterations N]

Every row builds the same prompt (the shipped `default` agent, a goal, a phase,
20 skill instructions, 200 recent messages, memory, profile and a summary under
the default 8000-token budget). The baseline is the cold in-process build with
the service's default counter (tiktoken): a fresh builder, so nothing is
memoised. Rows are timed round-robin so that they share the machine's load.
"Warm" repeats identical inputs, which a session in a steady phase does on
every turn. The gRPC rows call a context server started in this
process on port 0 (client and server share the event loop and the CPU); the
cold gRPC row changes the goal on every call so the server cannot
reuse a build. Writes the table to bench/results/context.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc

from cogmesh.common.v1 import messages_pb2
from cogmesh.context.v1 import context_pb2, context_pb2_grpc
from services.context import main as context_main
from services.context.settings import ContextSettings
from services.kit.errors import Violations
from services.kit.server import start
from services.lib.agents import AgentRegistry
from services.lib.context.api import budget_from_proto, recalled_text
from services.lib.context.builder import ContextBuilder, ContextInput
from services.lib.context.prompt_files import PromptFiles
from services.lib.tokens import TokenCounter, make_counter

RESULTS = Path(__file__).resolve().parent / "results" / "context.md"
MESSAGES, SKILLS = 200, 20


def request(goal_suffix: str = "") -> context_pb2.BuildContextRequest:
    roles = [messages_pb2.ROLE_USER, messages_pb2.ROLE_ASSISTANT]
    return context_pb2.BuildContextRequest(
        agent="default",
        user_text="What should I do next?",
        goal="Help the user plan a three-week trip through Japan on a mid-range budget" + goal_suffix,
        phase="itinerary drafting",
        skill_instructions=[
            f"Skill {i}: when the user asks about topic {i}, call tool_{i} first, summarise its answer in two "
            f"sentences and cite the source; never invent prices or opening hours for topic {i}."
            for i in range(SKILLS)
        ],
        last_messages=[
            messages_pb2.Message(
                role=roles[i % 2],
                content=f"Message {i}: "
                + ("I would like to see temples and gardens in Kyoto, then Osaka food. " if i % 2 == 0 else "")
                + (f"Here is a plan for day {i}: morning sights, lunch nearby, an evening walk. " if i % 2 else ""),
            )
            for i in range(MESSAGES)
        ],
        memory={f"fact_{i}": f"the user mentioned preference number {i} earlier" for i in range(10)},
        user_profile={"name": "Ada", "language": "English", "budget": "mid-range", "diet": "vegetarian"},
        summary="Earlier the user compared Japan with Korea and chose Japan for spring; flights are booked.",
    )


def input_of(req: context_pb2.BuildContextRequest, registry: AgentRegistry) -> ContextInput:
    problems = Violations()
    budget = budget_from_proto(req.budget, problems)
    return ContextInput(
        agent=registry.get(req.agent),
        role_id=req.role_id,
        user_text=req.user_text,
        goal=req.goal,
        phase=req.phase,
        skill_instructions=tuple(req.skill_instructions),
        last_messages=tuple(recalled_text(m) for m in req.last_messages),
        memory=dict(req.memory),
        user_profile=dict(req.user_profile),
        summary=req.summary,
        budget=budget,
    )


Call = Callable[[int], Awaitable[object]]


async def interleaved(calls: list[tuple[str, Call]], iterations: int) -> list[tuple[str, list[float]]]:
    """Time every call once per round, round after round, so all rows see the same machine load."""
    for i in range(5):  # warm-up: imports, channel, first vocabulary use
        for _, call in calls:
            await call(-1 - i)
    samples: dict[str, list[float]] = {label: [] for label, _ in calls}
    for i in range(iterations):
        for label, call in calls:
            started = time.perf_counter()
            await call(i)
            samples[label].append((time.perf_counter() - started) * 1e3)
    return [(label, samples[label]) for label, _ in calls]


async def run(iterations: int) -> str:
    registry = AgentRegistry.default()
    req = request()
    calls: list[tuple[str, Call]] = []

    for name in ("tiktoken", "script", "chars"):
        counter = make_counter(name)

        async def cold(i: int, counter: TokenCounter = counter) -> object:
            return ContextBuilder(PromptFiles(), counter).build(input_of(req, registry))

        calls.append((f"in-process, cold build ({name} counter)", cold))

    warm_builder = ContextBuilder(PromptFiles(), make_counter("tiktoken"))

    async def warm(i: int) -> object:
        return warm_builder.build(input_of(req, registry))

    calls.append(("in-process, warm rebuild (unchanged inputs)", warm))

    server = await start(context_main.build, ContextSettings(), "127.0.0.1:0")
    channel = grpc.aio.insecure_channel(server.address)
    stub = context_pb2_grpc.ContextServiceStub(channel)  # type: ignore[no-untyped-call]
    try:
        cold_requests = {i: request(f" (variant {i})") for i in range(-5, iterations)}

        async def grpc_cold(i: int) -> object:
            return await stub.BuildContext(cold_requests[i])

        async def grpc_warm(i: int) -> object:
            return await stub.BuildContext(req)

        calls.append(("gRPC BuildContext, cold (new inputs each call)", grpc_cold))
        calls.append(("gRPC BuildContext, warm rebuild (unchanged inputs)", grpc_warm))
        rows = await interleaved(calls, iterations)
        reply = await stub.BuildContext(req)
    finally:
        await channel.close()
        await server.stop(0)

    baseline = statistics.median(rows[0][1])
    lines = [
        f"# BuildContext latency: {MESSAGES} messages, {SKILLS} skills",
        "",
        f"Prompt: {reply.tokens_used} tokens (budget 8000), packs truncated or dropped: "
        f"{', '.join(reply.truncated_packs) or 'none'}. {iterations} rounds after 5 warm-up rounds, every "
        "row timed once per round (interleaved, so all rows share the machine's load); baseline = cold "
        "in-process build with the tiktoken counter (the service default).",
        "",
        "| build | median ms | p90 ms | ratio to baseline |",
        "|---|---:|---:|---:|",
    ]
    for label, samples in rows:
        median = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10)[-1] if len(samples) >= 10 else max(samples)
        lines.append(f"| {label} | {median:.3f} | {p90:.3f} | {median / baseline:.3f}x |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    table = asyncio.run(run(args.iterations))
    print(table)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(table, encoding="utf-8")


if __name__ == "__main__":
    main()
