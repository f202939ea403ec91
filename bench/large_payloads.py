"""What a turn of megabytes costs (issue 31): a 5 MB tool result and a 5 MB streamed reply vs a small turn.

One run, one machine. The suite runs as `cogmesh up` runs it (a process per service, two
runtime workers), on the memory store and on Redis (a private redis-server). A helper
process (this module with --serve) is the tool server and the model, so its CPU and memory
are nobody's turn: a gRPC ToolService whose `blob` returns as many bytes as asked
(numbered lines), and bench.model_server's OpenAI-compatible server answering with as many
bytes as the message asks for, in 2,036-byte deltas (a chatty model's chunks, as the
issue's tests stream).

- tool turn: the built-in model calls `blob` ('@blob {"size": N}'); a result over the
  agent's limit (25,000 tokens) is archived and the model gets the marker with its head;
- reply turn: the `talker` agent (gpt-4o at the helper) streams N bytes; its final event
  leaves the text out (the deltas and the stored message have it).

The baseline is the same turn small (a 1,000-byte result; one 2,036-byte delta), measured in
the same suite just before the large ones. Each (store, kind) gets a fresh suite: two
warm-up turns, the small turns, then the large ones. Per turn: wall time at the client
(SendMessage to the final event, the client on default gRPC options as any caller) and the
peak RSS of the suite's processes (VmHWM of every service process, and of redis-server on
Redis, reset through /proc/<pid>/clear_refs before each turn; the helper and the client are
not counted), with the largest growth over the small turn by service.

    python -m bench.large_payloads [--size 5000000] [--turns 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from bench import model_server
from bench.harness import suite, table, write_data, write_result
from bench.hotpath import by_service, load_average, redis_pid, service_pids, stop_process
from bench.sessions import redis_for
from cogmesh.common.v1 import messages_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.tools.v1 import tools_pb2, tools_pb2_grpc
from services.lib.agents import DEFAULT_AGENTS_DIR

NAME = "large_payloads"
DELTA = "abcdefghijklmnopqrstuvwxyz0123456789 " * 55 + "\n"  # 2,036 bytes
SMALL_RESULT = 1000
READY_TIMEOUT_S = 120.0
TURN_TIMEOUT_S = 120.0
AGENTS = {
    "blob": "name: blob\nprompts_dir: default\nmodel: local\ntools: [blob]\ndefault_role: assistant\n",
    "talker": "name: talker\nsystem_prompt: You talk.\nmodel: gpt-4o\n",
}
BLOB_SCHEMA = {"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]}
MB = 1_000_000
ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- the helper process


def blob(size: int) -> str:
    """`size` bytes of numbered 15-byte lines, then padding (as tests/fakes/mcp_server.py's blob)."""
    lines = "".join(f"line {n:09d}\n" for n in range(size // 15))
    return lines + "." * (size - len(lines))


class Blobs(tools_pb2_grpc.ToolServiceServicer):
    def __init__(self) -> None:
        self.made: dict[int, str] = {}

    async def ListTools(self, request: Any, context: Any) -> tools_pb2.ListToolsResponse:
        spec = messages_pb2.ToolSpec(name="blob", description="a text of `size` bytes")
        spec.parameters.update(BLOB_SCHEMA)  # type: ignore[arg-type]
        return tools_pb2.ListToolsResponse(tools=[spec])

    async def CallTool(self, request: tools_pb2.CallToolRequest, context: Any) -> tools_pb2.CallToolResponse:
        size = int(request.arguments.fields["size"].number_value)
        if size not in self.made:
            self.made[size] = blob(size)
        return tools_pb2.CallToolResponse(content=self.made[size])


class Replies(model_server.Server):
    """bench.model_server's server, whose reply is the number of bytes the last user message names."""

    def beats(self, request: dict[str, Any]) -> list[bytes]:
        found = re.search(r"\d+", str((request.get("messages") or [{}])[-1].get("content") or ""))
        count = max(1, int(found.group()) // len(DELTA)) if found else 1
        key = f"{count}/{bool((request.get('stream_options') or {}).get('include_usage'))}"
        if key not in self.rendered:
            base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000}
            base["model"] = str(request.get("model", ""))

            def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
                return model_server.sse(base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

            body = [chunk({"role": "assistant", "content": ""})] + [chunk({"content": DELTA})] * count
            body.append(chunk({}, "stop"))
            if (request.get("stream_options") or {}).get("include_usage"):
                usage = {"prompt_tokens": 20, "completion_tokens": count * 500, "total_tokens": 20 + count * 500}
                body.append(model_server.sse(base | {"choices": [], "usage": usage}))
            body.append(model_server.sse("[DONE]"))
            self.rendered[key] = [model_server.chunked(b"".join(body)) + model_server.END_OF_BODY]
        return self.rendered[key]


async def serve() -> None:
    """The helper: prints {"model": port, "tools": port}, serves until its stdin ends."""
    server = Replies()
    listener = await server.loop.create_server(lambda: model_server.Connection(server), "127.0.0.1", 0)
    tools = grpc.aio.server(options=[("grpc.max_send_message_length", -1)])
    tools_pb2_grpc.add_ToolServiceServicer_to_server(Blobs(), tools)  # type: ignore[no-untyped-call]
    tools_port = tools.add_insecure_port("127.0.0.1:0")
    await tools.start()
    print(json.dumps({"model": listener.sockets[0].getsockname()[1], "tools": tools_port}), flush=True)
    closed = asyncio.Event()
    await server.loop.connect_read_pipe(lambda: model_server._StdinWatch(closed), sys.stdin)
    await closed.wait()
    await tools.stop(0)
    listener.close()


@contextlib.asynccontextmanager
async def helper() -> AsyncIterator[dict[str, int]]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", f"bench.{NAME}", "--serve", cwd=ROOT, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        if not line:
            raise RuntimeError("the helper (model and tool server) exited before it listened")
        yield dict(json.loads(line))
    finally:
        await stop_process(process)


# --------------------------------------------------------------------------- measuring


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def reset_peaks(pids: dict[str, int]) -> None:
    for pid in pids.values():
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)


def peaks_mb(pids: dict[str, int]) -> dict[str, float]:
    """Peak RSS since the last reset, by service (the runtime's workers together)."""
    return by_service({name: status_kb(pid, "VmHWM") * 1024 / MB for name, pid in pids.items()})


@dataclass
class Turn:
    seconds: float
    peak_mb: dict[str, float]

    @property
    def total_mb(self) -> float:
        return sum(self.peak_mb.values())


def checked(kind: str, size: int, events: list[Any]) -> None:
    """The turn did what it should (a bench of a failing turn measures nothing)."""
    end = events[-1] if events else None
    if end is None or end.WhichOneof("payload") != "final":
        raise RuntimeError(f"the {kind} turn of {size:,} bytes ended with {end}")
    if kind == "tool":
        tool = [m.content for m in end.final.new_messages if m.role == messages_pb2.ROLE_TOOL]
        archived = size > 25_000 * 4  # over the default limit: 25,000 tokens at 4 characters
        marker = f"(the blob result has {size:,} characters"
        whole = len(tool) == 1 and (marker in tool[0] if archived else tool[0] == blob(size))
        if not whole:
            raise RuntimeError(f"the tool message of a {size:,}-byte result is {tool[0][:100] if tool else None!r}")
    else:
        text = sum(len(e.assistant_delta.text) for e in events if e.WhichOneof("payload") == "assistant_delta")
        if text != max(1, size // len(DELTA)) * len(DELTA):
            raise RuntimeError(f"the reply's deltas hold {text:,} bytes for {size:,} asked")


async def one_turn(stub: Any, kind: str, size: int, pids: dict[str, int]) -> Turn:
    agent = "blob" if kind == "tool" else "talker"
    session = (await stub.CreateSession(gateway_pb2.CreateSessionRequest(agent=agent), timeout=30)).session.session_id
    content = f'@blob {{"size": {size}}}' if kind == "tool" else f"Tell me {size} bytes."
    reset_peaks(pids)
    started = time.perf_counter()
    events: list[Any] = []
    async for response in stub.SendMessage(
        gateway_pb2.SendMessageRequest(session_id=session, content=content), timeout=TURN_TIMEOUT_S
    ):
        events.extend(response.events)
    seconds = time.perf_counter() - started
    peaks = peaks_mb(pids)
    checked(kind, size, events)
    return Turn(seconds, peaks)


def configuration(work: Path, ports: dict[str, int]) -> dict[str, object]:
    agents = work / "agents"
    if not agents.exists():
        shutil.copytree(DEFAULT_AGENTS_DIR, agents)
        for name, text in AGENTS.items():
            (agents / f"{name}.yaml").write_text(text)
    providers = work / "providers.yaml"
    providers.write_text(
        f"providers:\n  openai: {{base_url: 'http://127.0.0.1:{ports['model']}/v1', api_key_required: false}}\n"
    )
    tools = work / "tools.yaml"
    tools.write_text(
        f"servers:\n  bench:\n    transport: grpc\n    address: 127.0.0.1:{ports['tools']}\n    prefix: ''\n"
    )
    return {"agents_dir": agents, "providers_file": providers, "tool_servers_file": tools}


async def measure(store: str, kind: str, size: int, turns: int, work: Path, ports: dict[str, int]) -> dict[str, Any]:
    """A fresh suite: warm-up, the small turns, then the large ones."""
    small = SMALL_RESULT if kind == "tool" else len(DELTA)
    with redis_for(store) as url:
        overrides = configuration(work, ports) | ({"redis_url": url} if url else {})
        async with suite(READY_TIMEOUT_S, **overrides) as (settings, supervisor):
            pids = service_pids(supervisor) | ({"redis": redis_pid(url)} if url else {})
            async with grpc.aio.insecure_channel(settings.gateway_addr) as channel:
                stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
                for _ in range(2):
                    await one_turn(stub, kind, small, pids)
                smalls = [await one_turn(stub, kind, small, pids) for _ in range(turns)]
                larges = [await one_turn(stub, kind, size, pids) for _ in range(turns)]
    return {"store": store, "kind": kind, "size": size, "small_size": small, "small": smalls, "large": larges}


def median_peaks(turns: list[Turn]) -> dict[str, float]:
    return {name: statistics.median(t.peak_mb[name] for t in turns) for name in turns[0].peak_mb}


def row(result: dict[str, Any]) -> list[object]:
    smalls, larges = result["small"], result["large"]
    wall_small = statistics.median(t.seconds for t in smalls)
    wall_large = statistics.median(t.seconds for t in larges)
    spread = f"{min(t.seconds for t in larges):.3f}–{max(t.seconds for t in larges):.3f}"
    rss_small = statistics.median(t.total_mb for t in smalls)
    rss_large = statistics.median(t.total_mb for t in larges)
    by_small, by_large = median_peaks(smalls), median_peaks(larges)
    grown = sorted(by_large, key=lambda name: by_large[name] - by_small[name], reverse=True)[:2]
    label = "5 MB tool result" if result["kind"] == "tool" else "5 MB streamed reply"
    if result["size"] != 5 * MB:
        label = label.replace("5 MB", f"{result['size'] / MB:g} MB")
    return [
        result["store"],
        label,
        f"{wall_small:.3f}",
        f"{wall_large:.3f} ({spread})",
        f"{wall_large / wall_small:.1f}",
        f"{rss_small:,.0f}",
        f"{rss_large:,.0f}",
        f"{rss_large / rss_small:.2f}",
        ", ".join(f"{name} +{by_large[name] - by_small[name]:.0f}" for name in grown),
    ]


def report(results: list[dict[str, Any]], turns: int, load: tuple[str, str]) -> str:
    headers = [
        "store",
        "turn",
        "small turn s",
        "large turn s (min–max)",
        "time × small",
        "suite peak RSS, small (MB)",
        "suite peak RSS, large (MB)",
        "RSS × small",
        "most grown (MB)",
    ]
    return (
        "# Large payloads (issue 31)\n\n"
        f"`python -m bench.large_payloads` (`--turns {turns}`): the suite as processes (`cogmesh up` in miniature, "
        "two runtime workers) on the memory store and on Redis, a fresh suite for each row. Tool turn: the built-in "
        "model calls a gRPC tool returning the size (archived, the model gets the marker); reply turn: an "
        "OpenAI-compatible server streams the size in 2,036-byte deltas. Small turn: the same turn with a "
        f"{SMALL_RESULT:,}-byte result or one delta, in the same suite just before. Medians of {turns} turns each; "
        "time at the client (SendMessage to final); peak RSS is the sum of VmHWM over the suite's processes "
        "(redis-server's too on Redis; not the client's nor the model and tool server's), reset before each turn; "
        "'most grown' is the services whose peak grew most over the small turn's. "
        f"Load average {load[0]} at the start, {load[1]} at the end, on {platform.machine()} with 2 shared cores.\n\n"
        + table(headers, [row(result) for result in results])
        + "\n"
    )


async def run(size: int, turns: int) -> None:
    load_before = load_average()
    results = []
    with tempfile.TemporaryDirectory(prefix="cogmesh-bench-large-") as directory:
        async with helper() as ports:
            for store in ("memory", "redis"):
                for kind in ("tool", "reply"):
                    print(f"{store} {kind} ...", flush=True)
                    results.append(await measure(store, kind, size, turns, Path(directory), ports))
    text = report(results, turns, (load_before, load_average()))
    print(text)
    write_result(NAME, text)
    data = [
        {k: v for k, v in r.items() if k not in ("small", "large")}
        | {part: [{"seconds": t.seconds, "peak_mb": t.peak_mb} for t in r[part]] for part in ("small", "large")}
        for r in results
    ]
    write_data(NAME, {"size": size, "turns": turns, "results": data})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=5 * MB, help="bytes of the large tool result and reply")
    parser.add_argument("--turns", type=int, default=5, help="turns measured of each size, per row")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the helper process
    args = parser.parse_args()
    asyncio.run(serve() if args.serve else run(args.size, args.turns))


if __name__ == "__main__":
    main()
