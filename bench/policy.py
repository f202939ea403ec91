"""Policy round trips: CheckToolCall and a PRE_ACT interceptor pass, over gRPC and in-process.

    .venv/bin/python -m bench.policy [--iterations N]

The runtime consults policy at every phase of every step, so each round trip
must be cheap. Both rows use the same configuration: the shipped policy.yaml
(default-deny tool policy, tool budget) and a PRE_ACT chain of BudgetGuard,
PermissionGate, CircuitBreaker and RateLimiter (in memory, a limit no call
reaches). The baseline is the same decision made in-process by PolicyEngine;
the gRPC rows call a policy server running as its own process (`python -m
services.policy`, as `cogmesh up` runs it) over loopback, one call at a time;
a grpc.health Check on the same server shows what a round trip costs with no
policy work at all, and CheckToolCalls shows the batch of one model step (four
calls per round trip). Both sides log every decision at info level, as in
production (to /dev/null). Writes the table to bench/results/policy.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.harness import free_ports, percentile, table, write_result
from cogmesh.policy.v1 import policy_pb2, policy_pb2_grpc
from services.kit.config import Settings
from services.kit.logging import configure_logging
from services.kit.protos import dict_to_struct
from services.lib.agents import AgentRegistry
from services.lib.policy.assembly import Shared
from services.lib.policy.config import DEFAULT_POLICY_DIR, ConfigStore
from services.lib.policy.domain import Phase, Scope, TurnContext
from services.lib.policy.engine import PolicyEngine
from services.lib.policy.hooks import HookEvent, HookHandler, HookPayload, HookReply
from services.lib.policy.ratelimit import MemoryWindowStore

INTERCEPTORS = """
interceptors:
  - type: BudgetGuard
    model_calls: 1000
    tool_calls: 1000000
  - type: PermissionGate
    tools: ["*"]
  - type: CircuitBreaker
    failure_threshold: 5
    reset_timeout: 30
  - type: RateLimiter
    calls_per_window: 100000000
    window_seconds: 60
    per_tool: true
"""
ARGS = {"expression": "17 * 23", "precision": 2}
TARGET_P50_MS = 0.5
BATCH = 4
ROUNDS = 10


def config_dir() -> Path:
    directory = Path(tempfile.mkdtemp(prefix="cogmesh-bench-policy-"))
    shutil.copy(DEFAULT_POLICY_DIR / "policy.yaml", directory / "policy.yaml")
    shutil.copy(DEFAULT_POLICY_DIR / "role_router.yaml", directory / "role_router.yaml")
    (directory / "interceptors.yaml").write_text(INTERCEPTORS)
    return directory


def check_request() -> policy_pb2.CheckToolCallRequest:
    return policy_pb2.CheckToolCallRequest(
        tenant_id="t",
        agent="default",
        role_id="assistant",
        tool_name="calculator",
        arguments=dict_to_struct(ARGS),
        session_id="s1",
        turn_id="turn-1",
        tool_call_id="call-1",
        context=policy_pb2.TurnContext(model="local", model_calls=1, tool_calls=1, message_count=3),
    )


def pre_act_request() -> policy_pb2.RunInterceptorsRequest:
    return policy_pb2.RunInterceptorsRequest(
        phase=policy_pb2.PHASE_PRE_ACT,
        scope=policy_pb2.Scope(tenant_id="t", session_id="s1", turn_id="turn-1", agent="default", role_id="assistant"),
        context=policy_pb2.TurnContext(model="local", model_calls=1, tool_calls=1, message_count=3),
        tool_call={"id": "call-1", "name": "calculator", "arguments": dict_to_struct(ARGS)},
    )


async def measure(calls: dict[str, Callable[[], Awaitable[object]]], iterations: int) -> dict[str, list[float]]:
    """Latency samples (ms) per call, taken in interleaved rounds so load spikes on a
    shared machine hit every row alike instead of whichever ran at that moment."""
    for call in calls.values():
        for _ in range(max(50, iterations // 10)):  # warm-up: caches, channel, bundle
            await call()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    per_round = max(1, iterations // ROUNDS)
    for _ in range(ROUNDS):
        for name, call in calls.items():
            for _ in range(per_round):
                t0 = time.perf_counter_ns()
                await call()
                samples[name].append((time.perf_counter_ns() - t0) / 1e6)
    return samples


def no_remote_hooks(address: str, timeout_s: float) -> HookHandler:
    async def handler(event: HookEvent, payload: HookPayload) -> HookReply | None:
        raise RuntimeError("no remote hooks in the benchmark")

    return handler


@contextlib.asynccontextmanager
async def policy_process(directory: Path) -> AsyncIterator[str]:
    port = free_ports(1)[0]
    address = f"127.0.0.1:{port}"
    env = {**os.environ, "COGMESH_POLICY_DIR": str(directory), "COGMESH_LOG_LEVEL": "info"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.policy", "--listen", address,
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            async with asyncio.timeout(30):
                while True:
                    with contextlib.suppress(grpc.aio.AioRpcError):
                        reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                        if reply.status == health_pb2.HealthCheckResponse.SERVING:
                            break
                    await asyncio.sleep(0.05)
        yield address
    finally:
        process.terminate()
        await process.wait()


async def run(iterations: int) -> str:
    directory = config_dir()
    engine = PolicyEngine(
        AgentRegistry.default(), ConfigStore(directory), Shared(MemoryWindowStore(), no_remote_hooks, None, {})
    )
    scope = Scope("default", "t", "s1", "turn-1", "assistant")

    async def in_process_check() -> object:
        ctx = TurnContext(scope, model="local", model_calls=1, tool_calls=1, message_count=3)
        decision = await engine.check_tool_call(scope, "calculator", dict(ARGS), ctx, "call-1")
        assert decision.allowed, decision.reason
        return decision

    async def in_process_pre_act() -> object:
        ctx = TurnContext(scope, model="local", model_calls=1, tool_calls=1, message_count=3)
        ctx.tool_name, ctx.tool_call_id, ctx.tool_args = "calculator", "call-1", dict(ARGS)
        return await engine.run_phase(Phase.PRE_ACT, ctx)

    local = await measure({"check": in_process_check, "pre_act": in_process_pre_act}, iterations)
    check_base, pre_act_base = local["check"], local["pre_act"]

    async with policy_process(directory) as address, grpc.aio.insecure_channel(address) as channel:
        stub = policy_pb2_grpc.PolicyServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        check, pre_act, ping = check_request(), pre_act_request(), health_pb2.HealthCheckRequest()
        step = policy_pb2.CheckToolCallsRequest(calls=[check] * BATCH)

        async def grpc_check() -> object:
            reply = await stub.CheckToolCall(check, timeout=5)
            assert reply.verdict == policy_pb2.VERDICT_ALLOW, reply.reason
            return reply

        async def grpc_step() -> object:
            reply = await stub.CheckToolCalls(step, timeout=5)
            assert all(d.verdict == policy_pb2.VERDICT_ALLOW for d in reply.decisions)
            return reply

        async def grpc_pre_act() -> object:
            reply = await stub.RunInterceptors(pre_act, timeout=5)
            assert reply.outcome.action == policy_pb2.INTERCEPT_ACTION_OK
            return reply

        async def grpc_health() -> object:
            return await health.Check(ping, timeout=5)

        remote = await measure({"check": grpc_check, "pre_act": grpc_pre_act, "health": grpc_health}, iterations)
        check_grpc, pre_act_grpc, floor = remote["check"], remote["pre_act"], remote["health"]
        step_grpc = [t / BATCH for t in (await measure({"step": grpc_step}, iterations // BATCH))["step"]]

    rows = [
        ("CheckToolCall, in-process (baseline)", check_base, check_base),
        ("CheckToolCall, gRPC loopback", check_grpc, check_base),
        (f"CheckToolCalls, {BATCH} calls of one step per round trip, per call", step_grpc, check_base),
        ("PRE_ACT pass, in-process (baseline)", pre_act_base, pre_act_base),
        ("PRE_ACT pass (RunInterceptors), gRPC loopback", pre_act_grpc, pre_act_base),
        ("grpc.health Check on the same server (no policy work)", floor, None),
    ]
    body = []
    for name, samples, base in rows:
        p50, p99 = percentile(samples, 50), percentile(samples, 99)
        body.append(
            (
                name,
                f"{p50:.3f}",
                f"{p99:.3f}",
                f"{p50 / percentile(base, 50):.1f}x" if base else "-",
                f"{p99 / percentile(base, 99):.1f}x" if base else "-",
                f"{p50 / percentile(floor, 50):.2f}x",
                "yes" if p50 < TARGET_P50_MS else "no",
            )
        )
    headers = [
        "measurement",
        "p50 ms",
        "p99 ms",
        "p50 vs in-process",
        "p99 vs in-process",
        "p50 vs health",
        "p50 < 0.5 ms",
    ]
    load = os.getloadavg()[0]
    return (
        "# Policy round trips\n\n"
        f"{iterations} sequential calls per row after a warm-up ({iterations // BATCH} round trips for the batch "
        f"row), taken in {ROUNDS} interleaved rounds; the server is its own process, the client one grpc.aio "
        "channel. "
        f"Machine: {os.cpu_count()} CPU(s), shared; load average {load:.1f} at the end of the run.\n\n"
        + table(headers, body)
        + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=3000)
    opts = parser.parse_args()
    # Log like production (JSON at info), into /dev/null so the terminal stays readable.
    with open(os.devnull, "w") as devnull:
        sys.stderr = devnull
        try:
            configure_logging("policy", Settings(log_level="info"))
        finally:
            sys.stderr = sys.__stderr__
        text = asyncio.run(run(opts.iterations))
    print(text)
    print(f"written to {write_result('policy', text)}")


if __name__ == "__main__":
    main()
