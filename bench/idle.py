"""What the suite costs doing nothing: CPU, wakeups and Redis commands a second, per process and thread.

    python -m bench.idle [--stores memory,redis] [--seconds 60] [--settle 10] [--turns 5] [--rounds 2]

`cogmesh up` in miniature (bench.harness.suite: every service its own process, the runtime as two
workers), with in-memory stores and then with Redis (a private redis-server), each after a few turns
(the built-in local model) and `--settle` seconds of rest. CPU comes from each thread's schedstat
(nanoseconds, not /proc/<pid>/stat's 10 ms ticks), wakeups from its context switches. Threads are
told apart by name: `python` is the event loop, where the suite's own code runs; the others are
grpc's (event engine, timer, lifeguard) and Redis's. Issue 32's target: an idle suite under 5 ms of
CPU and 10 Redis commands a second.

On a VM, a wakeup of a sleeping thread is charged far more than the work it does (docs/capacity.md),
so read wakeups beside CPU, and compare trees in turn on the same machine, not across machines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc

from bench.capacity import RedisNodes, redis_delta, redis_snapshot
from bench.harness import RESULTS, suite, table
from bench.hotpath import redis_pid
from bench.sessions import redis_for
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.kit.addresses import channel_target

CPU_TARGET_MS_S = 5.0
REDIS_TARGET_PER_S = 10.0
SUITE: dict[str, object] = {"local_reply_tokens": 20}
READY_TIMEOUT_S = 120.0


def threads(pid: int) -> dict[str, tuple[int, int]]:
    """Each thread's (CPU ns, context switches), keyed by '<tid>:<name>'."""
    found: dict[str, tuple[int, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            ns = int((task / "schedstat").read_text().split()[0])
            name = (task / "comm").read_text().strip()
            status = (task / "status").read_text().splitlines()
        except OSError:
            continue  # the thread ended
        switches = sum(int(line.split()[1]) for line in status if "ctxt_switches" in line)
        found[f"{task.name}:{name}"] = (ns, switches)
    return found


def sample(pids: dict[str, int]) -> dict[str, dict[str, tuple[int, int]]]:
    return {name: threads(pid) for name, pid in pids.items()}


def kind(thread: str) -> str:
    """The event loop (`python`: the suite's own code) or the rest (grpc's and Redis's threads)."""
    return "loop" if thread.split(":", 1)[1] == "python" else "other"


def delta(before: dict[str, Any], after: dict[str, Any], seconds: float) -> dict[str, dict[str, float]]:
    """Per process: CPU ms/s and wakeups/s of its loop thread and of its other threads."""
    rows: dict[str, dict[str, float]] = {}
    for process, now in after.items():
        row = {"loop_ms": 0.0, "loop_wakeups": 0.0, "other_ms": 0.0, "other_wakeups": 0.0}
        for thread, (ns, switches) in now.items():
            was = before[process].get(thread, (0, 0))  # a thread started since counts from 0
            row[f"{kind(thread)}_ms"] += (ns - was[0]) / 1e6 / seconds
            row[f"{kind(thread)}_wakeups"] += (switches - was[1]) / seconds
        rows[process] = row
    return rows


@contextlib.asynccontextmanager
async def running(stores: str) -> AsyncIterator[tuple[dict[str, int], str | None, str]]:
    with redis_for(stores) as url:
        overrides = SUITE | ({"redis_url": url} if url else {})
        async with suite(READY_TIMEOUT_S, **overrides) as (settings, supervisor):
            pids = {name: child.process.pid for name, child in supervisor.children.items() if child.process}
            if url:
                pids["redis"] = redis_pid(url)
            yield pids, url, settings.gateway_addr


async def warm_up(gateway_addr: str, turns: int) -> None:
    """A few turns first: an idle suite is one that has worked, with its streams and caches open."""
    async with grpc.aio.insecure_channel(channel_target(gateway_addr)) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        for _ in range(turns):
            session = (await stub.CreateSession(gateway_pb2.CreateSessionRequest(), timeout=60)).session
            last = None
            async for message in stub.SendMessage(
                gateway_pb2.SendMessageRequest(session_id=session.session_id, content="hello"), timeout=60
            ):
                last = message.events[-1] if message.events else last
            if last is None or last.WhichOneof("payload") != "final":
                raise RuntimeError(f"a warm-up turn did not end with its answer: {last}")


async def one_round(stores: str, args: argparse.Namespace) -> dict[str, Any]:
    async with running(stores) as (pids, url, gateway_addr):
        await warm_up(gateway_addr, args.turns)
        await asyncio.sleep(args.settle)
        redis = RedisNodes([url]) if url else None
        commands = await redis_snapshot(redis) if redis else None
        before = sample(pids)
        await asyncio.sleep(args.seconds)
        per_process = delta(before, sample(pids), args.seconds)
        traffic = redis_delta(commands, await redis_snapshot(redis), args.seconds) if redis and commands else None
    total = sum(r["loop_ms"] + r["other_ms"] for r in per_process.values())
    return {
        "stores": stores,
        "cpu_ms_per_s": total,
        "loop_ms_per_s": sum(r["loop_ms"] for r in per_process.values()),
        "wakeups_per_s": sum(r["loop_wakeups"] + r["other_wakeups"] for r in per_process.values()),
        "loop_wakeups_per_s": sum(r["loop_wakeups"] for r in per_process.values()),
        "redis_commands_per_s": traffic["commands"] if traffic else 0.0,
        "redis_by_command": traffic["by_command"] if traffic else {},
        "processes": per_process,
        "load": os.getloadavg(),
    }


def report(rounds: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "# The suite idle: CPU, wakeups and Redis commands a second",
        "",
        f"`python -m bench.idle`: the suite as processes (2 runtime workers), {args.turns} turns, then "
        f"{args.settle:g} s of rest, then {args.seconds:g} s measured; {args.rounds} round(s). CPU from each "
        "thread's schedstat; `loop` is each process's event-loop thread (the suite's own code), `other` its "
        "grpc threads (and Redis's). Ratios only within a run: on a VM a wakeup is charged more than its work.",
        "",
    ]
    rows = []
    for r in rounds:
        commands = f"{r['redis_commands_per_s']:.2f}" if r["stores"] == "redis" else "-"
        rows.append(
            [
                r["stores"],
                f"{r['cpu_ms_per_s']:.2f}",
                f"{r['loop_ms_per_s']:.2f}",
                f"{r['wakeups_per_s']:.0f}",
                f"{r['loop_wakeups_per_s']:.1f}",
                commands,
                " ".join(f"{v:.2f}" for v in r["load"]),
            ]
        )
    headers = ["stores", "CPU ms/s", "of it loops", "wakeups/s", "loop wakeups/s", "Redis commands/s", "load"]
    lines += [table(headers, rows), "", "## By process (the last round of each stores, ms/s and wakeups/s)", ""]
    last = {r["stores"]: r for r in rounds}
    for stores, r in last.items():
        lines += [f"{stores} stores:", ""]
        keys = ["loop_ms", "loop_wakeups", "other_ms", "other_wakeups"]
        by_process = [[name, *(f"{p[k]:.2f}" for k in keys)] for name, p in sorted(r["processes"].items())]
        lines.append(table(["process", "loop ms/s", "loop wakeups/s", "other ms/s", "other wakeups/s"], by_process))
        lines.append("")
    lines += ["## Issue 32's idle target", ""]
    for stores in last:
        cpu = statistics.median(r["cpu_ms_per_s"] for r in rounds if r["stores"] == stores)
        verdict = "met" if cpu < CPU_TARGET_MS_S else "**not met**"
        line = f"- {stores} stores: {cpu:.2f} ms of CPU a second (median), target {CPU_TARGET_MS_S:g}: {verdict}"
        if stores == "redis":
            commands = statistics.median(r["redis_commands_per_s"] for r in rounds if r["stores"] == stores)
            met = "met" if commands < REDIS_TARGET_PER_S else "**not met**"
            line += f"; {commands:.2f} Redis commands a second, target {REDIS_TARGET_PER_S:g}: {met}"
        lines.append(line)
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rounds = []
    for _ in range(args.rounds):
        for stores in args.stores:
            result = await one_round(stores, args)
            print(
                f"{stores}: {result['cpu_ms_per_s']:.2f} ms/s (loops {result['loop_ms_per_s']:.2f}), "
                f"{result['wakeups_per_s']:.0f} wakeups/s (loops {result['loop_wakeups_per_s']:.1f}), "
                f"Redis {result['redis_commands_per_s']:.2f} commands/s",
                flush=True,
            )
            rounds.append(result)
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="memory,redis", help="memory, redis or both, in this order")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds measured")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds of rest after the warm-up turns")
    parser.add_argument("--turns", type=int, default=5, help="warm-up turns")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over the stores")
    parser.add_argument("--no-write", action="store_true", help="print only; leave bench/results alone")
    args = parser.parse_args()
    args.stores = [s for s in args.stores.split(",") if s]
    if unknown := set(args.stores) - {"memory", "redis"}:
        parser.error(f"--stores: unknown {', '.join(sorted(unknown))} (use memory and/or redis)")
    if args.seconds <= 0 or args.rounds < 1 or args.turns < 0 or args.settle < 0:
        parser.error("--seconds must be positive, --rounds at least 1, --turns and --settle not negative")
    rounds = asyncio.run(run(args))
    text = report(rounds, args)
    print(text)
    if not args.no_write:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "idle.md").write_text(text)
        (RESULTS / "idle.json").write_text(json.dumps({"rounds": rounds}, indent=1) + "\n")


if __name__ == "__main__":
    main()
