"""Inputs of the capacity model (issue 17 item 4, docs/capacity.md), measured in one run on a private Redis.

The suite runs as `cogmesh up` runs it (a process per service, Redis store on a private
redis-server, no persistence). Sessions are created before the turns they serve, one
turn per session, so a turn's figures exclude CreateSession (measured on its own).
Workloads: the tool turn ("What is 6 * 7?": the built-in model calls the calculator)
and a 50-token streamed turn (COGMESH_LOCAL_REPLY_TOKENS=50, no model delay). The
built-in model costs almost nothing, so the CPU is cogmesh's own work.

(a) CPU ms per turn of every process (client, services, redis; utime + stime from /proc).
(b) Redis commands per turn and per event (INFO commandstats; commands a Lua script calls
    count too, EVALSHA once more), Redis CPU per turn by command (usec), bytes in/out per turn
    (INFO stats total_net_*), used_memory per session and per turn / event kept.
(c) Gateway RSS per open idle Subscribe stream, sessions RSS per session, the idle CPU they cost.
(d) Replicas on the same cores: the tool and 50-token turns in turn at a concurrency that
    saturates, with 1 and 2 runtime workers and 1 and 2 gateways; turns per CPU-second of
    all processes (the model says this is a constant: CPU per turn does not depend on how
    many replicas share the cores), as a ratio to 1 gateway + 1 runtime, in alternating rounds.

    python -m bench.capacity [--quick]
    python -m bench.capacity --redis-only [--cluster]   # only (b) for the modelled turn and the idle suite, printed

`--redis-only` runs the paced turns of the model (each a fresh session's first turn, as the
model counts them, then the same sessions' next turn) and an idle suite (commands and CPU per
second of every process), and prints the Redis commands per modelled turn by kind; it
writes no result file (issue 32's Redis and idle targets are read from it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import redis.asyncio as aioredis

from bench.harness import (
    exported_settings,
    free_ports,
    median,
    percentile,
    read_data,
    rss_bytes,
    suite_addresses,
    table,
    write_data,
    write_result,
)
from bench.hotpath import by_service, cpu_seconds, load_average, redis_pid, service_pids
from bench.sessions import private_cluster, private_redis
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from services.kit.addresses import channel_target
from services.suite.settings import SuiteSettings
from services.suite.supervisor import Supervisor, runtime_workers

TOKENS = 50
WORKLOADS = {"tool": "What is 6 * 7?", "tokens50": "Tell me something."}
EXPECT = {"tool": "42", "tokens50": f"tok{TOKENS - 1}"}
SUITE: dict[str, object] = {
    "tenant_rate_per_s": 1e6,
    "tenant_burst": 1_000_000,
    "tenant_max_streams": 100_000,
    "local_reply_tokens": TOKENS,
}
READY_TIMEOUT_S = 120.0
SERVICES = ["client", "gateway", "runtime", "sessions", "context", "policy", "models", "memory", "redis"]
PACE_MS = 20.0  # a chunk every 20 ms: ~50 tokens/s, a hosted model's streaming pace
CLUSTER_PRIMARIES = 3  # --cluster: the smallest Redis Cluster
TOLERANCE = 0.15  # issue 17: throughput per core within 15% when replicas share the cores
# (label, gateways, runtime workers); the first is the baseline of the ratios.
REPLICAS = [("1 gateway, 1 runtime", 1, 1), ("1 gateway, 2 runtimes", 1, 2), ("2 gateways, 2 runtimes", 2, 2)]


class RedisNodes:
    """INFO of every node of the Redis the suite runs on, summed (one node for a standalone Redis)."""

    def __init__(self, urls: list[str]):
        self.clients = [aioredis.Redis.from_url(url) for url in urls]

    async def info(self, section: str) -> dict[str, Any]:
        total: dict[str, Any] = {}
        for client in self.clients:
            for key, value in (await client.info(section)).items():
                if isinstance(value, dict):  # commandstats: a dict per command
                    into = total.setdefault(key, {})
                    for k, v in value.items():
                        if isinstance(v, int | float):
                            into[k] = into.get(k, 0) + v
                elif isinstance(value, int | float):
                    total[key] = total.get(key, 0) + value
        return total


@contextlib.asynccontextmanager
async def running(
    redis_url: str, gateways: int = 1, runtimes: int = 0, delay_ms: float = 0.0, nodes: list[str] | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The suite on Redis with `gateways` gateway processes (harness.suite runs one) and `runtimes` workers.
    `nodes`: the URLs of a cluster's nodes, whose CPU and INFO are summed (default: `redis_url`'s one server)."""
    overrides = SUITE | {"redis_url": redis_url, "runtime_workers": runtimes, "local_delay_ms": delay_ms}
    addresses = suite_addresses(runtimes)
    if gateways > 1:
        addresses["gateway_addr"] = ",".join(f"127.0.0.1:{port}" for port in free_ports(gateways))
    settings = SuiteSettings(**(addresses | overrides))  # type: ignore[arg-type]
    supervisor = Supervisor(settings, Path(tempfile.mkdtemp(prefix="cogmesh-bench-")), lambda _: None, READY_TIMEOUT_S)
    with exported_settings(overrides):
        await supervisor.start()
        try:
            # One channel over every gateway: round_robin spreads the calls, as a load balancer would.
            options = [("grpc.lb_policy_name", "round_robin")]
            async with grpc.aio.insecure_channel(channel_target(settings.gateway_addr), options=options) as channel:
                yield {
                    "gateway": gateway_pb2_grpc.GatewayServiceStub(channel),  # type: ignore[no-untyped-call]
                    "pids": {"client": os.getpid()} | service_pids(supervisor) | redis_pids(nodes or [redis_url]),
                    "supervisor": supervisor,
                    "redis": RedisNodes(nodes or [redis_url]),
                }
        finally:
            await supervisor.stop(0.5)


def redis_pids(urls: list[str]) -> dict[str, int]:
    """redis-server's pid by process name: `redis`, or `redis-1`, `redis-2`... (by_service sums them)."""
    if len(urls) == 1:
        return {"redis": redis_pid(urls[0])}
    return {f"redis-{i}": redis_pid(url) for i, url in enumerate(urls, start=1)}


async def redis_snapshot(client: RedisNodes) -> dict[str, Any]:
    commands = await client.info("commandstats")
    stats = await client.info("stats")
    memory = await client.info("memory")
    return {
        "calls": {name.removeprefix("cmdstat_"): v["calls"] for name, v in commands.items()},
        "usec": {name.removeprefix("cmdstat_"): v["usec"] for name, v in commands.items()},
        "in": stats["total_net_input_bytes"],
        "out": stats["total_net_output_bytes"],
        "used_memory": memory["used_memory"],
    }


def redis_delta(before: dict[str, Any], after: dict[str, Any], per: float) -> dict[str, Any]:
    """Per unit of `per`; INFO's own calls left out (their replies are a few KB per snapshot)."""
    calls = {k: (v - before["calls"].get(k, 0)) / per for k, v in after["calls"].items() if k != "info"}
    usec = {k: (v - before["usec"].get(k, 0)) / per for k, v in after["usec"].items() if k != "info"}
    return {
        "commands": sum(calls.values()),
        "by_command": {k: v for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v > 0},
        "usec": sum(usec.values()),
        "usec_by_command": {k: v for k, v in sorted(usec.items(), key=lambda kv: -kv[1]) if v > 0},
        "bytes_in": (after["in"] - before["in"]) / per,
        "bytes_out": (after["out"] - before["out"]) / per,
        "used_memory": (after["used_memory"] - before["used_memory"]) / per,
    }


def cpu_now(system: dict[str, Any]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in system["pids"].items()}


def cpu_ms_per(system: dict[str, Any], before: dict[str, float], per: float) -> dict[str, float]:
    now = cpu_now(system)
    return by_service({name: (now[name] - before[name]) * 1000 / per for name in now})


async def create_sessions(system: dict[str, Any], count: int) -> list[str]:
    gate = asyncio.Semaphore(16)

    async def one() -> str:
        async with gate:
            reply = await system["gateway"].CreateSession(gateway_pb2.CreateSessionRequest(), timeout=60)
            return str(reply.session.session_id)

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def one_turn(gateway: Any, session: str, workload: str) -> tuple[float, int, int]:
    """(seconds, events received, seq of the last event) of one turn."""
    started = time.perf_counter()
    events, last = 0, None
    async for message in gateway.SendMessage(
        gateway_pb2.SendMessageRequest(session_id=session, content=WORKLOADS[workload]), timeout=120
    ):
        events += len(message.events)
        if message.events:
            last = message.events[-1]
    if last is None or last.WhichOneof("payload") != "final" or EXPECT[workload] not in last.final.text:
        raise RuntimeError(f"the {workload} turn did not end as expected: {last}")
    return time.perf_counter() - started, events, last.seq


async def turns(system: dict[str, Any], sessions: list[str], workloads: list[str], concurrency: int) -> dict[str, Any]:
    """One turn on each session (workloads in turn); CPU, Redis and wall time of them all."""
    gate = asyncio.Semaphore(concurrency)

    async def gated(session: str, workload: str) -> tuple[float, int, int]:
        async with gate:
            return await one_turn(system["gateway"], session, workload)

    snapshot = await redis_snapshot(system["redis"])
    before = cpu_now(system)
    started = time.perf_counter()
    done = await asyncio.gather(*(gated(s, workloads[i % len(workloads)]) for i, s in enumerate(sessions)))
    wall = time.perf_counter() - started
    n = len(sessions)
    cpu = cpu_ms_per(system, before, n)
    redis = redis_delta(snapshot, await redis_snapshot(system["redis"]), n)
    latencies = [d[0] * 1000 for d in done]
    logged = statistics.mean(d[2] for d in done)  # seq of a turn's last event = events in a one-turn log
    return {
        "turns": n,
        "concurrency": concurrency,
        "wall_s": wall,
        "turns_per_s": n / wall,
        "cpu_ms": cpu,
        "cpu_ms_total": sum(cpu.values()),
        "cores_busy": sum(cpu.values()) * n / 1000 / wall,
        "redis": redis,
        "events_received": statistics.mean(d[1] for d in done),
        "events_logged": logged,
        "commands_per_event": redis["commands"] / logged,
        "p50_ms": median(latencies),
        "p99_ms": percentile(latencies, 99),
        "load": load_average(),
    }


async def idle(system: dict[str, Any], seconds: float) -> dict[str, Any]:
    """CPU and Redis traffic of the suite doing nothing (watch loops, lease scans), per second."""
    snapshot = await redis_snapshot(system["redis"])
    before = cpu_now(system)
    await asyncio.sleep(seconds)
    return {
        "cpu_ms_per_s": cpu_ms_per(system, before, seconds),
        "redis_per_s": redis_delta(snapshot, await redis_snapshot(system["redis"]), seconds),
    }


async def renewals(system: dict[str, Any], sessions: list[str], rounds: int) -> dict[str, Any]:
    """What one lease renewal costs: a lease held on each session, renewed `rounds` times in one batch
    per round, as a runtime worker renews its running turns (RenewTurnLeases); per renewal."""
    settings = system["supervisor"].settings
    tenant = settings.tenant_id
    async with grpc.aio.insecure_channel(channel_target(settings.sessions_addr)) as channel:
        stub = sessions_pb2_grpc.SessionsServiceStub(channel)  # type: ignore[no-untyped-call]
        tokens = [
            (
                await stub.AcquireTurnLease(
                    sessions_pb2.AcquireTurnLeaseRequest(
                        tenant_id=tenant, session_id=s, turn_id="bench-renewal", ttl_seconds=60
                    ),
                    timeout=30,
                )
            ).lease_token
            for s in sessions
        ]
        batch = sessions_pb2.RenewTurnLeasesRequest(
            leases=[
                sessions_pb2.RenewTurnLeaseRequest(
                    tenant_id=tenant, session_id=s, lease_token=t, ttl_seconds=60, holder="bench-renewal"
                )
                for s, t in zip(sessions, tokens, strict=True)
            ]
        )
        snapshot = await redis_snapshot(system["redis"])
        before = cpu_now(system)
        for _ in range(rounds):
            reply = await stub.RenewTurnLeases(batch, timeout=30)
            if not all(lease.held for lease in reply.leases):
                raise RuntimeError("a benchmark lease was not renewed")
        n = len(sessions) * rounds
        cpu = cpu_ms_per(system, before, n)
        redis = redis_delta(snapshot, await redis_snapshot(system["redis"]), n)
        for s, t in zip(sessions, tokens, strict=True):
            await stub.ReleaseTurnLease(
                sessions_pb2.ReleaseTurnLeaseRequest(tenant_id=tenant, session_id=s, lease_token=t), timeout=30
            )
    return {"renewals": n, "batch": len(sessions), "cpu_ms": cpu, "redis": redis}


def rss(system: dict[str, Any]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for name, pid in system["pids"].items():
        service = by_service({name: 0.0}).popitem()[0]
        totals[service] = totals.get(service, 0) + rss_bytes(pid)
    return totals


async def subscribers(system: dict[str, Any], sessions: list[str], idle_s: float) -> dict[str, Any]:
    """K Subscribe streams, each on a session with one turn in its log, held open and idle."""
    gateway = system["gateway"]
    before = rss(system)
    snapshot = await redis_snapshot(system["redis"])
    calls = [gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=s, after_seq=0)) for s in sessions]
    try:
        # The replay of its log arrives first: the stream is open and the gateway watches the session.
        await asyncio.gather(*(call.read() for call in calls))
        held = rss(system)
        opened = redis_delta(snapshot, await redis_snapshot(system["redis"]), len(sessions))
        quiet = await idle(system, idle_s)
    finally:
        for call in calls:
            call.cancel()
    k = len(sessions)
    return {
        "count": k,
        "rss_per_subscriber": {name: (held[name] - before[name]) / k for name in ("gateway", "sessions", "redis")},
        "open_redis": opened,
        "idle_cpu_ms_per_s": quiet["cpu_ms_per_s"],
        "idle_redis_commands_per_s": quiet["redis_per_s"]["commands"],
    }


async def single(redis_url: str, args: argparse.Namespace) -> dict[str, Any]:
    """(a)-(c) on the suite as `cogmesh up` runs it here (1 gateway, a runtime worker per core, at least 2)."""
    async with running(redis_url) as system:
        workers = len(system["supervisor"].of("runtime"))
        await turns(system, await create_sessions(system, 10), list(WORKLOADS), 4)  # warm-up
        quiet = await idle(system, args.idle_s)
        rss_before = rss(system)
        snapshot = await redis_snapshot(system["redis"])
        before = cpu_now(system)
        per_workload = {name: await create_sessions(system, args.turns) for name in WORKLOADS}
        count = args.turns * len(WORKLOADS)
        created = {
            "cpu_ms": cpu_ms_per(system, before, count),
            "redis": redis_delta(snapshot, await redis_snapshot(system["redis"]), count),
        }
        print(f"  CreateSession: {sum(created['cpu_ms'].values()):.2f} ms CPU", flush=True)
        snapshot = await redis_snapshot(system["redis"])
        measured = {}
        for name, sessions in per_workload.items():
            measured[name] = await turns(system, sessions, [name], args.concurrency)
            print(f"  {name}: {measured[name]['cpu_ms_total']:.2f} ms CPU/turn", flush=True)
        kept = redis_delta(snapshot, await redis_snapshot(system["redis"]), count)
        events = sum(m["events_logged"] for m in measured.values()) * args.turns
        rss_after = rss(system)
        subscribed = await subscribers(system, [s for group in per_workload.values() for s in group], args.idle_s)
        print(f"  subscribers: {subscribed['rss_per_subscriber']['gateway']:.0f} B gateway RSS each", flush=True)
    return {
        "runtime_workers": workers,
        "idle": quiet,
        "create_session": created,
        "turns": measured,
        "memory": {
            "sessions": count,
            "redis_bytes_per_session": created["redis"]["used_memory"],
            "redis_bytes_per_turn_kept": kept["used_memory"],
            "redis_bytes_per_event_kept": kept["used_memory"] * count / events,
            "rss_per_session": {n: (rss_after[n] - rss_before[n]) / count for n in ("gateway", "sessions", "runtime")},
        },
        "subscribers": subscribed,
    }


async def paced(redis_url: str, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """(a), (b) again with the model at a model's pace: a chunk every PACE_MS, many turns open at once;
    then what a lease renewal costs, `open_turns` leases renewed in one batch as a runtime worker does.

    Deltas then arrive one by one, so the runtime's appends coalesce fewer of them (one per
    flush window, services/runtime/turn_log.py) and turns hold their leases for longer.
    """
    async with running(redis_url, delay_ms=PACE_MS) as system:
        await turns(system, await create_sessions(system, 10), list(WORKLOADS), 4)  # warm-up
        measured = {}
        for name in WORKLOADS:
            measured[name] = await turns(system, await create_sessions(system, args.turns), [name], args.open_turns)
            print(f"  {name} at a model's pace: {measured[name]['cpu_ms_total']:.2f} ms CPU/turn", flush=True)
        renewal = await renewals(system, await create_sessions(system, args.open_turns), RENEWAL_ROUNDS)
    return measured, renewal


async def replicas(redis_url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """(d): the same turns with 1 and 2 runtimes / gateways on this machine's cores, in alternating rounds."""
    rows = []
    for round_ in range(args.rounds):
        for label, gateways, runtimes in REPLICAS if round_ % 2 == 0 else REPLICAS[::-1]:
            async with running(redis_url, gateways, runtimes) as system:
                await turns(system, await create_sessions(system, 10), list(WORKLOADS), 4)  # warm-up
                sessions = await create_sessions(system, args.replica_turns)
                row = await turns(system, sessions, list(WORKLOADS), args.saturate)
            row |= {"config": label, "gateways": gateways, "runtimes": runtimes, "round": round_}
            row["turns_per_cpu_s"] = 1000 / row["cpu_ms_total"]
            row["turns_per_cpu_s_services"] = 1000 / (row["cpu_ms_total"] - row["cpu_ms"]["client"])
            rows.append(row)
            print(
                f"  {label}: {row['turns_per_s']:.1f} turns/s, {row['cores_busy']:.2f} cores busy, "
                f"{row['turns_per_cpu_s']:.1f} turns per CPU-second",
                flush=True,
            )
    return rows


def replica_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over rounds per configuration, and their ratio to the first (the model predicts 1.0)."""
    out = []
    for label, gateways, runtimes in REPLICAS:
        pick = [r for r in rows if r["config"] == label]
        out.append(
            {
                "config": label,
                "gateways": gateways,
                "runtimes": runtimes,
                **{
                    key: statistics.median(r[key] for r in pick)
                    for key in ("turns_per_s", "cores_busy", "turns_per_cpu_s", "turns_per_cpu_s_services", "p50_ms")
                },
            }
        )
    for row in out:
        row["ratio"] = row["turns_per_cpu_s"] / out[0]["turns_per_cpu_s"]
        row["ratio_services"] = row["turns_per_cpu_s_services"] / out[0]["turns_per_cpu_s_services"]
        row["within_tolerance"] = abs(row["ratio"] - 1) <= TOLERANCE
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with private_redis() as redis_url:
        print("single suite: per turn, per session, per subscriber", flush=True)
        measured = await single(redis_url, args)
        client = aioredis.Redis.from_url(redis_url)
        version = (await client.info("server"))["redis_version"]
        await client.flushall()  # the replica runs start on an empty Redis
        await client.aclose()
        print(f"the model at a model's pace ({PACE_MS:g} ms per chunk)", flush=True)
        at_pace, renewal = await paced(redis_url, args)
        print("replicas on the same cores", flush=True)
        rows = await replicas(redis_url, args)
    summary = replica_summary(rows)
    return measured | {
        "paced": at_pace,
        "renewal": renewal,
        "replica_rows": rows,
        "replicas": summary,
        "replicas_within_tolerance": all(r["within_tolerance"] for r in summary),
        "tolerance": TOLERANCE,
        "params": vars(args)
        | {
            "tokens": TOKENS,
            "cores": len(os.sched_getaffinity(0)),
            "redis_version": version,
            "runtime_workers": measured["runtime_workers"],
        },
    }


# The capacity model (docs/capacity.md): its assumptions, then what follows from the measured figures.
SCALES = [10_000, 100_000, 1_000_000]
TURN_EVERY_S = 30.0  # each concurrent session sends a turn every 30 s
TURN_S = 10.0  # a real model's turn holds its lease this long (renewed every turn_lease_renew_s)
RENEWAL_ROUNDS = 20  # batches of lease renewals measured
RENEW_S = 2.0  # Settings.turn_lease_renew_s
RETAINED_TURNS = 20  # turns a live session keeps in Redis: 10 minutes of talk at one turn per 30 s
UTILISATION = 0.6  # target CPU utilisation of every process and shard
CORES_PER_POD = 2
MIN_PODS = 2  # no service on one pod
GATEWAY_POD_BYTES = 4 * 2**30  # memory of a gateway pod, for its subscribers
SHARD_BYTES = 25 * 10**9  # data per Redis shard: a 32 GB node with room for fork and replication buffers
SHARD_CORES = 1.0  # a shard executes commands on one thread
SERVICES_SIZED = ["gateway", "runtime", "sessions", "context", "policy", "models", "memory"]


def renewal_cost(data: dict[str, Any], cpu: dict[str, float], writes: float, commands: float) -> dict[str, Any]:
    """One lease renewal's sessions and Redis CPU and Redis commands: measured (`renewal`), or, in a result
    file from before that was measured, estimated as the average write's."""
    if "renewal" in data:
        measured = data["renewal"]
        return {
            "cpu_ms": {name: measured["cpu_ms"].get(name, 0.0) for name in ("sessions", "redis")},
            "commands": measured["redis"]["commands"],
        }
    return {"cpu_ms": {name: cpu[name] / writes for name in ("sessions", "redis")}, "commands": commands / writes}


def model_turn(data: dict[str, Any]) -> dict[str, Any]:
    """One modelled turn: a tool call then a 50-token answer, at a model's pace (the two measured paced turns
    together; this counts a turn's fixed cost twice), plus the lease renewals of a TURN_S turn."""
    tool, tokens = data["paced"]["tool"], data["paced"]["tokens50"]
    cpu = {k: tool["cpu_ms"].get(k, 0.0) + tokens["cpu_ms"].get(k, 0.0) for k in SERVICES}
    writes = tool["redis"]["by_command"]["evalsha"] + tokens["redis"]["by_command"]["evalsha"]
    commands = tool["redis"]["commands"] + tokens["redis"]["commands"]
    renewals = TURN_S / RENEW_S
    renewal = renewal_cost(data, cpu, writes, commands)
    for name in ("sessions", "redis"):
        cpu[name] += renewals * renewal["cpu_ms"][name]
    return {
        "cpu_ms": cpu,
        "redis_commands": commands + renewals * renewal["commands"],
        "redis_writes": writes + renewals,
        "redis_bytes": tool["redis"]["bytes_in"]
        + tool["redis"]["bytes_out"]
        + tokens["redis"]["bytes_in"]
        + tokens["redis"]["bytes_out"],
        "events": tool["events_logged"] + tokens["events_logged"],
        "redis_bytes_kept": 2 * data["memory"]["redis_bytes_per_turn_kept"],  # per measured turn, of the two
        "renewals": renewals,
    }


def model(data: dict[str, Any]) -> dict[str, Any]:
    """Cores, pods, Redis shards and memory for SCALES concurrent sessions."""
    turn = model_turn(data)
    mem, sub = data["memory"], data["subscribers"]
    # The single suite ran `cogmesh up`'s default number of runtime workers (recorded since; this machine's else).
    workers = data["params"].get("runtime_workers") or runtime_workers(SuiteSettings())
    # Background: a runtime replica's takeover polls and a gateway's watch loop, whether turns run or not.
    background_per_replica = data["idle"]["redis_per_s"]["commands"] / (workers + 1)
    rows = []
    for sessions in SCALES:
        rate = sessions / TURN_EVERY_S
        cores = {n: turn["cpu_ms"][n] * rate / 1000 / UTILISATION for n in SERVICES_SIZED}
        pods = {n: max(MIN_PODS, math.ceil(c / CORES_PER_POD)) for n, c in cores.items()}
        gateway_bytes = sessions * sub["rss_per_subscriber"]["gateway"]  # one open stream per session
        pods["gateway"] = max(pods["gateway"], math.ceil(gateway_bytes / GATEWAY_POD_BYTES))
        commands = turn["redis_commands"] * rate + background_per_replica * (pods["runtime"] + pods["gateway"])
        redis_cores = turn["cpu_ms"]["redis"] * rate / 1000
        redis_bytes = sessions * (mem["redis_bytes_per_session"] + RETAINED_TURNS * turn["redis_bytes_kept"])
        shards_cpu = math.ceil(redis_cores / (SHARD_CORES * UTILISATION))
        shards_memory = math.ceil(redis_bytes / SHARD_BYTES)
        rows.append(
            {
                "sessions": sessions,
                "turns_per_s": rate,
                "cores": cores,
                "cores_total": sum(cores.values()),
                "pods": pods,
                "pods_total": sum(pods.values()),
                "gateway_subscriber_bytes": gateway_bytes,
                "open_turns": rate * TURN_S,
                "redis_commands_per_s": commands,
                "redis_writes_per_s": turn["redis_writes"] * rate,
                "redis_bytes_per_s": turn["redis_bytes"] * rate,
                "redis_events_per_s": turn["events"] * rate,
                "redis_cores": redis_cores,
                "redis_memory_bytes": redis_bytes,
                "shards_cpu": shards_cpu,
                "shards_memory": shards_memory,
                "shards": max(1, shards_cpu, shards_memory),
                "commands_per_s_per_shard": commands / max(1, shards_cpu, shards_memory),
            }
        )
    return {
        "turn": turn,
        "rows": rows,
        "background_commands_per_s_per_replica": background_per_replica,
        "assumptions": {
            "turn_every_s": TURN_EVERY_S,
            "turn_s": TURN_S,
            "renew_s": RENEW_S,
            "retained_turns": RETAINED_TURNS,
            "utilisation": UTILISATION,
            "cores_per_pod": CORES_PER_POD,
            "gateway_pod_bytes": GATEWAY_POD_BYTES,
            "shard_bytes": SHARD_BYTES,
        },
    }


def model_tables(data: dict[str, Any]) -> str:
    m = model(data)
    rows = m["rows"]
    heads = [f"{r['sessions']:,} sessions" for r in rows]
    per_turn = [[n, fmt(m["turn"]["cpu_ms"][n])] for n in [*SERVICES_SIZED, "redis"]] + [
        ["Redis commands (scripts' included)", fmt(m["turn"]["redis_commands"], 0)],
        ["Redis writes (EVALSHA), renewals included", fmt(m["turn"]["redis_writes"], 1)],
        ["Redis bytes in + out", f"{m['turn']['redis_bytes']:,.0f}"],
        ["events logged", fmt(m["turn"]["events"], 0)],
        ["Redis bytes kept", f"{m['turn']['redis_bytes_kept']:,.0f}"],
    ]
    sizing = [["turns/s", *(f"{r['turns_per_s']:,.0f}" for r in rows)]]
    sizing += [[f"{n} cores (pods)", *(f"{r['cores'][n]:,.1f} ({r['pods'][n]})" for r in rows)] for n in SERVICES_SIZED]
    sizing += [
        ["all services: cores (pods)", *(f"{r['cores_total']:,.0f} ({r['pods_total']})" for r in rows)],
        ["gateway memory for subscribers", *(f"{r['gateway_subscriber_bytes'] / 2**30:,.1f} GiB" for r in rows)],
        ["turns open at once (leases)", *(f"{r['open_turns']:,.0f}" for r in rows)],
        ["Redis commands/s", *(f"{r['redis_commands_per_s']:,.0f}" for r in rows)],
        ["Redis writes (scripts)/s", *(f"{r['redis_writes_per_s']:,.0f}" for r in rows)],
        ["Redis network MB/s (in + out)", *(f"{r['redis_bytes_per_s'] / 1e6:,.1f}" for r in rows)],
        ["Redis CPU, cores", *(f"{r['redis_cores']:,.1f}" for r in rows)],
        ["Redis memory", *(f"{r['redis_memory_bytes'] / 1e9:,.1f} GB" for r in rows)],
        [
            "Redis shards (by CPU / by memory)",
            *(f"{r['shards']} ({r['shards_cpu']} / {r['shards_memory']})" for r in rows),
        ],
        ["Redis commands/s per shard", *(f"{r['commands_per_s_per_shard']:,.0f}" for r in rows)],
    ]
    a = m["assumptions"]
    return "\n".join(
        [
            f"Assumptions: a turn every {a['turn_every_s']:g} s per session; a turn = the paced tool turn + the paced "
            f"50-token turn, holding its lease {a['turn_s']:g} s (renewed every {a['renew_s']:g} s, each renewal "
            + ("as measured in a batch of open leases" if "renewal" in data else "estimated as an average write")
            + "); "
            f"{a['retained_turns']} turns kept per session; {a['utilisation']:.0%} target utilisation; "
            f"{a['cores_per_pod']} cores per pod (at least {MIN_PODS} pods per service); gateway pods of "
            f"{a['gateway_pod_bytes'] / 2**30:g} GiB; Redis shards of one core and {a['shard_bytes'] / 1e9:g} GB. "
            f"Background Redis commands per replica: {m['background_commands_per_s_per_replica']:,.0f}/s.",
            "",
            table(["per modelled turn", "CPU ms / figure"], per_turn),
            "",
            table(["", *heads], sizing),
        ]
    )


def fmt(value: float, digits: int = 2) -> str:
    return f"{value:,.{digits}f}" if math.isfinite(value) else "-"


def report(data: dict[str, Any]) -> str:
    p = data["params"]
    turns_ = [*data["turns"].items(), *((f"{n}, paced", m) for n, m in data["paced"].items())]
    cpu_rows = [
        [
            name,
            m["concurrency"],
            *(fmt(m["cpu_ms"].get(s, 0.0)) for s in SERVICES),
            fmt(m["cpu_ms_total"]),
            fmt(m["p50_ms"], 0),
        ]
        for name, m in turns_
    ]
    cpu_rows.append(
        [
            "CreateSession",
            16,
            *(fmt(data["create_session"]["cpu_ms"].get(s, 0.0)) for s in SERVICES),
            fmt(sum(data["create_session"]["cpu_ms"].values())),
            "",
        ]
    )
    redis_rows = []
    for name, m in [*turns_, ("CreateSession", {"redis": data["create_session"]["redis"]})]:
        r = m["redis"]
        top = ", ".join(f"{k} {v:.1f}" for k, v in list(r["by_command"].items())[:6])
        redis_rows.append(
            [
                name,
                fmt(m.get("events_logged", float("nan")), 1),
                fmt(m.get("events_received", float("nan")), 1),
                fmt(r["commands"], 1),
                fmt(m.get("commands_per_event", float("nan"))),
                fmt(r["by_command"].get("evalsha", 0.0), 1),
                f"{r['bytes_in']:,.0f}",
                f"{r['bytes_out']:,.0f}",
                top,
            ]
        )
    mem = data["memory"]
    sub = data["subscribers"]
    idle_ = data["idle"]
    memory_rows = [
        ["Redis used_memory per session (created, no turn)", f"{mem['redis_bytes_per_session']:,.0f} B"],
        ["Redis used_memory per turn kept (events, messages, journal)", f"{mem['redis_bytes_per_turn_kept']:,.0f} B"],
        ["Redis used_memory per event kept", f"{mem['redis_bytes_per_event_kept']:,.0f} B"],
        *[[f"{n} RSS per session (after its turn)", f"{v:,.0f} B"] for n, v in mem["rss_per_session"].items()],
        *[[f"{n} RSS per open idle subscriber", f"{v:,.0f} B"] for n, v in sub["rss_per_subscriber"].items()],
        ["Redis commands to open a subscriber", fmt(sub["open_redis"]["commands"], 1)],
        [
            f"idle CPU with {sub['count']} subscribers, ms/s (gateway, redis)",
            f"{fmt(sub['idle_cpu_ms_per_s'].get('gateway', 0.0))}, {fmt(sub['idle_cpu_ms_per_s'].get('redis', 0.0))}",
        ],
        [
            "idle CPU without subscribers, ms/s (gateway, redis, all)",
            f"{fmt(idle_['cpu_ms_per_s'].get('gateway', 0.0))}, {fmt(idle_['cpu_ms_per_s'].get('redis', 0.0))}, "
            f"{fmt(sum(idle_['cpu_ms_per_s'].values()))}",
        ],
        [
            "idle Redis commands/s (without, with subscribers)",
            f"{fmt(idle_['redis_per_s']['commands'], 1)}, {fmt(sub['idle_redis_commands_per_s'], 1)}",
        ],
    ]
    replica_rows = [
        [
            r["config"],
            fmt(r["turns_per_s"], 1),
            fmt(r["cores_busy"]),
            fmt(r["turns_per_cpu_s"], 1),
            f"{r['ratio']:.3f}",
            fmt(r["turns_per_cpu_s_services"], 1),
            f"{r['ratio_services']:.3f}",
            "yes" if r["within_tolerance"] else "NO",
            fmt(r["p50_ms"], 0),
        ]
        for r in data["replicas"]
    ]
    per_round = [
        [
            r["round"],
            r["config"],
            fmt(r["turns_per_s"], 1),
            fmt(r["cores_busy"]),
            fmt(r["turns_per_cpu_s"], 1),
            r["load"],
        ]
        for r in data["replica_rows"]
    ]
    return "\n".join(
        [
            "# Capacity inputs: CPU, Redis and memory per turn, session and subscriber; replicas on the same cores",
            "",
            (__doc__ or "").split("\n\n")[1].replace("\n", " "),
            "",
            f"{p['turns']} turns per workload at {p['concurrency']} at once (one turn per fresh session); "
            f"Redis {p['redis_version']}; {p['cores']} cores (shared with other jobs). Used by docs/capacity.md.",
            "",
            "## (a) CPU ms per turn, by process",
            "",
            f"`paced`: the model sends a chunk every {PACE_MS:g} ms (COGMESH_LOCAL_DELAY_MS, ~50 tokens/s), "
            f"{p['open_turns']} turns at once.",
            "",
            table(["turn", "at once", *SERVICES, "total", "p50 ms"], cpu_rows),
            "",
            "## (b) Redis per turn",
            "",
            "Commands include those a Lua script calls (each write is one EVALSHA that calls several); "
            "Redis CPU is in (a), from /proc (commandstats' usec counts a script's commands twice). "
            "Events: in the session's log after its one turn (`logged`, the `accepted` event included) and "
            "received by the SendMessage stream.",
            "",
            table(
                [
                    "turn",
                    "events logged",
                    "events received",
                    "commands",
                    "commands/event",
                    "EVALSHA (writes)",
                    "bytes in",
                    "bytes out",
                    "most called",
                ],
                redis_rows,
            ),
            "",
            "## (c) Memory per session, turn kept and subscriber; idle cost",
            "",
            f"{mem['sessions']} sessions; {sub['count']} Subscribe streams (after_seq=0, each on a session with "
            f"one turn; idle for {p['idle_s']:g}s).",
            "",
            table(["figure", "value"], memory_rows),
            "",
            "## (d) Replicas on the same cores",
            "",
            f"{p['replica_turns']} turns (tool and 50-token in turn) at {p['saturate']} at once, {p['rounds']} "
            "alternating rounds (medians). Turns per CPU-second = turns / CPU seconds of every process (client "
            "included; `services` leaves the client out). The model predicts a ratio of 1.0; the check is "
            f"|ratio - 1| <= {TOLERANCE:.0%}.",
            "",
            table(
                [
                    "configuration",
                    "turns/s",
                    "cores busy",
                    "turns per CPU-s",
                    "ratio",
                    "turns per CPU-s, services",
                    "ratio, services",
                    f"within {TOLERANCE:.0%}",
                    "p50 ms",
                ],
                replica_rows,
            ),
            "",
            table(["round", "configuration", "turns/s", "cores busy", "turns per CPU-s", "load"], per_round),
            "",
            "## The capacity model from these figures (docs/capacity.md)",
            "",
            model_tables(data),
            "",
        ]
    )


async def redis_only(args: argparse.Namespace) -> dict[str, Any]:
    """The Redis figures of issue 32: commands per modelled turn (by kind) and the idle suite's cost per second;
    with --cluster, on a Redis Cluster of CLUSTER_PRIMARIES primaries (their CPU and commands summed)."""
    with contextlib.ExitStack() as stack:
        if args.cluster:
            redis_url, nodes = stack.enter_context(private_cluster(CLUSTER_PRIMARIES))
        else:
            redis_url = stack.enter_context(private_redis())
            nodes = [redis_url]
        async with running(redis_url, delay_ms=PACE_MS, nodes=nodes) as system:
            await turns(system, await create_sessions(system, 10), list(WORKLOADS), 4)  # warm-up
            # The warm-up's turns leave the open-turn index before the idle figure starts (their last look).
            await asyncio.sleep(args.settle_s)
            quiet = await idle(system, args.idle_s)
            measured, later = {}, {}
            for name in WORKLOADS:
                sessions = await create_sessions(system, args.turns)
                measured[name] = await turns(system, sessions, [name], args.open_turns)
                # The same sessions' next turn: what a session that has talked before costs (its keys exist).
                later[name] = await turns(system, sessions, [name], args.open_turns)
            renewal = await renewals(system, await create_sessions(system, args.open_turns), RENEWAL_ROUNDS)
    kinds: dict[str, float] = {}
    for m in measured.values():
        for kind, calls in m["redis"]["by_command"].items():
            kinds[kind] = kinds.get(kind, 0.0) + calls
    count = TURN_S / RENEW_S
    redis_ms = sum(m["cpu_ms"].get("redis", 0.0) for m in measured.values())
    # What Redis burns doing nothing (its timers; a cluster's bus) while the turns run, left out: at the model's
    # load it is a sliver of each shard, here (a few turns/s over several servers) a visible part of a turn.
    idle_ms = quiet["cpu_ms_per_s"].get("redis", 0.0)
    busy_ms = sum(m["cpu_ms"].get("redis", 0.0) - idle_ms * m["wall_s"] / m["turns"] for m in measured.values())
    return {
        "cluster": CLUSTER_PRIMARIES if args.cluster else 0,
        "paced": measured,
        "later": later,
        "idle": quiet,
        "renewal": renewal,
        "modelled_turn": {
            "commands_measured": sum(kinds.values()),
            "by_command": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
            # As model_turn: the measured turns plus a TURN_S turn's renewals at their measured cost.
            "commands": sum(kinds.values()) + count * renewal["redis"]["commands"],
            # Redis CPU (/proc) as model_turn counts it; the shards it takes for the largest scale, by CPU.
            "redis_cpu_ms": redis_ms + count * renewal["cpu_ms"].get("redis", 0.0),
            "redis_usec": sum(m["redis"]["usec"] for m in measured.values()),
            "redis_cpu_ms_less_idle": busy_ms + count * renewal["cpu_ms"].get("redis", 0.0),
        },
    }


def by_kind(r: dict[str, Any]) -> str:
    """Redis figures' commands by kind, as printed."""
    return ", ".join(f"{k} {v:.1f}" for k, v in r["by_command"].items())


def print_redis_only(data: dict[str, Any]) -> None:
    turn, quiet = data["modelled_turn"], data["idle"]
    print(f"commands per modelled turn: {turn['commands']:.0f} ({turn['commands_measured']:.0f} measured + renewals)")
    print("  " + by_kind(turn))
    renewal = data["renewal"]["redis"]
    print(
        f"a lease renewal ({data['renewal']['batch']} in a batch): {renewal['commands']:.1f} commands: "
        + by_kind(renewal)
    )
    rate = SCALES[-1] / TURN_EVERY_S
    shards = math.ceil(turn["redis_cpu_ms"] * rate / 1000 / (SHARD_CORES * UTILISATION))
    where = f"a Redis Cluster of {data['cluster']} primaries, summed" if data["cluster"] else "a standalone Redis"
    print(
        f"Redis CPU per modelled turn ({where}): {turn['redis_cpu_ms']:.2f} ms (/proc; commandstats usec of the "
        f"measured turns {turn['redis_usec']:.0f}): {shards} shards by CPU for {SCALES[-1]:,} sessions; "
        f"{turn['redis_cpu_ms_less_idle']:.2f} ms less Redis's idle CPU over the turns' time"
    )
    for name, m in data["paced"].items():
        r = m["redis"]
        print(f"  {name}, paced: {r['commands']:.0f} commands, {m['events_logged']:.0f} events logged: {by_kind(r)}")
    later = data["later"]
    commands = sum(m["redis"]["commands"] for m in later.values()) + TURN_S / RENEW_S * renewal["commands"]
    print(f"a session's next turn (its keys made by the first): {commands:.0f} commands per modelled turn")
    for name, m in later.items():
        print(f"  {name}, paced, next turn: {m['redis']['commands']:.0f} commands: {by_kind(m['redis'])}")
    r = quiet["redis_per_s"]
    print(
        f"idle: {r['commands']:.1f} Redis commands/s: " + ", ".join(f"{k} {v:.2f}" for k, v in r["by_command"].items())
    )
    cpu = quiet["cpu_ms_per_s"]
    print(
        f"idle: {sum(cpu.values()):.2f} ms CPU/s of all processes: "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300, help="turns per workload for (a)-(c)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--open-turns", type=int, default=64, help="turns at once at a model's pace")
    parser.add_argument("--replica-turns", type=int, default=600, help="turns per configuration and round for (d)")
    parser.add_argument("--saturate", type=int, default=32, help="turns at once for (d)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="a tiny run: checks the bench, not the figures")
    parser.add_argument("--redis-only", action="store_true", help="only the modelled turn's Redis and idle figures")
    parser.add_argument(
        "--settle-s",
        type=float,
        default=20.0,
        help="--redis-only: wait before the idle figure (after 10 s the warm-up's turns still left the open-turn "
        "index: 28 commands/s against 1.3 after 20 s)",
    )
    parser.add_argument(
        "--cluster", action="store_true", help=f"--redis-only: on a Redis Cluster of {CLUSTER_PRIMARIES} primaries"
    )
    parser.add_argument("--report", action="store_true", help="only render capacity.md again from capacity.json")
    args = parser.parse_args()
    if args.report:  # the model's tables again, from the figures of the last run
        data = read_data("capacity")
        assert data is not None, "no capacity.json to report on"
        print(write_result("capacity", report(data)))
        return
    if args.redis_only:
        data = asyncio.run(redis_only(args))
        print_redis_only(data)
        return
    if args.quick:
        args.turns, args.concurrency, args.open_turns, args.replica_turns = 25, 4, 8, 20
        args.saturate, args.rounds, args.idle_s = 8, 1, 1.0
    data = asyncio.run(run(args))
    write_data("capacity", data)
    text = report(data)
    print(write_result("capacity", text))
    print(text)


if __name__ == "__main__":
    main()
