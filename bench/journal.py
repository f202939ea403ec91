"""What the turn journal costs (issue 16): the same turns with and without their steps recorded.

One run, one machine. The suite runs as `cogmesh up` runs it (a process per service, two
runtime workers), once recording every step of a turn (the default) and once with
COGMESH_JOURNAL_STEPS=false (only the turn's request and its pauses recorded: a turn
taken over would start again), on the memory store and on Redis (a private
redis-server), in alternating rounds so that drift of the shared machine hits both.
The turn is "What is 6 * 7?" to the built-in model with the calculator: after its
request, five steps are recorded (start, the model step that calls the tool, decide,
tool, step); the model step that answers goes out with the turn's end. The built-in
model costs almost nothing, so the ratio is the journal's share of cogmesh's own work
(with a real provider's client in the runtime it is smaller).

Per turn: CPU seconds of every process (client, services, Redis; from /proc), the full
turn's p50, and the journal's records (read back with GetJournal). Per step: the CPU
difference divided by the records.

    python -m bench.journal [--turns 150] [--rounds 3] [--concurrency 1,16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from bench.harness import median, percentile, suite, table, write_data, write_result
from bench.hotpath import by_service, cpu_seconds, load_average, redis_pid, service_pids
from bench.sessions import private_redis
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc

QUESTION = "What is 6 * 7?"
SUITE: dict[str, object] = {"tenant_rate_per_s": 1e6, "tenant_burst": 1_000_000, "tenant_max_streams": 100_000}
READY_TIMEOUT_S = 120.0


@contextlib.asynccontextmanager
async def running(store: str, journal: bool, redis_url: str) -> AsyncIterator[dict[str, Any]]:
    overrides = SUITE | {"journal_steps": journal} | ({"redis_url": redis_url} if store == "redis" else {})
    async with suite(READY_TIMEOUT_S, **overrides) as (settings, supervisor):
        pids = {"client": os.getpid()} | service_pids(supervisor)
        pids |= {"redis": redis_pid(redis_url)} if store == "redis" else {}
        async with (
            grpc.aio.insecure_channel(settings.gateway_addr) as gateway_channel,
            grpc.aio.insecure_channel(settings.sessions_addr) as sessions_channel,
        ):
            yield {
                "gateway": gateway_pb2_grpc.GatewayServiceStub(gateway_channel),  # type: ignore[no-untyped-call]
                "sessions": sessions_pb2_grpc.SessionsServiceStub(sessions_channel),  # type: ignore[no-untyped-call]
                "pids": pids,
                "tenant": settings.tenant_id,
            }


async def one_turn(gateway: Any) -> tuple[float, str, str]:
    session = (await gateway.CreateSession(gateway_pb2.CreateSessionRequest(), timeout=30)).session.session_id
    started = time.perf_counter()
    last = None
    async for message in gateway.SendMessage(
        gateway_pb2.SendMessageRequest(session_id=session, content=QUESTION), timeout=60
    ):
        if message.events:
            last = message.events[-1]
    if last is None or last.WhichOneof("payload") != "final" or "42" not in last.final.text:
        raise RuntimeError(f"the turn did not answer 42: {last}")
    return time.perf_counter() - started, session, last.turn_id


async def measure(system: dict[str, Any], turns: int, concurrency: int) -> dict[str, Any]:
    gate = asyncio.Semaphore(concurrency)

    async def gated() -> tuple[float, str, str]:
        async with gate:
            return await one_turn(system["gateway"])

    before = {name: cpu_seconds(pid) for name, pid in system["pids"].items()}
    started = time.perf_counter()
    done = await asyncio.gather(*(gated() for _ in range(turns)))
    wall = time.perf_counter() - started
    spent = by_service({name: cpu_seconds(pid) - before[name] for name, pid in system["pids"].items()})
    _, session, turn = done[-1]
    journal = await system["sessions"].GetJournal(
        sessions_pb2.GetJournalRequest(tenant_id=system["tenant"], session_id=session, turn_id=turn)
    )
    seconds = [d[0] * 1000 for d in done]
    return {
        "cpu_ms": {name: value * 1000 / turns for name, value in spent.items()},
        "full_p50": median(seconds),
        "full_p99": percentile(seconds, 99),
        "records": [entry.kind for entry in journal.entries],
        "record_bytes": sum(len(entry.state) for entry in journal.entries),
        "wall_s": wall,
        "load": load_average(),
    }


async def run(turns: int, rounds: int, levels: list[int]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with private_redis() as redis_url:
        for round_ in range(rounds):
            for store in ("memory", "redis"):
                for journal in (True, False) if round_ % 2 == 0 else (False, True):
                    async with running(store, journal, redis_url) as system:
                        await measure(system, 10, 1)  # warm-up: connections, caches, first-call paths
                        for concurrency in levels:
                            row = await measure(system, turns, concurrency)
                            row |= {"store": store, "journal": journal, "concurrency": concurrency, "round": round_}
                            rows.append(row)
                            total = sum(row["cpu_ms"].values())
                            print(f"  {store} journal={journal} x{concurrency}: {total:.2f} ms CPU/turn", flush=True)
    return {"rows": rows, "turns": turns, "rounds": rounds}


def report(data: dict[str, Any]) -> str:
    rows = data["rows"]
    out, split = [], []
    services = ["client", "gateway", "runtime", "sessions", "context", "policy", "models", "memory", "redis"]
    for store in ("memory", "redis"):
        for concurrency in sorted({r["concurrency"] for r in rows}):
            pick = [r for r in rows if r["store"] == store and r["concurrency"] == concurrency]
            with_ = [r for r in pick if r["journal"]]
            without = [r for r in pick if not r["journal"]]
            cpu_with = statistics.median(sum(r["cpu_ms"].values()) for r in with_)
            cpu_without = statistics.median(sum(r["cpu_ms"].values()) for r in without)
            steps = len(with_[0]["records"]) - len(without[0]["records"])
            out.append(
                [
                    store,
                    concurrency,
                    f"{cpu_with:.2f}",
                    f"{cpu_without:.2f}",
                    f"{cpu_with / cpu_without:.2f}x" if cpu_without else "-",
                    steps,
                    f"{(cpu_with - cpu_without) / steps:.3f}",
                    f"{statistics.median(r['full_p50'] for r in with_):.1f} / "
                    f"{statistics.median(r['full_p50'] for r in without):.1f}",
                    f"{with_[0]['record_bytes']:,}",
                ]
            )
            for label, group in (("with", with_), ("without", without)):
                split.append(
                    [
                        store,
                        concurrency,
                        label,
                        *(f"{statistics.median(r['cpu_ms'].get(s, 0.0) for r in group):.2f}" for s in services),
                    ]
                )
    kinds = next(r["records"] for r in rows if r["journal"])
    return "\n".join(
        [
            "# What the turn journal costs per step",
            "",
            (__doc__ or "").split("\n\n")[1].replace("\n", " "),
            "",
            f"{data['turns']} turns per row, {data['rounds']} rounds (medians over rounds). Records of one turn with "
            f"the journal: {', '.join(kinds)}.",
            "",
            table(
                [
                    "store",
                    "at once",
                    "CPU ms/turn, journal",
                    "CPU ms/turn, steps not recorded",
                    "ratio",
                    "steps recorded",
                    "CPU ms per step",
                    "full turn p50 ms (with / without)",
                    "bytes recorded",
                ],
                out,
            ),
            "",
            "CPU ms per turn by process (medians):",
            "",
            table(["store", "at once", "journal", *services], split),
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,16")
    args = parser.parse_args()
    data = asyncio.run(run(args.turns, args.rounds, [int(x) for x in args.concurrency.split(",")]))
    write_data("journal", data)
    text = report(data)
    print(write_result("journal", text))
    print(text)


if __name__ == "__main__":
    main()
