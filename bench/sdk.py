"""Python SDK overhead: cogmesh.client.GatewayClient against the raw generated stubs, on the same calls.

Both sides talk to the same gateway (the whole suite, every service its own process),
each on its own channel, in one run, called in turn (alternating which goes first) so
both share the machine's load. Calls:

- GetSession (unary): the SDK adds argument checks, metadata and error mapping;
- a full turn ("What is 17 * 23?", built-in model, one calculator call): raw SendMessage
  read to the final event vs `client.run()` (which also collects a TurnResult);
- a Subscribe replay (stop_when_idle from seq 0 of a session holding many events): raw
  Subscribe vs `client.subscribe()` (which tracks the cursor and dedupes by seq).

    python -m bench.sdk [--rounds 5] [--unary 200] [--turns 20] [--replays 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections.abc import Awaitable, Callable

import grpc

from bench.harness import median, percentile, suite_processes, table, write_result
from cogmesh.client import GatewayClient
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc

QUESTION = "What is 17 * 23?"
HISTORY_TURNS = 25  # turns in the session the replays read


async def timed(n: int, op: Callable[[], Awaitable[object]], into: list[float]) -> None:
    for _ in range(n):
        started = time.perf_counter()
        await op()
        into.append((time.perf_counter() - started) * 1000)


async def run(rounds: int, unary: int, turns: int, replays: int) -> str:
    async with suite_processes() as settings:
        address = settings.gateway_addr
        channel = grpc.aio.insecure_channel(address)
        raw = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        async with GatewayClient(address, timeout_s=30) as sdk:
            await sdk.wait_ready(30)
            session_id = (await sdk.create_session()).session_id
            turn_sessions = {
                "raw": (await sdk.create_session()).session_id,
                "sdk": (await sdk.create_session()).session_id,
            }
            for _ in range(HISTORY_TURNS):
                assert (await sdk.run(session_id, QUESTION)).ok
            events_per_replay = len([e async for e in sdk.subscribe(session_id, stop_when_idle=True)])

            async def raw_get() -> object:
                return await raw.GetSession(gateway_pb2.GetSessionRequest(session_id=session_id), timeout=30)

            async def sdk_get() -> object:
                return await sdk.get_session(session_id)

            async def raw_turn() -> object:
                request = gateway_pb2.SendMessageRequest(session_id=turn_sessions["raw"], content=QUESTION)
                last = None
                async for response in raw.SendMessage(request, timeout=60):
                    last = response.events[-1]
                assert last is not None and last.HasField("final")
                return last

            async def sdk_turn() -> object:
                result = await sdk.run(turn_sessions["sdk"], QUESTION, timeout_s=60)
                assert result.ok
                return result

            async def raw_replay() -> object:
                request = gateway_pb2.SubscribeRequest(session_id=session_id, stop_when_idle=True)
                count = sum([len(r.events) async for r in raw.Subscribe(request, timeout=60)])
                assert count == events_per_replay
                return count

            async def sdk_replay() -> object:
                count = len([e async for e in sdk.subscribe(session_id, stop_when_idle=True)])
                assert count == events_per_replay
                return count

            cases = [
                ("GetSession (unary)", unary, raw_get, sdk_get),
                ("full turn (SendMessage to final)", turns, raw_turn, sdk_turn),
                (f"Subscribe replay ({events_per_replay} events)", replays, raw_replay, sdk_replay),
            ]
            samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name, *_ in cases}
            for _, n, raw_op, sdk_op in cases:  # warm-up, both sides
                await timed(max(1, n // 10), raw_op, [])
                await timed(max(1, n // 10), sdk_op, [])
            for _ in range(rounds):
                for name, n, raw_op, sdk_op in cases:
                    raw_ms, sdk_ms = samples[name]
                    for i in range(n):  # call by call, alternating who goes first: both see the same load
                        pair = [(raw_op, raw_ms), (sdk_op, sdk_ms)]
                        for op, into in pair if i % 2 == 0 else reversed(pair):
                            await timed(1, op, into)
        await channel.close()

    rows = []
    for name, (raw_ms, sdk_ms) in samples.items():
        raw_p50, sdk_p50 = median(raw_ms), median(sdk_ms)
        rows.append(
            [
                name,
                len(raw_ms),
                f"{raw_p50:.3f}",
                f"{sdk_p50:.3f}",
                f"{percentile(raw_ms, 99):.3f}",
                f"{percentile(sdk_ms, 99):.3f}",
                f"{sdk_p50 / raw_p50:.2f}x",
                f"{(sdk_p50 - raw_p50) * 1000:.0f}",
            ]
        )
    load = os.getloadavg()[0]
    return (
        "## Python SDK overhead\n\n"
        f"`cogmesh.client.GatewayClient` vs the raw generated stubs on the same gateway, same run: {rounds} rounds, "
        "the two sides called in turn (alternating which goes first), every service its own process, built-in model. "
        f"Machine: {os.cpu_count()} CPU(s), shared; load average {load:.1f} at the end of the run.\n\n"
        + table(
            [
                "call",
                "calls per side",
                "raw p50 ms",
                "SDK p50 ms",
                "raw p99 ms",
                "SDK p99 ms",
                "SDK / raw p50",
                "overhead µs p50",
            ],
            rows,
        )
        + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--unary", type=int, default=200, help="GetSession calls per side per round")
    parser.add_argument("--turns", type=int, default=20, help="turns per side per round")
    parser.add_argument("--replays", type=int, default=20, help="Subscribe replays per side per round")
    args = parser.parse_args()
    report = asyncio.run(run(args.rounds, args.unary, args.turns, args.replays))
    print(report)
    print(f"written to {write_result('sdk', report)}")


if __name__ == "__main__":
    main()
