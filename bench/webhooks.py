"""Webhook delivery latency (issue 30): from a turn's end to its webhook POST arriving.

One run, one machine. The suite runs as `cogmesh up` runs it (a process per service),
on the memory store and on Redis (a private redis-server), with one tenant-wide webhook
to a local aiohttp receiver in this process (private targets allowed for the benchmark).
Each turn is "hello" to the built-in model. The latency of a delivery is its arrival at
the receiver minus the create_time of the turn's final event (stamped by the runtime when
the turn ended; the same machine's clock): the append to the log, the enqueue, the
dispatcher's take of the queue (woken by the enqueue: no claim) and the signed POST. Turns
run one at a time, then 16 at once.

    python -m bench.webhooks [--turns 200] [--concurrency 1,16]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web
from google.protobuf import timestamp_pb2

from bench.harness import median, percentile, suite, table, write_data, write_result
from bench.sessions import private_redis
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc, webhooks_pb2, webhooks_pb2_grpc

SUITE: dict[str, object] = {
    "tenant_rate_per_s": 1e6,
    "tenant_burst": 1_000_000,
    "tenant_max_streams": 100_000,
    "webhook_allow_private_targets": True,
}
READY_TIMEOUT_S = 120.0


class Receiver:
    def __init__(self) -> None:
        self.arrivals: dict[str, tuple[float, float]] = {}  # delivery id -> (turn end, arrival)
        self.posts = 0
        self.changed = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        arrived = time.time()
        body = json.loads(await request.read())
        stamp = timestamp_pb2.Timestamp()
        stamp.FromJsonString(body["event"]["createTime"])
        self.posts += 1
        self.arrivals.setdefault(body["delivery_id"], (stamp.ToNanoseconds() / 1e9, arrived))
        self.changed.set()
        return web.Response(status=204)

    async def wait_for(self, count: int, timeout_s: float = 60.0) -> None:
        async with asyncio.timeout(timeout_s):
            while len(self.arrivals) < count:
                self.changed.clear()
                await self.changed.wait()


@contextlib.asynccontextmanager
async def receiving() -> AsyncIterator[tuple[Receiver, str]]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield receiver, f"http://127.0.0.1:{port}/hook"
    finally:
        await runner.cleanup()


async def run_turns(gateway: gateway_pb2_grpc.GatewayServiceStub, turns: int, concurrency: int) -> None:
    sessions = [
        (await gateway.CreateSession(gateway_pb2.CreateSessionRequest(), timeout=10)).session.session_id
        for _ in range(concurrency)
    ]

    async def worker(session_id: str, count: int) -> None:
        for _ in range(count):
            request = gateway_pb2.SendMessageRequest(session_id=session_id, content="hello")
            async for _ in gateway.SendMessage(request, timeout=30):
                pass

    share = [turns // concurrency + (1 if i < turns % concurrency else 0) for i in range(concurrency)]
    await asyncio.gather(*(worker(s, n) for s, n in zip(sessions, share, strict=True)))


async def measure(store: str, redis_url: str, turns: int, concurrencies: list[int]) -> list[dict[str, Any]]:
    overrides = dict(SUITE)
    key_dir = tempfile.mkdtemp(prefix="cogmesh-bench-webhooks-")
    if store == "redis":
        key = Path(key_dir) / "key"
        key.write_text(base64.b64encode(os.urandom(32)).decode())
        overrides |= {"redis_url": redis_url, "webhook_secrets_key_file": str(key)}
    rows = []
    async with (
        suite(READY_TIMEOUT_S, **overrides) as (settings, _),
        receiving() as (receiver, url),
        grpc.aio.insecure_channel(settings.gateway_addr) as channel,
    ):
        gateway = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        hooks = webhooks_pb2_grpc.WebhookServiceStub(channel)  # type: ignore[no-untyped-call]
        made = await hooks.CreateWebhook(
            webhooks_pb2.CreateWebhookRequest(url=url, event_kinds=[webhooks_pb2.WEBHOOK_EVENT_KIND_FINAL]),
            timeout=10,
        )
        await run_turns(gateway, 20, 4)  # warm up
        await receiver.wait_for(20)
        for concurrency in concurrencies:
            receiver.arrivals.clear()
            receiver.posts = 0
            started = time.perf_counter()
            await run_turns(gateway, turns, concurrency)
            await receiver.wait_for(turns)
            elapsed = time.perf_counter() - started
            latencies = [(arrived - ended) * 1000 for ended, arrived in receiver.arrivals.values()]
            rows.append(
                {
                    "store": store,
                    "concurrency": concurrency,
                    "turns": turns,
                    "deliveries": len(receiver.arrivals),
                    "posts": receiver.posts,
                    "p50_ms": median(latencies),
                    "p99_ms": percentile(latencies, 99),
                    "max_ms": max(latencies),
                    "turns_per_s": turns / elapsed,
                }
            )
        await hooks.DeleteWebhook(webhooks_pb2.DeleteWebhookRequest(webhook_id=made.webhook.webhook_id))
    return rows


async def main(turns: int, concurrencies: list[int]) -> None:
    rows = []
    with private_redis() as redis_url:
        for store in ("memory", "redis"):
            rows += await measure(store, redis_url, turns, concurrencies)
    header = __doc__.split("\n\n    python")[0].split("\n", 2)[2].replace("\n", " ").strip()
    text = "# Webhook delivery latency from turn end\n\n" + header + "\n\n"
    text += table(
        ["store", "at once", "turns", "deliveries", "POSTs", "p50 ms", "p99 ms", "max ms", "turns/s"],
        [
            [
                r["store"],
                r["concurrency"],
                r["turns"],
                r["deliveries"],
                r["posts"],
                f"{r['p50_ms']:.1f}",
                f"{r['p99_ms']:.1f}",
                f"{r['max_ms']:.1f}",
                f"{r['turns_per_s']:.0f}",
            ]
            for r in rows
        ],
    )
    print(text)
    write_result("webhooks", text)
    write_data("webhooks", {"rows": rows})


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--concurrency", default="1,16")
    args = parser.parse_args()
    asyncio.run(main(args.turns, [int(c) for c in args.concurrency.split(",")]))


if __name__ == "__main__":
    cli()
