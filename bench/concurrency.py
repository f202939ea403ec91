"""Many sessions at once through the suite as processes, with in-memory stores and with Redis.

For 10, 100 and 1,000 sessions: create them, then run one turn in every one of them at
the same moment (the built-in model echoing a short message) and record each turn's
time to first event and errors. The RSS of every service process before and after
gives the memory per session (the sessions stay open); then one Subscribe stream per
session is opened and held, and the gateway's RSS growth gives the memory per
subscriber. Levels run in order on one suite, so each is measured against the memory
the previous one left. The second pass sets COGMESH_REDIS_URL to a private
redis-server (sessions, leases and the event log live there), whose own memory growth
is reported too. Writes bench/results/concurrency.md and concurrency.json.

    python -m bench.concurrency [--levels 10,100,1000] [--modes memory,redis]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import redis

from bench.harness import (
    Timing,
    median,
    percentile,
    suite,
    suite_rss,
    table,
    time_stream,
    write_data,
    write_result,
)
from bench.sessions import redis_for
from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.suite.supervisor import Supervisor

MESSAGE = "hello there, how are you today?"
CHANNELS = 16  # the callers are many clients, not one connection
TURN_TIMEOUT_S = 300.0
SETTLE_S = 1.0  # let the services finish their bookkeeping before RSS is read
SUITE = {
    "tenant_rate_per_s": 1e6,
    "tenant_burst": 1_000_000,
    "tenant_max_streams": 100_000,
    "heartbeat_s": 0.5,  # a fresh subscriber hears within half a second that it is connected
    "log_level": "warning",
}
KB = 1024.0


@dataclass
class Level:
    sessions: int
    timings: list[Timing] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    error_samples: dict[str, str] = field(default_factory=dict)  # one message per error kind, to tell causes apart
    wall_s: float = 0.0
    session_bytes: dict[str, float] = field(default_factory=dict)  # per session, by service
    redis_session_bytes: float = 0.0
    subscriber_bytes: float = 0.0  # gateway RSS per open subscriber
    subscriber_errors: int = 0

    def summary(self) -> dict[str, Any]:
        ttfe = [t.first_event * 1000 for t in self.timings]
        return {
            "sessions": self.sessions,
            "ok": len(self.timings),
            "errors": dict(self.errors),
            "error_samples": self.error_samples,
            "ttfe_p50_ms": median(ttfe),
            "ttfe_p99_ms": percentile(ttfe, 99),
            "full_p99_ms": percentile([t.full * 1000 for t in self.timings], 99),
            "wall_s": self.wall_s,
            "turns_per_s": len(self.timings) / self.wall_s if self.wall_s else float("nan"),
            "session_kb": {k: v / KB for k, v in self.session_bytes.items()},
            "redis_session_kb": self.redis_session_bytes / KB,
            "subscriber_kb": self.subscriber_bytes / KB,
            "subscriber_errors": self.subscriber_errors,
        }


def is_delta(event: events_pb2.RuntimeEvent) -> bool:
    return bool(event.WhichOneof("payload") == "assistant_delta")


def redis_used(url: str | None) -> int:
    if not url:
        return 0
    client = redis.Redis.from_url(url)
    try:  # the keys' own bytes: INFO's totals move with client buffers and allocator pages
        pipe = client.pipeline(transaction=False)
        for key in client.scan_iter(count=1000):
            pipe.memory_usage(key, samples=0)
        return sum(int(size or 0) for size in pipe.execute())
    finally:
        client.close()


async def settled_rss(supervisor: Supervisor, settle_s: float) -> dict[str, int]:
    gc.collect()
    await asyncio.sleep(settle_s)
    return suite_rss(supervisor)


async def one_turn(stub: gateway_pb2_grpc.GatewayServiceStub, session_id: str, level: Level) -> None:
    async def events() -> AsyncIterator[events_pb2.RuntimeEvent]:
        request = gateway_pb2.SendMessageRequest(session_id=session_id, content=MESSAGE)
        async for response in stub.SendMessage(request, timeout=TURN_TIMEOUT_S):
            for event in response.events:
                if event.WhichOneof("payload") == "error":  # the turn failed inside the suite
                    kind = f"error event {events_pb2.ErrorKind.Name(event.error.kind)}"
                    level.error_samples.setdefault(kind, event.error.message)
                    raise RuntimeError(kind)
                yield event

    try:
        level.timings.append(await time_stream(events, is_delta))
    except grpc.aio.AioRpcError as exc:
        level.errors[exc.code().name] += 1
        level.error_samples.setdefault(exc.code().name, exc.details() or "")
    except RuntimeError as exc:
        level.errors[str(exc)] += 1


async def hold_subscriber(
    stub: gateway_pb2_grpc.GatewayServiceStub, session_id: str, after: int, heard: asyncio.Event
) -> None:
    async for _ in stub.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=after)):
        heard.set()


async def run_level(
    stubs: list[gateway_pb2_grpc.GatewayServiceStub],
    supervisor: Supervisor,
    n: int,
    redis_url: str | None,
    settle_s: float,
) -> Level:
    level = Level(n)
    before, redis_before = await settled_rss(supervisor, settle_s), redis_used(redis_url)
    created = await asyncio.gather(
        *(stubs[i % CHANNELS].CreateSession(gateway_pb2.CreateSessionRequest()) for i in range(n))
    )
    ids = [c.session.session_id for c in created]
    started = time.perf_counter()
    await asyncio.gather(*(one_turn(stubs[i % CHANNELS], sid, level) for i, sid in enumerate(ids)))
    level.wall_s = time.perf_counter() - started
    after = await settled_rss(supervisor, settle_s)
    level.session_bytes = {name: (after[name] - before[name]) / n for name in after}
    level.session_bytes["all services"] = sum(after.values()) / n - sum(before.values()) / n
    level.redis_session_bytes = (redis_used(redis_url) - redis_before) / n

    # One held subscriber per session; it first replays the session's few events.
    heard = [asyncio.Event() for _ in ids]
    tasks = [asyncio.create_task(hold_subscriber(stubs[i % CHANNELS], sid, 0, heard[i])) for i, sid in enumerate(ids)]
    all_heard: asyncio.Future[list[bool]] = asyncio.ensure_future(asyncio.gather(*(h.wait() for h in heard)))
    # Stop waiting as soon as every stream is heard, or one of them failed.
    waited: list[asyncio.Future[Any]] = [all_heard, *tasks]
    await asyncio.wait(waited, timeout=30 + n / 20, return_when=asyncio.FIRST_COMPLETED)
    all_heard.cancel()
    level.subscriber_errors = sum(not h.is_set() or t.done() for h, t in zip(heard, tasks, strict=True))
    for task in tasks:
        if task.done() and isinstance(exc := task.exception(), grpc.aio.AioRpcError):
            level.error_samples.setdefault(f"subscriber {exc.code().name}", exc.details() or "")
    level.subscriber_bytes = ((await settled_rss(supervisor, settle_s))["gateway"] - after["gateway"]) / n
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return level


async def run_mode(mode: str, levels: list[int], warmup: int, settle_s: float) -> list[Level]:
    with redis_for(mode) as redis_url:
        overrides: dict[str, object] = dict(SUITE) | ({"redis_url": redis_url} if redis_url else {})
        async with suite(**overrides) as (settings, supervisor):
            channels = [grpc.aio.insecure_channel(settings.gateway_addr) for _ in range(CHANNELS)]
            stubs = [gateway_pb2_grpc.GatewayServiceStub(c) for c in channels]  # type: ignore[no-untyped-call]
            try:
                warm = Level(warmup)
                for _ in range(warmup):
                    session = (await stubs[0].CreateSession(gateway_pb2.CreateSessionRequest())).session
                    await one_turn(stubs[0], session.session_id, warm)
                if warm.errors:
                    raise RuntimeError(f"warm-up turns failed: {dict(warm.errors)}")
                results = []
                for n in levels:
                    print(f"  {mode}: {n} sessions", flush=True)
                    results.append(await run_level(stubs, supervisor, n, redis_url, settle_s))
                return results
            finally:
                for channel in channels:
                    await channel.close()


def report(data: dict[str, list[dict[str, Any]]]) -> str:
    rows, samples = [], []
    for mode, levels in data.items():
        for s in levels:
            for kind, message in s.get("error_samples", {}).items():
                samples.append(f"- {mode} {s['sessions']}, {kind}: {message[:300]}")
            errors = ", ".join(f"{k} x{v}" for k, v in s["errors"].items()) or "0"
            kb = s["session_kb"]
            rows.append(
                [
                    mode,
                    s["sessions"],
                    s["ok"],
                    errors,
                    f"{s['ttfe_p50_ms']:.1f}",
                    f"{s['ttfe_p99_ms']:.1f}",
                    f"{s['full_p99_ms']:.1f}",
                    f"{s['turns_per_s']:.0f}",
                    f"{kb['all services']:.1f}",
                    f"{kb['gateway']:.1f} / {kb['sessions']:.1f} / {kb['runtime']:.1f}",
                    f"{s['redis_session_kb']:.1f}" if mode == "redis" else "-",
                    f"{s['subscriber_kb']:.1f}"
                    + (f" ({s['subscriber_errors']} failed)" if s["subscriber_errors"] else ""),
                ]
            )
    headers = [
        "stores",
        "sessions",
        "turns ok",
        "errors",
        "TTFE p50 ms",
        "TTFE p99 ms",
        "full turn p99 ms",
        "turns/s",
        "RSS KB/session (all services)",
        "of which gateway / sessions / runtime",
        "Redis KB/session",
        "gateway KB/subscriber",
    ]
    return (
        "# Concurrency: many sessions at once, in-memory stores and Redis\n\n"
        f'Every session runs one turn ("{MESSAGE}", echoed by the built-in model in a few deltas), all started '
        f"together; the suite is six processes on this 2-core machine, clients on {CHANNELS} channels. Memory is "
        "the RSS growth of the service processes over the level (sessions stay open; levels run in order on one "
        "suite, so allocator reuse makes small levels noisy), Redis memory is the growth of "
        "`MEMORY USAGE` summed over every key of a private redis-server. Subscribers: one held "
        "Subscribe stream per session, gateway RSS growth per stream.\n\n"
        + table(headers, rows)
        + "\n"
        + ("\nOne message of each kind of error:\n\n" + "\n".join(samples) + "\n" if samples else "")
    )


async def run(levels: list[int], modes: list[str], warmup: int = 20, settle_s: float = SETTLE_S) -> str:
    data: dict[str, list[dict[str, Any]]] = {}
    for mode in modes:
        data[mode] = [level.summary() for level in await run_mode(mode, levels, warmup, settle_s)]
    write_data("concurrency", {"modes": data, "time": time.time()})
    return report(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", default="10,100,1000", help="concurrent sessions per level")
    parser.add_argument("--modes", default="memory,redis", help="stores: memory, redis or both")
    parser.add_argument("--warmup", type=int, default=20, help="sequential turns before the first level")
    parser.add_argument("--settle", type=float, default=SETTLE_S, help="seconds to wait before reading RSS")
    args = parser.parse_args()
    modes = args.modes.split(",")
    if unknown := set(modes) - {"memory", "redis"}:
        parser.error(f"--modes: unknown {', '.join(sorted(unknown))} (use memory and/or redis)")
    text = asyncio.run(run([int(n) for n in args.levels.split(",")], modes, args.warmup, args.settle))
    print(text)
    print(f"written to {write_result('concurrency', text)}")


if __name__ == "__main__":
    main()
