"""Gateway speed, measured side by side in one run.

(a) Fan-out: events per second delivered to 1, 10 and 100 subscribers of one session
    and the p99 lag from an event's creation to its delivery, against a bare grpc.aio
    server-streaming server sending the same events (bench/raw_stream.py).
(b) Time to first event and full-turn latency of a new turn through the gateway and
    every service, with the zero-latency built-in model.

    python -m bench.gateway [--subscribers 1,10,100] [--turns 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field

import grpc

from bench.harness import free_ports, median, percentile, suite_processes, table, write_result
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc

WORDS_PER_DELTA = 3  # the local model streams its echo three words per delta
CHANNELS = 4  # subscribers spread over a few connections, as separate clients would be


@dataclass
class FanOut:
    received: int = 0
    lags: list[float] = field(default_factory=list)
    first_create: float = float("inf")
    last_receive: float = 0.0

    @property
    def rate(self) -> float:
        span = self.last_receive - self.first_create
        return self.received / span if span > 0 else float("nan")


async def subscribe(
    stub: gateway_pb2_grpc.GatewayServiceStub,
    session_id: str,
    after: int,
    stats: FanOut,
    ready: asyncio.Event,
    expected: int,
) -> None:
    got = 0
    async for response in stub.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=after)):
        now = time.time()
        ready.set()
        for event in response.events:
            created = event.create_time.ToNanoseconds() / 1e9
            stats.first_create = min(stats.first_create, created)
            stats.lags.append(now - created)
            got += 1
        stats.received += len(response.events)
        stats.last_receive = max(stats.last_receive, now)
        if got >= expected:
            return


async def fan_out_cogmesh(gateway: str, subscribers: int, words: int) -> FanOut:
    channels = [grpc.aio.insecure_channel(gateway) for _ in range(CHANNELS)]
    stubs = [gateway_pb2_grpc.GatewayServiceStub(c) for c in channels]
    session = (await stubs[0].CreateSession(gateway_pb2.CreateSessionRequest())).session
    stats = FanOut()
    # status + ceil(words/3) deltas + usage + final
    expected = 3 + -(-(words + 13) // WORDS_PER_DELTA)
    readies = [asyncio.Event() for _ in range(subscribers)]
    tasks = [
        asyncio.create_task(subscribe(stubs[i % CHANNELS], session.session_id, 0, stats, readies[i], expected))
        for i in range(subscribers)
    ]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 30)  # first heartbeat: all connected
    async for _ in stubs[0].SendMessage(
        gateway_pb2.SendMessageRequest(session_id=session.session_id, content="w " * words)
    ):
        pass
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    for c in channels:
        await c.close()
    return stats


async def fan_out_raw(subscribers: int, events: int) -> FanOut:
    port = free_ports(1)[0]
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.raw_stream",
        "--port",
        str(port),
        "--subscribers",
        str(subscribers),
        "--events",
        str(events),
    )
    try:
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(CHANNELS)]
        await asyncio.wait_for(channels[0].channel_ready(), 30)
        stubs = [gateway_pb2_grpc.GatewayServiceStub(c) for c in channels]
        stats = FanOut()
        ready = asyncio.Event()

        async def one(i: int) -> None:
            await subscribe(stubs[i % CHANNELS], "raw", 0, stats, ready, events)

        # Heartbeats are not counted; the server starts once every stream is open.
        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(subscribers))), 300)
        for c in channels:
            await c.close()
        return stats
    finally:
        server.terminate()
        await server.wait()


async def first_event(gateway: str, turns: int) -> tuple[list[float], list[float]]:
    async with grpc.aio.insecure_channel(gateway) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
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


async def run(subscriber_counts: list[int], words: int, turns: int) -> str:
    rows = []
    events = 3 + -(-(words + 13) // WORDS_PER_DELTA)
    overrides = {
        "tenant_max_streams": 10_000,
        "tenant_rate_per_s": 1e6,
        "tenant_burst": 1_000_000,
        "heartbeat_s": 0.2,
        "log_level": "warning",
        "subscriber_max_lag": 1_000_000,
    }
    async with suite_processes(**overrides) as settings:
        for n in subscriber_counts:
            ours = await fan_out_cogmesh(settings.gateway_addr, n, words)
            raw = await fan_out_raw(n, events)
            rows.append(
                [
                    n,
                    f"{ours.rate:,.0f}",
                    f"{raw.rate:,.0f}",
                    f"{ours.rate / raw.rate:.2f}",
                    ms(percentile(ours.lags, 99)),
                    ms(percentile(raw.lags, 99)),
                ]
            )
        ttfe, full = await first_event(settings.gateway_addr, turns)
    fan = table(
        [
            "subscribers",
            "cogmesh events/s (aggregate)",
            "raw grpc.aio events/s",
            "ratio",
            "cogmesh p99 lag ms",
            "raw p99 lag ms",
        ],
        rows,
    )
    latency = table(
        ["metric", "p50 ms", "p99 ms"],
        [
            ["time to first event", ms(median(ttfe)), ms(percentile(ttfe, 99))],
            ["full turn", ms(median(full)), ms(percentile(full, 99))],
        ],
    )
    return (
        f"# Gateway\n\nOne run on this machine ({events} events per turn; every service its own process).\n\n"
        f"## Fan-out to subscribers of one session\n\n{fan}\n\n"
        f"## A new turn through the gateway and all services ({turns} turns, built-in model)\n\n{latency}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscribers", default="1,10,100")
    parser.add_argument("--words", type=int, default=6000, help="words in the message the model echoes")
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    report = asyncio.run(run([int(n) for n in args.subscribers.split(",")], args.words, args.turns))
    print(report)
    print(f"written to {write_result('gateway', report)}")


if __name__ == "__main__":
    main()
