"""What memory across sessions costs a turn: the memory context pack, and a pinned-scope API key.

    .venv/bin/python -m bench.memory_pack [--turns 60] [--memories 1000]

The suite runs as processes (as `cogmesh up` runs them), in memory, with the built-in local
model (no model server: the turn's own work is what is measured). Three kinds of turn, each
in a new session with the scope {end_user: u_bench}, whose namespace holds `--memories`
memories:

- **plain**: the agent without memory (the baseline);
- **pack**: the same agent with `memory.context` on: the runtime searches the end user's
  memories before it builds the prompt, which then carries the top 5;
- **pinned**: the plain agent, called with an API key that pins end_user (the gateway
  checks every session-addressed call against the pins: one GetSession more).

Kinds run in blocks of 10 turns, round-robin, so a busy machine slows them alike. Per kind:
p50/p99 of the time to the first token (assistant delta) and to the end of the turn, and the CPU of every
process of the suite (utime + stime from /proc, before and after each block) per turn.
Ratios are against `plain` in the same run. Writes bench/results/memory_pack.md.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.harness import median, percentile, suite, table, write_result
from bench.hotpath import cpu_seconds
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.memory.v1 import memory_pb2, memory_pb2_grpc
from gateway.auth import hash_key
from services.suite.supervisor import Supervisor

AGENTS = {
    "plain.yaml": "name: plain\nsystem_prompt: You help.\nmodel: local\ntools: [calculator]\n",
    "pack.yaml": "name: pack\nsystem_prompt: You help.\nmodel: local\ntools: [calculator]\n"
    "memory: {context: {enabled: true, limit: 5, max_tokens: 400, timeout_ms: 60000}}\n",
}
KEYS = {"bench-app": "", "bench-pinned": "{pin: {end_user: u_bench}}"}
SCOPE = {"end_user": "u_bench"}
WORDS = ["coffee", "tea", "green", "dark", "roast", "morning", "travel", "rome", "paris", "budget", "flight", "hotel"]
BLOCK = 10
MESSAGE = "What is 17 * 23? I like dark roast coffee."


@dataclass
class Kind:
    name: str
    agent: str
    key: str
    first_s: list[float] = field(default_factory=list)
    end_s: list[float] = field(default_factory=list)
    cpu_s: float = 0.0

    @property
    def turns(self) -> int:
        return len(self.end_s)


def suite_cpu(supervisor: Supervisor) -> float:
    return sum(cpu_seconds(c.process.pid) for c in supervisor.children.values() if c.process is not None)


async def one_turn(gateway: gateway_pb2_grpc.GatewayServiceStub, kind: Kind) -> None:
    metadata = (("authorization", f"Bearer {kind.key}"),)
    request = gateway_pb2.CreateSessionRequest(agent=kind.agent, scope=SCOPE)
    session = (await gateway.CreateSession(request, metadata=metadata, timeout=30)).session
    started, first = time.perf_counter(), 0.0
    stream = gateway.SendMessage(
        gateway_pb2.SendMessageRequest(session_id=session.session_id, content=MESSAGE), metadata=metadata, timeout=60
    )
    last = None
    async for reply in stream:
        if not first and any(e.HasField("assistant_delta") for e in reply.events):
            first = time.perf_counter() - started
        last = reply.events[-1]
    if last is None or not last.HasField("final") or not first:
        raise RuntimeError(f"{kind.name}: the turn did not end with a final answer: {last}")
    kind.first_s.append(first)
    kind.end_s.append(time.perf_counter() - started)


async def seed(channel: grpc.aio.Channel, count: int) -> None:
    memory = memory_pb2_grpc.MemoryServiceStub(channel)
    metadata = (("authorization", "Bearer bench-app"),)
    for i in range(count):
        text = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(6)) + f" note {i}"
        request = memory_pb2.PutMemoryRequest(namespace=["end_user=u_bench", "memories"], key=f"m{i}", text=text)
        await memory.PutMemory(request, metadata=metadata, timeout=30)


async def run(turns: int, memories: int) -> str:
    work = Path(tempfile.mkdtemp(prefix="cogmesh-bench-memory-pack-"))
    agents = work / "agents"
    agents.mkdir()
    for name, text in AGENTS.items():
        (agents / name).write_text(text)
    (work / "keys.yaml").write_text(
        "keys:\n"
        + "".join(
            f"  - {{sha256: {hash_key(k)}, tenant: bench, principal: {k}" + (f", scope: {r}" if r else "") + "}\n"
            for k, r in KEYS.items()
        )
    )
    kinds = [
        Kind("plain", "plain", "bench-app"),
        Kind("pack", "pack", "bench-app"),
        Kind("pinned", "plain", "bench-pinned"),
    ]
    keys = work / "keys.yaml"  # the seeding puts memories one by one: no tenant rate limit in the way
    running = suite(agents_dir=agents, api_keys_file=keys, dev_mode=False, tenant_rate_per_s=1e6, tenant_burst=1000000)
    async with running as (settings, supervisor), grpc.aio.insecure_channel(settings.gateway_addr) as channel:
        gateway = gateway_pb2_grpc.GatewayServiceStub(channel)
        await seed(channel, memories)
        for kind in kinds:  # warm-up: every code path once, not measured
            await one_turn(gateway, kind)
            kind.first_s.clear()
            kind.end_s.clear()
        for _ in range(max(1, turns // BLOCK)):
            for kind in kinds:
                before = suite_cpu(supervisor)
                for _ in range(BLOCK):
                    await one_turn(gateway, kind)
                kind.cpu_s += suite_cpu(supervisor) - before
    return report(kinds, memories)


def report(kinds: Sequence[Kind], memories: int) -> str:
    base = kinds[0]
    base_end, base_cpu = median(base.end_s), base.cpu_s / base.turns

    def ms(v: float) -> str:
        return f"{v * 1000:.1f}"

    rows = []
    for kind in kinds:
        end, cpu = median(kind.end_s), kind.cpu_s / kind.turns
        rows.append(
            [
                kind.name,
                kind.turns,
                ms(median(kind.first_s)),
                ms(percentile(kind.first_s, 99)),
                ms(end),
                ms(percentile(kind.end_s, 99)),
                f"{end / base_end:.2f}x",
                ms(cpu),
                f"{cpu / base_cpu:.2f}x",
            ]
        )
    headers = [
        "turn",
        "turns",
        "first token p50 ms",
        "p99",
        "end p50 ms",
        "p99",
        "end vs plain",
        "CPU ms/turn",
        "CPU vs plain",
    ]
    return (
        f"# Memory context pack and pinned-scope keys: cost per turn\n\n"
        f"`python -m bench.memory_pack`: the local model, every service a process, in memory; the end user's "
        f"namespace holds {memories:,} memories; blocks of {BLOCK} turns per kind, round-robin. CPU: every process "
        f"of the suite (utime + stime), per turn.\n\n" + table(headers, rows) + "\n"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=60, help="turns per kind (in blocks of 10)")
    parser.add_argument("--memories", type=int, default=1000, help="memories in the end user's namespace")
    args = parser.parse_args(argv)
    text = asyncio.run(run(args.turns, args.memories))
    print(text)
    print(f"wrote {write_result('memory_pack', text)}")


if __name__ == "__main__":
    main()
