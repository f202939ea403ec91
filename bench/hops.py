"""One internal hop: what a unary call between two suite processes costs, and how much of it is the kit's.

A turn's first token crosses seven hops (docs/architecture.md); each is a grpc.aio unary call or a
message on a long-lived stream. This measures the floor under that: `grpc.health.v1.Health/Check`
(every kit server serves it, and it does no work) over loopback, one call at a time, between a
client process and a server process, in four pairings:

- server: a bare `grpc.aio.server`, or one with the kit's interceptors (services/kit/server.py:
  observability, error mapping, validation), as every service runs;
- client: a bare `grpc.aio` channel, or the kit's (services/kit/clients.py: deadline and
  ready-wait interceptors, OpenTelemetry's client interceptor), as every service calls another.

Per pairing: p50 and p99 of the round trip, and the CPU of each process per call (from /proc).
The baseline is the bare pair, measured in the same run; pairings alternate over `--rounds`.
Writes bench/results/hops.md and hops.json.

    python -m bench.hops [--calls 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from bench.harness import free_ports, median, percentile, table, write_data, write_result
from bench.hotpath import cpu_seconds
from services.kit.config import Settings

WARMUP = 300
PAIRS = [("bare", "bare"), ("bare", "kit"), ("kit", "bare"), ("kit", "kit")]


async def serve(kind: str, port: int) -> None:
    """The server process: Health on `port`, with the kit's interceptors or none."""
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if kind == "kit":
        from services.kit.errors import ErrorMappingInterceptor
        from services.kit.server import ObservabilityInterceptor
        from services.kit.validation import ValidationInterceptor

        settings = Settings()
        interceptors = [
            ObservabilityInterceptor("bench", settings.metrics, settings.tracing),
            ErrorMappingInterceptor(),
            ValidationInterceptor(),
        ]
    server = grpc.aio.server(interceptors=interceptors)
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    print("ready", flush=True)
    await server.wait_for_termination()


@dataclass
class Pairing:
    server: str
    client: str
    latency_s: list[float] = field(default_factory=list)
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    calls: int = 0

    def row(self, base: Pairing) -> dict[str, float | str]:
        def per_call_us(seconds: float) -> float:
            return seconds / self.calls * 1e6

        p50, base_p50 = median(self.latency_s) * 1e6, median(base.latency_s) * 1e6
        cpu = per_call_us(self.server_cpu_s + self.client_cpu_s)
        base_cpu = (base.server_cpu_s + base.client_cpu_s) / base.calls * 1e6
        return {
            "server": self.server,
            "client": self.client,
            "p50_us": p50,
            "p99_us": percentile(self.latency_s, 99) * 1e6,
            "server_cpu_us": per_call_us(self.server_cpu_s),
            "client_cpu_us": per_call_us(self.client_cpu_s),
            "p50_x_bare": p50 / base_p50,
            "cpu_x_bare": cpu / base_cpu,
        }


async def measure(pairing: Pairing, port: int, server_pid: int, calls: int) -> None:
    address = f"127.0.0.1:{port}"
    if pairing.client == "kit":
        from services.kit.clients import open_channel

        channel = open_channel(address, Settings())
    else:
        channel = grpc.aio.insecure_channel(address)
    stub = health_pb2_grpc.HealthStub(channel)  # type: ignore[no-untyped-call]
    request = health_pb2.HealthCheckRequest()
    try:
        for _ in range(WARMUP):
            await stub.Check(request, timeout=10)
        server_before, client_before = cpu_seconds(server_pid), time.process_time()
        for _ in range(calls):
            started = time.perf_counter()
            await stub.Check(request, timeout=10)
            pairing.latency_s.append(time.perf_counter() - started)
        pairing.server_cpu_s += cpu_seconds(server_pid) - server_before
        pairing.client_cpu_s += time.process_time() - client_before
        pairing.calls += calls
    finally:
        await channel.close()


async def run(calls: int, rounds: int) -> list[Pairing]:
    pairings = {pair: Pairing(*pair) for pair in PAIRS}
    for _ in range(rounds):
        for server_kind in ("bare", "kit"):
            (port,) = free_ports(1)
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.hops", "--serve", server_kind, "--port", str(port),
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            try:
                assert process.stdout is not None
                if (await asyncio.wait_for(process.stdout.readline(), 30)).strip() != b"ready":
                    raise RuntimeError(f"the {server_kind} server did not start")
                for client_kind in ("bare", "kit"):
                    await measure(pairings[(server_kind, client_kind)], port, process.pid, calls)
            finally:
                process.terminate()
                await process.wait()
    return list(pairings.values())


def report(rows: list[dict[str, float | str]], calls: int, rounds: int) -> str:
    shown = [
        [
            r["server"],
            r["client"],
            f"{r['p50_us']:.0f}",
            f"{r['p99_us']:.0f}",
            f"{r['server_cpu_us']:.0f}",
            f"{r['client_cpu_us']:.0f}",
            f"{r['p50_x_bare']:.2f}x",
            f"{r['cpu_x_bare']:.2f}x",
        ]
        for r in rows
    ]
    headers = ["server", "client", "p50 µs", "p99 µs", "server CPU µs", "client CPU µs", "p50 vs bare", "CPU vs bare"]
    kit = next(r for r in rows if r["server"] == "kit" and r["client"] == "kit")
    bare = next(r for r in rows if r["server"] == "bare" and r["client"] == "bare")
    return (
        "## One internal hop (bench.hops)\n\n"
        f"`grpc.health.v1.Health/Check` over loopback, one call at a time, {calls * rounds:,} calls per pairing "
        f"in {rounds} alternating rounds; CPU of each process per call from /proc. The baseline is the bare "
        "pair (plain `grpc.aio` server and channel) in the same run.\n\n"
        + table(headers, shown)
        + f"\n\nA call between two suite processes costs {kit['p50_us']:.0f} µs and "
        f"{kit['server_cpu_us'] + kit['client_cpu_us']:.0f} µs of CPU; "
        f"gRPC alone, {bare['p50_us']:.0f} µs and {bare['server_cpu_us'] + bare['client_cpu_us']:.0f} µs. "
        "That is the floor under each of the turn's hops before any work is done in them.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=3000, help="measured calls per pairing and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each over every pairing")
    parser.add_argument("--serve", choices=["bare", "kit"], help=argparse.SUPPRESS)  # the server process
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve, args.port))
        return
    pairings = asyncio.run(run(args.calls, args.rounds))
    base = pairings[0]
    rows = [p.row(base) for p in pairings]
    write_data("hops", {"calls": args.calls, "rounds": args.rounds, "rows": rows})
    path = write_result("hops", report(rows, args.calls, args.rounds))
    print(path.read_text())
    print(f"written to {path}")


if __name__ == "__main__":
    main()
