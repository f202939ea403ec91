"""Sessions speed: append and list throughput and latency, memory store vs Redis store.

Measured in one run on one machine, side by side:

- store level: the domain stores called directly (MemorySessionStore, RedisSessionStore);
- service level: the sessions service as its own process, over gRPC, on each store;
- ceiling: redis-benchmark against the same private redis-server (RPUSH and LRANGE_100
  with as many connections as our concurrency), the most any Redis client could get.

Append = one AppendMessages of one ~200-byte message under the turn lease; list = the
20 latest messages (what the runtime reads each turn) of a session holding 200.
Every worker owns a session, as concurrent conversations would.

    python -m bench.sessions [--seconds 1] [--rounds 3] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import redis
from redis.utils import HIREDIS_AVAILABLE

from bench.harness import free_ports, percentile, table, write_result
from cogmesh.common.v1 import messages_pb2
from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from services.sessions.model import NewSession, Strategy
from services.sessions.redis_store import RedisSessionStore
from services.sessions.store import MemorySessionStore, SessionStore

ROOT = Path(__file__).resolve().parent.parent
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_BENCHMARK = shutil.which("redis-benchmark") or "/usr/bin/redis-benchmark"
TENANT = "bench"
HISTORY = 200  # messages in each session before the list runs
LIST_LAST_N = 20
MESSAGE = messages_pb2.Message(
    role=messages_pb2.ROLE_ASSISTANT,
    content="The deposit at 7.5% for 12 months suits your goal; shall I compare it with the savings account? " * 2,
    turn_id="0123456789abcdef0123456789abcdef",
)
PAYLOAD = MESSAGE.SerializeToString()


@dataclass
class Result:
    ops: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rate(self) -> float:
        return self.ops / self.seconds

    @property
    def p50(self) -> float:
        return percentile(self.latencies_ms, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies_ms, 99)


async def load(op: Callable[[int], Awaitable[object]], workers: int, seconds: float) -> Result:
    """Run op(worker) in a closed loop on every worker for `seconds`; every op's latency counts."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker(i: int) -> int:
        done = 0
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            await op(i)
            latencies.append((time.perf_counter() - started) * 1000)
            done += 1
        return done

    await op(0)  # warm up connections and scripts
    started = time.perf_counter()
    counts = await asyncio.gather(*(worker(i) for i in range(workers)))
    return Result(sum(counts), time.perf_counter() - started, latencies)


# --------------------------------------------------------------------------- a private Redis


@contextlib.contextmanager
def redis_for(stores: str) -> Iterator[str | None]:
    """A private redis-server's URL for `stores` "redis"; None for in-memory stores."""
    if stores == "redis":
        with private_redis() as url:
            yield url
    else:
        yield None


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of our own, so the benchmark neither disturbs nor is disturbed by others' data."""
    (port,) = free_ports(1)
    with tempfile.TemporaryDirectory(prefix="cogmesh-bench-redis-") as directory:
        process = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                directory,
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{port}/0"
        try:
            client = redis.Redis.from_url(url)
            for _ in range(200):
                with contextlib.suppress(redis.ConnectionError):
                    if client.ping():
                        break
                time.sleep(0.025)
            client.close()
            yield url
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(10)


@contextlib.contextmanager
def private_cluster(primaries: int = 3) -> Iterator[tuple[str, list[str]]]:
    """A Redis Cluster of our own, primaries only: its COGMESH_REDIS_URL and each node's URL (to measure them)."""
    from tests.support.redis_cluster import RedisClusterServers  # the tests' cluster, started the same way

    with RedisClusterServers(nodes=primaries, replicas=0) as cluster:
        yield cluster.url, [f"redis://127.0.0.1:{server.port}/0" for server in cluster.servers]


def redis_benchmark(url: str, workers: int, requests: int) -> dict[str, tuple[float, float, float]]:
    """redis-benchmark's own (requests/s, p50 ms, p99 ms) for RPUSH and LRANGE_100 (no pipelining)."""
    port = url.rsplit(":", 1)[1].split("/")[0]
    out = subprocess.run(
        [
            REDIS_BENCHMARK,
            "-h",
            "127.0.0.1",
            "-p",
            port,
            "-c",
            str(workers),
            "-n",
            str(requests),
            "-t",
            "rpush,lrange_100",
            "--csv",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    rates: dict[str, tuple[float, float, float]] = {}
    for line in out.splitlines():
        cells = [c.strip('"') for c in line.split(",")]
        name = cells[0].split(" ")[0]
        if name in ("RPUSH", "LRANGE_100"):  # columns: test, rps, avg, min, p50, p95, p99, max
            rates[name] = (float(cells[1]), float(cells[4]), float(cells[6]))
    return rates


# --------------------------------------------------------------------------- the two ops, per level

Op = Callable[[int], Awaitable[object]]


async def store_ops(store: SessionStore, workers: int) -> dict[str, Op]:
    sessions: list[tuple[str, int]] = []
    for i in range(workers):
        record, _ = await store.create(TENANT, NewSession(f"user-{i}", "bench", "default"))
        grant = await store.try_acquire(TENANT, record.session_id, "turn", 3600, Strategy.REJECT)
        token = grant.token  # type: ignore[union-attr]
        await store.append_messages(TENANT, record.session_id, [PAYLOAD] * HISTORY, token)
        sessions.append((record.session_id, token))

    async def append(i: int) -> object:
        session_id, token = sessions[i]
        return await store.append_messages(TENANT, session_id, [PAYLOAD], token)

    async def last(i: int) -> object:
        return await store.last_messages(TENANT, sessions[i][0], LIST_LAST_N)

    return {"append": append, "list": last}


@contextlib.asynccontextmanager
async def sessions_process(redis_url: str) -> AsyncIterator[str]:
    """The sessions service as its own process, as deployed."""
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    env = os.environ | {"COGMESH_REDIS_URL": redis_url, "COGMESH_LOG_LEVEL": "warning"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.sessions", "--listen", address, cwd=ROOT, env=env
    )
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
        yield address
    finally:
        process.terminate()
        await process.wait()


async def service_ops(channels: list[grpc.aio.Channel], workers: int) -> dict[str, Op]:
    stubs = [sessions_pb2_grpc.SessionsServiceStub(c) for c in channels]
    sessions: list[tuple[str, int]] = []
    for i in range(workers):
        stub = stubs[i % len(stubs)]
        created = await stub.CreateSession(sessions_pb2.CreateSessionRequest(tenant_id=TENANT, agent="default"))
        sid = created.session.session_id
        lease = await stub.AcquireTurnLease(
            sessions_pb2.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=sid, turn_id="t", ttl_seconds=3600)
        )
        for _ in range(HISTORY // 100):
            await stub.AppendMessages(
                sessions_pb2.AppendMessagesRequest(
                    tenant_id=TENANT, session_id=sid, lease_token=lease.lease_token, messages=[MESSAGE] * 100
                )
            )
        sessions.append((sid, lease.lease_token))

    async def append(i: int) -> object:
        sid, token = sessions[i]
        return await stubs[i % len(stubs)].AppendMessages(
            sessions_pb2.AppendMessagesRequest(tenant_id=TENANT, session_id=sid, lease_token=token, messages=[MESSAGE])
        )

    async def last(i: int) -> object:
        return await stubs[i % len(stubs)].ListMessages(
            sessions_pb2.ListMessagesRequest(tenant_id=TENANT, session_id=sessions[i][0], last_n=LIST_LAST_N)
        )

    return {"append": append, "list": last}


# --------------------------------------------------------------------------- report


def fmt(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def combine(runs: list[Result]) -> Result:
    """The median round's rate, every round's latencies: one noisy round (a shared machine) cannot skew it."""
    rates = sorted(r.rate for r in runs)
    middle = rates[len(rates) // 2]
    return Result(round(middle * 1000), 1000.0, [lat for r in runs for lat in r.latencies_ms])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0, help="duration of each measured run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every measurement")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent workers (and redis-benchmark clients)")
    args = parser.parse_args()
    workers, seconds, rounds = args.concurrency, args.seconds, args.rounds

    runs: dict[tuple[str, str, str], list[Result]] = {}
    with private_redis() as url:
        print(f"private redis-server at {url}; {workers} workers, {rounds} x {seconds:g}s per cell", file=sys.stderr)
        red = RedisSessionStore.from_url(url, "store:", 0.0, 5.0)
        async with sessions_process("") as memory_address, sessions_process(url) as redis_address:
            channels = {
                kind: [grpc.aio.insecure_channel(address) for _ in range(4)]
                for kind, address in (("memory", memory_address), ("redis", redis_address))
            }
            ops = {
                ("store", "memory"): await store_ops(MemorySessionStore(), workers),
                ("store", "redis"): await store_ops(red, workers),
                ("service", "memory"): await service_ops(channels["memory"], workers),
                ("service", "redis"): await service_ops(channels["redis"], workers),
            }
            # Interleaved, so a burst of load from elsewhere hits every cell alike.
            for _ in range(rounds):
                for (level, kind), by_name in ops.items():
                    for name, op in by_name.items():
                        runs.setdefault((level, name, kind), []).append(await load(op, workers, seconds))
            for group in channels.values():
                for channel in group:
                    await channel.close()
        await red.close()
        ceiling = redis_benchmark(url, workers, 50_000)
    results = {key: combine(value) for key, value in runs.items()}

    rows = []
    for level in ("store", "service"):
        for op, bench_name in (("append", "RPUSH"), ("list", "LRANGE_100")):
            base = results[level, op, "memory"]
            for kind in ("memory", "redis"):
                r = results[level, op, kind]
                vs_ceiling = f"{r.rate / ceiling[bench_name][0]:.2f}" if kind == "redis" else ""
                rows.append(
                    [
                        level,
                        op,
                        kind,
                        fmt(r.rate),
                        fmt(r.p50, 2),
                        fmt(r.p99, 2),
                        f"{r.rate / base.rate:.2f}",
                        f"{r.p99 / base.p99:.2f}",
                        vs_ceiling,
                    ]
                )
    for name, label in (("RPUSH", "append"), ("LRANGE_100", "list")):
        rate, p50, p99 = ceiling[name]
        rows.append(["redis-benchmark", label, name, fmt(rate), fmt(p50, 2), fmt(p99, 2), "", "", "1.00"])
    headers = [
        "level",
        "op",
        "store",
        "ops/s",
        "p50 ms",
        "p99 ms",
        "ops/s vs memory",
        "p99 vs memory",
        "ops/s vs redis-benchmark",
    ]
    report = "\n".join(
        [
            "# Sessions: append and list, memory store vs Redis store",
            "",
            f"One run, {workers} concurrent workers (one session each); each cell is the median of {rounds}"
            f" interleaved {seconds:g}s runs (latencies pooled). Append = 1 message (~{len(PAYLOAD)} B) under"
            f" the turn lease; list = the {LIST_LAST_N} latest of {HISTORY}+ messages. Redis: a private"
            f" redis-server {redis_version()} on this machine, no persistence. The redis-benchmark rows"
            f" (RPUSH, LRANGE_100, -c {workers}, no pipelining) are the ceiling for any client of that server."
            f" Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()},"
            f" redis-py {redis.__version__}{' + hiredis' if HIREDIS_AVAILABLE else ''}.",
            "",
            "`store` calls the store objects directly; `service` is the sessions service as its own process,"
            " called over gRPC (4 channels).",
            "",
            table(headers, rows),
            "",
        ]
    )
    print(report)
    path = write_result("sessions", report)
    print(f"written to {path}", file=sys.stderr)


def redis_version() -> str:
    out = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True, check=False).stdout
    return next((p.split("=")[1] for p in out.split() if p.startswith("v=")), "?")


if __name__ == "__main__":
    asyncio.run(main())
