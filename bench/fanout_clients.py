"""Fan-out bench helpers that run as their own processes, as real clients would.

    python -m bench.fanout_clients subscribe --target ADDR --session ID --subscribers N --expected E
    python -m bench.fanout_clients produce --redis-url URL --prefix P --tenant T --session ID --events M --rate R

`subscribe` opens N Subscribe streams on a few channels, prints `ready` once every
stream has had its first message (a heartbeat), reads until each has E events, then
prints one JSON line: every event's lag (receive time - create_time), messages
received, first create and last receive times. `produce` takes the session's turn
lease and appends M token deltas to its shared Redis event log the way the sessions
service does (its Redis store), on a fixed schedule of R per second, stamped when
appended, then prints the rate it reached as JSON.

Spreading 100 subscribers over a few processes, and the producer over its own, keeps
the bench's own Python work from being the bottleneck it measures: in one process
the clients' decoding starved the producer (it fell to ~550 of 1,000 events/s).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from collections.abc import Awaitable, Callable

import grpc

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc

CHANNELS = 2  # per process: subscribers share a few connections, as clients behind one host would


async def subscribe(target: str, session_id: str, subscribers: int, expected: int) -> dict[str, object]:
    channels = [grpc.aio.insecure_channel(target) for _ in range(CHANNELS)]
    stubs = [gateway_pb2_grpc.GatewayServiceStub(c) for c in channels]  # type: ignore[no-untyped-call]
    lags: list[float] = []
    totals = {"messages": 0, "first_create": float("inf"), "last_receive": 0.0}
    readies = [asyncio.Event() for _ in range(subscribers)]

    async def one(i: int) -> None:
        got = 0
        request = gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=0)
        async for response in stubs[i % CHANNELS].Subscribe(request):
            now = time.time()
            readies[i].set()
            if not response.events:
                continue  # a heartbeat
            totals["messages"] += 1
            for event in response.events:
                created = event.create_time.ToNanoseconds() / 1e9
                totals["first_create"] = min(totals["first_create"], created)
                lags.append(now - created)
            got += len(response.events)
            totals["last_receive"] = max(totals["last_receive"], now)
            if got >= expected:
                return

    tasks = [asyncio.create_task(one(i)) for i in range(subscribers)]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
    # As the services do once serving (services/kit/server.py): full collections then skip
    # what imports made, so this client's own GC pauses do not show up as delivery lag.
    gc.collect()
    gc.freeze()
    print("ready", flush=True)
    await asyncio.wait_for(asyncio.gather(*tasks), 300)
    for channel in channels:
        await channel.close()
    return {"lags": lags, **totals}


async def pace(count: int, rate: float, send: Callable[[], Awaitable[None]]) -> float:
    """Call `send` `count` times on a fixed schedule of `rate` per second; returns the rate reached."""
    started = time.perf_counter()
    for i in range(count):
        due = started + i / rate - time.perf_counter()
        if due > 0:
            await asyncio.sleep(due)
        await send()
    return count / (time.perf_counter() - started)


async def produce(
    redis_url: str, prefix: str, tenant: str, session_id: str, events: int, rate: float
) -> dict[str, object]:
    from services.sessions.model import Acquired, NewEvents, Strategy
    from services.sessions.redis_store import RedisSessionStore  # the sessions service's own append path

    store = RedisSessionStore.from_url(redis_url, prefix, 0.0, 2.0)
    granted = await store.try_acquire(tenant, session_id, "paced", 600.0, Strategy.REJECT)
    assert isinstance(granted, Acquired), granted

    async def send() -> None:
        delta = events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text="w w w "))
        await store.append_events(tenant, session_id, NewEvents("paced", granted.token, [delta]))  # stamps the time

    try:
        return {"reached": await pace(events, rate, send)}
    finally:
        await store.release_lease(tenant, session_id, granted.token)
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    sub = commands.add_parser("subscribe")
    sub.add_argument("--target", required=True)
    sub.add_argument("--session", required=True)
    sub.add_argument("--subscribers", type=int, required=True)
    sub.add_argument("--expected", type=int, required=True, help="events each subscriber reads before it stops")
    prod = commands.add_parser("produce")
    prod.add_argument("--redis-url", required=True)
    prod.add_argument("--prefix", required=True)
    prod.add_argument("--tenant", required=True)
    prod.add_argument("--session", required=True)
    prod.add_argument("--events", type=int, required=True)
    prod.add_argument("--rate", type=float, required=True)
    args = parser.parse_args()
    if args.command == "subscribe":
        result = asyncio.run(subscribe(args.target, args.session, args.subscribers, args.expected))
    else:
        result = asyncio.run(produce(args.redis_url, args.prefix, args.tenant, args.session, args.events, args.rate))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
