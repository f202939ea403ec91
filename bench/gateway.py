"""Gateway speed, measured side by side in one run.

(a) Fan-out: events per second delivered to 1, 10 and 100 subscribers of one session
    and the p99 lag from an event's creation to its delivery, against a bare grpc.aio
    server-streaming server sending the same events (bench/raw_stream.py), twice:
    - burst: one long turn of the built-in model (~2,000 events at once); lag here is
      mostly the time to drain the burst, so it measures throughput, not latency;
    - paced: events appended at a steady token rate (--rate per second for --seconds)
      to the session's log by a producer outside the gateway, through the Redis event
      log that gateway replicas share (the memory log cannot be written from outside);
      the raw server sends on the same schedule. Here p99 lag is delivery latency.
    Subscribers run in up to four client processes and the producer in its own
    (bench/fanout_clients.py), for cogmesh and the raw server alike.
(b) Time to first event and full-turn latency of a new turn through the gateway and
    every service, with the zero-latency built-in model.

    python -m bench.gateway [--subscribers 1,10,100] [--turns 200] [--rate 1000 --seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import grpc
import redis.asyncio as aioredis

from bench.harness import free_ports, median, percentile, suite_processes, table, write_result
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.suite.settings import SuiteSettings

WORDS_PER_DELTA = 3  # the local model streams its echo three words per delta
MAX_CLIENT_PROCESSES = 4  # subscribers are spread over up to this many client processes


@dataclass
class FanOut:
    received: int = 0
    messages: int = 0
    lags: list[float] = field(default_factory=list)
    first_create: float = float("inf")
    last_receive: float = 0.0

    @property
    def rate(self) -> float:
        span = self.last_receive - self.first_create
        return self.received / span if span > 0 else float("nan")

    @property
    def per_message(self) -> float:
        return self.received / self.messages if self.messages else float("nan")

    def add(self, part: dict[str, Any]) -> None:
        self.lags += part["lags"]
        self.received += len(part["lags"])
        self.messages += part["messages"]
        self.first_create = min(self.first_create, part["first_create"])
        self.last_receive = max(self.last_receive, part["last_receive"])


async def _tool(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.fanout_clients", *args, stdout=asyncio.subprocess.PIPE, limit=1 << 28
    )  # the limit: one JSON line carries every lag


async def _result(process: asyncio.subprocess.Process) -> dict[str, Any]:
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 300)
    await process.wait()
    if process.returncode != 0 or not line:
        raise RuntimeError(f"bench.fanout_clients exited with {process.returncode}")
    result: dict[str, Any] = json.loads(line)
    return result


class Subscribers:
    """`count` subscribers of one session, spread over client processes (bench/fanout_clients.py)."""

    def __init__(self, target: str, session_id: str, count: int, expected: int):
        self.args = (target, session_id, count, expected)
        self.processes: list[asyncio.subprocess.Process] = []

    async def start(self) -> None:
        """Returns once every stream has had its first message."""
        target, session_id, count, expected = self.args
        workers = min(count, MAX_CLIENT_PROCESSES)
        shares = [count // workers + (1 if i < count % workers else 0) for i in range(workers)]
        for share in shares:
            self.processes.append(
                await _tool(
                    "subscribe",
                    *("--target", target, "--session", session_id),
                    *("--subscribers", str(share), "--expected", str(expected)),
                )
            )
        for process in self.processes:
            assert process.stdout is not None
            if (await asyncio.wait_for(process.stdout.readline(), 90)).strip() != b"ready":
                raise RuntimeError("a subscriber process ended before its streams were open")

    async def results(self) -> FanOut:
        stats = FanOut()
        for process in self.processes:
            stats.add(await _result(process))
        return stats

    def kill(self) -> None:
        for process in self.processes:
            if process.returncode is None:
                process.kill()


async def fan_out_cogmesh(gateway: str, subscribers: int, words: int) -> FanOut:
    async with grpc.aio.insecure_channel(gateway) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        session = (await stub.CreateSession(gateway_pb2.CreateSessionRequest())).session
        # status + ceil(words/3) deltas + usage + final
        expected = 3 + -(-(words + 13) // WORDS_PER_DELTA)
        readers = Subscribers(gateway, session.session_id, subscribers, expected)
        try:
            await readers.start()  # first heartbeat: all connected
            async for _ in stub.SendMessage(
                gateway_pb2.SendMessageRequest(session_id=session.session_id, content="w " * words)
            ):
                pass
            return await readers.results()
        finally:
            readers.kill()


async def fan_out_raw(subscribers: int, events: int, rate: float = 0.0) -> FanOut:
    port = free_ports(1)[0]
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.raw_stream",
        *("--port", str(port), "--subscribers", str(subscribers)),
        *("--events", str(events), "--rate", str(rate)),
    )
    readers = Subscribers(f"127.0.0.1:{port}", "raw", subscribers, events)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 30)
        # Heartbeats are not counted; the server starts once every stream is open.
        await readers.start()
        return await readers.results()
    finally:
        readers.kill()
        server.terminate()
        await server.wait()


async def paced_cogmesh(settings: SuiteSettings, subscribers: int, events: int, rate: float) -> tuple[FanOut, float]:
    """`events` deltas appended one by one at `rate`/s to one session's shared log, read by `subscribers`."""
    async with grpc.aio.insecure_channel(settings.gateway_addr) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        session_id = (await stub.CreateSession(gateway_pb2.CreateSessionRequest())).session.session_id
    readers = Subscribers(settings.gateway_addr, session_id, subscribers, events)
    try:
        await readers.start()
        producer = await _tool(
            "produce",
            *("--redis-url", settings.redis_url, "--prefix", settings.redis_key_prefix),
            *("--tenant", settings.tenant_id, "--session", session_id),
            *("--events", str(events), "--rate", str(rate)),
        )
        reached = float((await _result(producer))["reached"])
        return await readers.results(), reached
    finally:
        readers.kill()


async def first_event(gateway: str, turns: int) -> tuple[list[float], list[float]]:
    async with grpc.aio.insecure_channel(gateway) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        session = (await stub.CreateSession(gateway_pb2.CreateSessionRequest())).session
        ttfe, full = [], []
        for i in range(turns + 10):
            started = time.perf_counter()
            call = stub.SendMessage(gateway_pb2.SendMessageRequest(session_id=session.session_id, content=f"hi {i}"))
            first = None
            async for _ in call:
                first = first or time.perf_counter()
            if i >= 10:  # warm-up turns are not counted
                ttfe.append((first or started) - started)
                full.append(time.perf_counter() - started)
        return ttfe, full


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


OVERRIDES: dict[str, object] = {
    "tenant_max_streams": 10_000,
    "tenant_rate_per_s": 1e6,
    "tenant_burst": 1_000_000,
    "heartbeat_s": 0.2,
    "log_level": "warning",
    "subscriber_max_lag": 1_000_000,
}
FAN_HEADERS = [
    "subscribers",
    "cogmesh events/s (aggregate)",
    "raw grpc.aio events/s",
    "ratio",
    "cogmesh p99 lag ms",
    "raw p99 lag ms",
    "cogmesh p50 lag ms",
    "raw p50 lag ms",
    "events/message cogmesh / raw",
]


def fan_row(n: int, ours: FanOut, raw: FanOut) -> list[object]:
    return [
        n,
        f"{ours.rate:,.0f}",
        f"{raw.rate:,.0f}",
        f"{ours.rate / raw.rate:.2f}",
        ms(percentile(ours.lags, 99)),
        ms(percentile(raw.lags, 99)),
        ms(median(ours.lags)),
        ms(median(raw.lags)),
        f"{ours.per_message:.1f} / {raw.per_message:.1f}",
    ]


async def run(subscriber_counts: list[int], words: int, turns: int, rate: float, seconds: float, redis_url: str) -> str:
    burst_rows: list[list[object]] = []
    paced_rows: list[list[object]] = []
    bursts: dict[int, FanOut] = {}
    fan100: tuple[FanOut, FanOut] | None = None
    events = 3 + -(-(words + 13) // WORDS_PER_DELTA)
    async with suite_processes(**OVERRIDES) as settings:
        for n in subscriber_counts:
            ours = await fan_out_cogmesh(settings.gateway_addr, n, words)
            burst_rows.append(fan_row(n, ours, await fan_out_raw(n, events)))
            bursts[n] = ours
        ttfe, full = await first_event(settings.gateway_addr, turns)
    paced_events = int(rate * seconds)
    budget = SuiteSettings(**OVERRIDES).fanout_messages_per_s  # type: ignore[arg-type]
    prefix = f"cogmesh-bench-{uuid.uuid4().hex[:8]}:"
    try:
        async with suite_processes(**OVERRIDES, redis_url=redis_url, redis_key_prefix=prefix) as settings:
            for n in subscriber_counts:
                ours, reached = await paced_cogmesh(settings, n, paced_events, rate)
                fan100 = (bursts[n], ours) if n == max(subscriber_counts) else fan100
                paced_rows.append([*fan_row(n, ours, await fan_out_raw(n, paced_events, rate)), f"{reached:,.0f}"])
    finally:
        redis = aioredis.Redis.from_url(redis_url)
        keys = [key async for key in redis.scan_iter(match=f"{prefix}*", count=1000)]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()
    latency = table(
        ["metric", "p50 ms", "p99 ms"],
        [
            ["time to first event", ms(median(ttfe)), ms(percentile(ttfe, 99))],
            ["full turn", ms(median(full)), ms(percentile(full, 99))],
        ],
    )
    verdict = targets(fan100, ttfe, max(subscriber_counts)) if fan100 else ""
    return (
        "# Gateway\n\nOne run on this machine; every service its own process.\n\n"
        f"## Fan-out, burst: one turn of {events} events at once (memory event log)\n\n"
        f"{table(FAN_HEADERS, burst_rows)}\n\n"
        f"## Fan-out, paced: {paced_events} events at {rate:,.0f}/s (Redis event log, producer outside the gateway)\n\n"
        "events/s is bounded by the producer's rate times the subscribers: lag is what to read here. "
        "cogmesh events are stamped when appended; the raw server's with their scheduled time, so a "
        "stream that falls behind shows it as lag. The producer runs in its own process and may "
        "still fall short of the rate on a busy machine (last column). A session's subscribers get at most "
        f"{budget:,.0f} messages a second together (COGMESH_FANOUT_MESSAGES_PER_S): deltas that come faster "
        "are batched, every 0.2 ms for one subscriber, every 20 ms for a hundred.\n\n"
        f"{table([*FAN_HEADERS, 'producer events/s'], paced_rows)}\n\n"
        f"## A new turn through the gateway and all services ({turns} turns, built-in model)\n\n{latency}\n"
        f"{verdict}"
    )


def targets(fan: tuple[FanOut, FanOut], ttfe: list[float], n: int) -> str:
    """Issue #7's targets against this run's figures."""
    burst, paced = fan

    def said(ok: bool) -> str:
        return "reached" if ok else "NOT reached"

    rows = [
        [f"fan-out to {n} subscribers >= 200,000 events/s", f"{burst.rate:,.0f} (burst)", said(burst.rate >= 200_000)],
        [
            "p99 lag < 50 ms",
            f"{ms(percentile(paced.lags, 99))} ms paced, {ms(percentile(burst.lags, 99))} ms burst",
            said(percentile(paced.lags, 99) < 0.05),
        ],
        ["time to first event p50 < 3 ms", f"{ms(median(ttfe))} ms", said(median(ttfe) < 0.003)],
        ["time to first event p99 < 10 ms", f"{ms(percentile(ttfe, 99))} ms", said(percentile(ttfe, 99) < 0.010)],
    ]
    return f"\n## Issue #7 targets in this run\n\n{table(['target', 'this run', 'verdict'], rows)}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscribers", default="1,10,100")
    parser.add_argument("--words", type=int, default=6000, help="words in the message the model echoes")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rate", type=float, default=1000, help="paced mode: events per second")
    parser.add_argument("--seconds", type=float, default=3, help="paced mode: how long the producer runs")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0", help="paced mode's shared event log")
    args = parser.parse_args()
    counts = [int(n) for n in args.subscribers.split(",")]
    report = asyncio.run(run(counts, args.words, args.turns, args.rate, args.seconds, args.redis_url))
    print(report)
    print(f"written to {write_result('gateway', report)}")


if __name__ == "__main__":
    main()
