"""cogmesh against a LangGraph agent server, side by side in one run, with the agent loop in-process.

The same two turns on every system, timed by the same code (bench.harness.time_stream):

- `tokens`: the model streams 100 tokens with no latency;
- `tool`: the model calls a calculator once, then answers ("17 * 23 = 391.").

Systems: cogmesh through the gateway and every service (six processes, in-memory
stores); cogmesh's agent loop called in-process (services.runtime.loop.run_turn, no
network: the floor); the peer, `langgraph dev` in its in-memory mode with a
langchain-core fake chat model, driven over HTTP with its streaming runs API
(`stream_mode="messages-tuple"`). Each turn runs in a new session / thread (created
outside the timing) so history never grows. Rounds interleave the systems so they share
the machine's load. Writes bench/results/peer.md and peer.json.

    python -m bench.peer [--turns 100] [--rounds 4] [--no-peer]

The peer's virtualenv (bench/out/peer-venv) is created on first use; --no-peer skips it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx

from bench.harness import RESULTS, Timing, median, percentile, suite, table, time_stream, write_data, write_result
from bench.peer.server import VENV, ensure_venv, peer_env, running_peer
from bench.runtime import turn as loop_turn
from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.runtime.local_model import LocalModel
from services.runtime.loop import run_turn

# Both models answer a plain message with REPLY_TOKENS tokens "tok0 tok1 ...", one event each
# (cogmesh's local model through COGMESH_LOCAL_REPLY_TOKENS, the peer's fake model by design).
REPLY_TOKENS = 100
TOKENS_TEXT = "Tell me something."
TOOL_TEXT = "What is 17 * 23?"
WORKLOADS = {"tokens": TOKENS_TEXT, "tool": TOOL_TEXT}
LABELS = {"tokens": "100 streamed tokens", "tool": "one tool call, then the answer"}
WARMUP = 10
ROOT = Path(__file__).resolve().parents[2]
# The gateway's defaults throttle a tenant at 200 requests/s: a benchmark is not a tenant to throttle.
SUITE = {
    "tenant_rate_per_s": 1e6,
    "tenant_burst": 1_000_000,
    "tenant_max_streams": 10_000,
    "log_level": "warning",
    "local_reply_tokens": REPLY_TOKENS,
}

Turn = Callable[[str], Awaitable[Timing]]


def is_delta(event: events_pb2.RuntimeEvent) -> bool:
    return bool(event.WhichOneof("payload") == "assistant_delta")


def cogmesh_turn(stub: gateway_pb2_grpc.GatewayServiceStub) -> Turn:
    async def one(text: str) -> Timing:
        session = (await stub.CreateSession(gateway_pb2.CreateSessionRequest())).session

        async def events() -> AsyncIterator[events_pb2.RuntimeEvent]:
            request = gateway_pb2.SendMessageRequest(session_id=session.session_id, content=text)
            async for response in stub.SendMessage(request):
                for event in response.events:
                    yield event

        timing = await time_stream(events, is_delta)
        await stub.DeleteSession(gateway_pb2.DeleteSessionRequest(session_id=session.session_id))
        return timing

    return one


def in_process_turn() -> Turn:
    model = LocalModel(reply_tokens=REPLY_TOKENS)

    async def one(text: str) -> Timing:
        return await time_stream(lambda: run_turn(loop_turn(model, text)), is_delta)

    return one


def is_peer_token(event: tuple[str, Any]) -> bool:
    name, data = event
    return name == "messages" and bool(data[0].get("content"))  # data: [message chunk, metadata]


def peer_turn(client: httpx.AsyncClient) -> Turn:
    async def one(text: str) -> Timing:
        thread = (await client.post("/threads", json={})).raise_for_status().json()["thread_id"]
        body = {
            "assistant_id": "agent",
            "input": {"messages": [{"role": "human", "content": text}]},
            "stream_mode": "messages-tuple",
        }

        async def events() -> AsyncIterator[tuple[str, Any]]:
            async with client.stream("POST", f"/threads/{thread}/runs/stream", json=body) as response:
                response.raise_for_status()
                name = ""
                async for line in response.aiter_lines():  # server-sent events
                    if line.startswith("event:"):
                        name = line[6:].strip()
                    elif line.startswith("data:"):
                        data = json.loads(line[5:])
                        if name == "error":
                            raise RuntimeError(f"peer run failed: {data}")
                        yield name, data

        timing = await time_stream(events, is_peer_token)
        (await client.delete(f"/threads/{thread}")).raise_for_status()
        return timing

    return one


async def peer_in_process(turns: int) -> dict[str, list[Timing]]:
    """The peer's graph called in-process, in the peer's venv: LangGraph's own floor."""
    process = await asyncio.create_subprocess_exec(
        str(VENV / "bin" / "python"),
        "-m",
        "bench.peer.inprocess",
        "--turns",
        str(turns),
        "--workloads",
        json.dumps(WORKLOADS),
        cwd=ROOT,
        env=peer_env() | {"PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 600)
    if process.returncode != 0:
        raise RuntimeError(f"bench.peer.inprocess exited with {process.returncode}")
    return {w: [Timing(a, b, c, int(d)) for a, b, c, d in rows] for w, rows in json.loads(out).items()}


async def measure(systems: dict[str, Turn], turns: int, rounds: int, warmup: int) -> dict[str, dict[str, list[Timing]]]:
    """Timings per workload and system; rounds interleave the systems."""
    timings: dict[str, dict[str, list[Timing]]] = {w: {s: [] for s in systems} for w in WORKLOADS}
    for workload, text in WORKLOADS.items():
        for one in systems.values():
            for _ in range(warmup):
                await one(text)
        for _ in range(rounds):
            for name, one in systems.items():
                for _ in range(max(1, turns // rounds)):
                    timings[workload][name].append(await one(text))
    return timings


def summary(timings: list[Timing]) -> dict[str, float]:
    ms = 1000.0
    return {
        "ttfe_p50_ms": median([t.first_event for t in timings]) * ms,
        "ttfe_p99_ms": percentile([t.first_event for t in timings], 99) * ms,
        "ttft_p50_ms": median([t.first_token for t in timings]) * ms,
        "ttft_p99_ms": percentile([t.first_token for t in timings], 99) * ms,
        "full_p50_ms": median([t.full for t in timings]) * ms,
        "full_p99_ms": percentile([t.full for t in timings], 99) * ms,
        "events": median([float(t.events) for t in timings]),
        "turns": float(len(timings)),
    }


def report(data: dict[str, dict[str, dict[str, float]]], peer_note: str) -> str:
    rows = []
    for workload, systems in data.items():
        for name, s in systems.items():
            rows.append(
                [
                    LABELS[workload],
                    name,
                    f"{s['events']:.0f}",
                    f"{s['ttfe_p50_ms']:.2f}",
                    f"{s['ttfe_p99_ms']:.2f}",
                    f"{s['ttft_p50_ms']:.2f}",
                    f"{s['full_p50_ms']:.2f}",
                    f"{s['full_p99_ms']:.2f}",
                ]
            )
    headers = ["turn", "system", "events", "TTFE p50 ms", "TTFE p99 ms", "first token p50 ms", "full p50 ms"]
    text = [
        "# cogmesh vs the LangGraph peer and the in-process loop",
        "",
        "Same run, same timing code, same two turns (model streams 100 tokens with no latency; one calculator "
        "call then the answer), each in a new session/thread. **cogmesh**: through the gateway and all six "
        "services as processes (in-memory stores). **in-process**: cogmesh's agent loop called directly, no "
        f"network. **langgraph**: {peer_note}. **langgraph in-process**: the same graph called with "
        "`graph.astream` in the peer's venv. TTFE = time to the first streamed event of any kind; first token "
        "= to the first event carrying model text.",
        "",
        table([*headers, "full p99 ms"], rows),
        "",
    ]
    ratio_rows = []
    for workload, systems in data.items():
        ours = systems["cogmesh"]
        for other in [n for n in systems if n != "cogmesh"]:
            s = systems[other]
            ratio_rows.append(
                [
                    LABELS[workload],
                    f"cogmesh / {other}",
                    f"{ours['ttfe_p50_ms'] / s['ttfe_p50_ms']:.3g}x",
                    f"{ours['ttfe_p99_ms'] / s['ttfe_p99_ms']:.3g}x",
                    f"{ours['full_p50_ms'] / s['full_p50_ms']:.3g}x",
                    f"{ours['full_p99_ms'] / s['full_p99_ms']:.3g}x",
                ]
            )
    text += [
        "## Ratios (below 1: cogmesh is faster)",
        "",
        table(["turn", "ratio", "TTFE p50", "TTFE p99", "full p50", "full p99"], ratio_rows),
        "",
    ]
    tokens = data["tokens"]["cogmesh"]
    p50_ok = "met" if tokens["ttfe_p50_ms"] < 3 else "NOT met"
    p99_ok = "met" if tokens["ttfe_p99_ms"] < 10 else "NOT met"
    text += [
        f"Gateway targets for time to first event (p50 < 3 ms, p99 < 10 ms), 100-token turn through the suite: "
        f"p50 {tokens['ttfe_p50_ms']:.2f} ms ({p50_ok}), p99 {tokens['ttfe_p99_ms']:.2f} ms ({p99_ok}).",
        "",
        f"Both models stream the same {REPLY_TOKENS} tokens one event per token (cogmesh's built-in model with "
        f"COGMESH_LOCAL_REPLY_TOKENS={REPLY_TOKENS}); the `events` column counts what each side delivered, "
        "status, usage and final events included.",
        "",
        "`langgraph dev`'s in-memory queue polls for new runs every 0.5 s (langgraph_runtime_inmem "
        "`Runs.next`), so its first event waits for the next poll: its latency is that queue's, not the graph's "
        "(the in-process row is the graph's).",
        "",
    ]
    return "\n".join(text)


async def run(turns: int, rounds: int, with_peer: bool, warmup: int = WARMUP) -> str:
    async with suite(**SUITE) as (settings, _), grpc.aio.insecure_channel(settings.gateway_addr) as channel:
        systems: dict[str, Turn] = {
            "cogmesh": cogmesh_turn(gateway_pb2_grpc.GatewayServiceStub(channel)),  # type: ignore[no-untyped-call]
            "in-process": in_process_turn(),
        }
        if not with_peer:
            timings = await measure(systems, turns, rounds, warmup)
            note = "not run (--no-peer)"
        else:
            ensure_venv()
            async with (
                running_peer(RESULTS.parent / "out" / "peer-server.log") as url,
                httpx.AsyncClient(base_url=url, timeout=30.0) as client,
            ):
                systems["langgraph"] = peer_turn(client)
                timings = await measure(systems, turns, rounds, warmup)
            for workload, rows in (await peer_in_process(turns)).items():
                timings[workload]["langgraph in-process"] = rows
            note = "`langgraph dev` (in-memory mode, one process) with langchain-core's GenericFakeChatModel"
    data = {w: {s: summary(t) for s, t in by_system.items()} for w, by_system in timings.items()}
    write_data("peer", {"systems": data, "time": time.time()})
    return report(data, note)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=100, help="timed turns per system and workload")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds the turns are split into")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="untimed turns per system and workload first")
    parser.add_argument("--no-peer", action="store_true", help="skip the LangGraph peer (no venv needed)")
    args = parser.parse_args()
    text = asyncio.run(run(args.turns, args.rounds, not args.no_peer, args.warmup))
    print(text)
    print(f"written to {write_result('peer', text)}")


if __name__ == "__main__":
    main()
