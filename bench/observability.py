"""Observability overhead, measured side by side in one run.

The same calculator turn (gateway -> sessions, runtime -> models, context, sessions,
policy; two model calls and one tool call) through the suite as six processes, with
tracing and metrics off (the baseline) and on: every service records spans and exports
them over OTLP/gRPC to a collector in this process, and records its Prometheus metrics.
Suites alternate off/on for several rounds so both see the same machine load.

    python -m bench.observability [--rounds 2] [--turns 60] [--concurrency 8] [--breakdown]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from bench.harness import median, percentile, suite_processes, table, write_result
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc

QUESTION = "What is 17 * 23?"
WARMUP_TURNS = 15
# COGMESH_OTLP_ENDPOINT is set to the benchmark's collector wherever tracing is on.
MODES = {
    "off": {"COGMESH_TRACING": "false", "COGMESH_METRICS": "false"},
    "metrics": {"COGMESH_TRACING": "false", "COGMESH_METRICS": "true"},
    "tracing": {"COGMESH_TRACING": "true", "COGMESH_METRICS": "false"},
    "on": {"COGMESH_TRACING": "true", "COGMESH_METRICS": "true"},
}
LABELS = {
    "off": "off (baseline)",
    "metrics": "metrics only",
    "tracing": "tracing only (OTLP export)",
    "on": "tracing + metrics",
}


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC collector that counts the spans it receives."""

    def __init__(self) -> None:
        self.spans = 0
        self._lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        count = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        with self._lock:
            self.spans += count
        return trace_service_pb2.ExportTraceServiceResponse()


@contextlib.contextmanager
def collector() -> Iterator[tuple[Collector, str]]:
    servicer = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"http://127.0.0.1:{port}"
    finally:
        server.stop(0)


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """The children of `cogmesh up` inherit this process's environment."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass
class Sample:
    latencies_ms: list[float] = field(default_factory=list)
    throughput: list[float] = field(default_factory=list)  # turns per second, one value per round
    spans: int = 0
    turns: int = 0


async def one_turn(stub: gateway_pb2_grpc.GatewayServiceStub) -> float:
    """A new session and one calculator turn; returns the turn's latency in ms."""
    created = await stub.CreateSession(gateway_pb2.CreateSessionRequest(), timeout=10)
    request = gateway_pb2.SendMessageRequest(session_id=created.session.session_id, content=QUESTION)
    start = time.perf_counter()
    last = None
    async for response in stub.SendMessage(request, timeout=30):
        last = response.events[-1]
    elapsed = (time.perf_counter() - start) * 1000
    if last is None or last.WhichOneof("payload") != "final":
        raise RuntimeError(f"turn did not finish: {last}")
    return elapsed


async def measure(gateway: str, turns: int, concurrency: int, sample: Sample) -> None:
    async with grpc.aio.insecure_channel(gateway) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        for _ in range(WARMUP_TURNS):
            await one_turn(stub)
        for _ in range(turns):
            sample.latencies_ms.append(await one_turn(stub))

        per_worker = max(1, turns // concurrency)

        async def worker() -> None:
            for _ in range(per_worker):
                await one_turn(stub)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        sample.throughput.append(per_worker * concurrency / (time.perf_counter() - start))
        sample.turns += WARMUP_TURNS + turns + per_worker * concurrency


async def run_mode(mode: str, otlp: str, turns: int, concurrency: int, sample: Sample) -> None:
    values = dict(MODES[mode])
    values["COGMESH_OTLP_ENDPOINT"] = otlp if values["COGMESH_TRACING"] == "true" else ""
    with environment(values):
        async with suite_processes() as settings:
            await measure(settings.gateway_addr, turns, concurrency, sample)
            # Batches leave every 5 s (and on shutdown, which the suite's stop waits for).


async def main_async(args: argparse.Namespace) -> str:
    modes = list(MODES) if args.breakdown else ["off", "on"]
    samples = {mode: Sample() for mode in modes}
    with collector() as (spans, endpoint):
        for round_no in range(args.rounds):
            order = modes if round_no % 2 == 0 else modes[::-1]
            for mode in order:
                before = spans.spans
                await run_mode(mode, endpoint, args.turns, args.concurrency, samples[mode])
                await asyncio.sleep(0.2)  # the last export batch, sent at shutdown
                samples[mode].spans += spans.spans - before
                print(
                    f"round {round_no + 1}: {mode}: p50 {percentile(samples[mode].latencies_ms, 50):.2f} ms, "
                    f"{samples[mode].throughput[-1]:.1f} turns/s",
                    file=sys.stderr,
                )
    return report(samples, args)


def report(samples: dict[str, Sample], args: argparse.Namespace) -> str:
    off, on = samples["off"], samples["on"]
    if off.spans or samples.get("metrics", Sample()).spans:
        raise RuntimeError("tracing was off, yet the collector got spans")
    metrics = (
        ("turn latency p50 ms", lambda s: percentile(s.latencies_ms, 50)),
        ("turn latency p95 ms", lambda s: percentile(s.latencies_ms, 95)),
        ("turn latency p99 ms", lambda s: percentile(s.latencies_ms, 99)),
        (f"throughput, {args.concurrency} callers, turns/s", lambda s: median(s.throughput)),
    )
    rows = []
    for mode, sample in samples.items():
        for label, pick in metrics:
            base, value = pick(off), pick(sample)
            rows.append([LABELS[mode], label, f"{value:.2f}", f"{value / base:.3f}x"])
    spans_per_turn = on.spans / on.turns if on.turns else 0.0
    return "\n".join(
        [
            "# Observability overhead: tracing and metrics on vs off",
            "",
            f"One run on this machine: the suite as six processes, {args.rounds} round(s), the modes in alternating "
            f"order; per suite {WARMUP_TURNS} warm-up turns, {args.turns} sequential turns (each in a new session) "
            f"and {args.concurrency} concurrent callers. Turn: the calculator question (two model calls, one tool "
            "call, policy checks), through gateway, sessions, runtime, models, context and policy.",
            "",
            "Off (baseline): `COGMESH_TRACING=false`, `COGMESH_METRICS=false`. Tracing: every service records "
            "spans (100% sampled) and exports them over OTLP/gRPC to a collector in the benchmark process "
            f"({on.spans} spans received with tracing + metrics, {spans_per_turn:.1f} per turn). Metrics: every "
            "service records its Prometheus metrics. Ratios are to the baseline of the same run.",
            "",
            table(["mode", "metric", "value", "ratio to off"], rows),
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.observability", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="off/on pairs of suites")
    parser.add_argument("--turns", type=int, default=60, help="sequential turns per suite")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent callers for throughput")
    parser.add_argument("--breakdown", action="store_true", help="also metrics only and tracing only")
    args = parser.parse_args()
    text = asyncio.run(main_async(args))
    print(text)
    path = write_result("observability", text)
    print(f"written to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
