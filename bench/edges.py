"""What each edge costs over the gateway's own SendMessage: the same 100-token turn through every protocol.

The suite runs as processes, as `cogmesh up` runs them, with the browser edge in front of the
gateway (gateway/web: Connect/gRPC-Web, the OpenAI-compatible API, AG-UI, MCP) and the built-in
local model answering every turn with 100 tokens, one delta each, without delay. In the same
run, turn after turn, the same message goes through:

- **grpc**: the gateway's SendMessage over gRPC, a raw grpc.aio stub (the baseline);
- **connect**: SendMessage through the edge over Connect (connectrpc's generated client, binary);
- **chat-sdk** / **chat-httpx**: POST /v1/chat/completions, stream=true, read by the real `openai`
  SDK and by bare httpx (SSE lines, json.loads), so the SDK's own parsing shows apart;
- **responses-sdk** / **responses-httpx**: POST /v1/responses, stream=true, the same two ways;
- **agui**: POST /agui/default, AG-UI events over SSE, bare httpx;
- **mcp**: MCP tools/call of the `default` tool with a progress token, the real `mcp` client
  (ClientSession over streamable HTTP, initialized once).

Every turn runs in a session of its own, created over gRPC before the measured window and named
by each protocol's own reference (session_id, X-Cogmesh-Session, conversation, threadId, the MCP
tool's session_id), so no turn pays for a CreateSession and no session's history grows. Every
path's client is a process of its own (`python -m bench.edges --client CONFIG`), so its CPU can
be read from /proc alone. Turns are taken in interleaved rounds (each path a share of its turns
per round), so the machine's load drifts over every path alike. Per path: time to first token
(first text of the reply) and full turn p50/p99, errors, CPU per turn of the suite's processes
(every service and the edge: utime + stime over the measured turns, divided by the turns) and of
the client's process; ratios to the grpc path of the same run. Every turn must answer exactly
"tok0 tok1 ... tok99". Writes bench/results/edges.md and edges.json.

    python -m bench.edges [--turns 200] [--warmup 20] [--rounds 4] [--paths grpc,connect,...]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bench.harness import (
    RESULTS,
    Timing,
    exported_settings,
    free_ports,
    median,
    percentile,
    suite_addresses,
    table,
    time_stream,
    write_data,
    write_result,
)
from bench.hotpath import Driver, by_service, cpu_seconds, load_average, service_pids, stop_process
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.suite.settings import SuiteSettings
from services.suite.supervisor import Supervisor

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "bench" / "out" / "edges"
TOKENS = 100
TEXT = "Tell me something."
EXPECT = " ".join(f"tok{i}" for i in range(TOKENS))  # the local model's reply with local_reply_tokens
AGENT = "default"  # a shipped agent on the local model, exposed over MCP
BASELINE = "grpc"
TURN_TIMEOUT_S = 120.0
COMMAND_TIMEOUT_S = 900.0  # one measurement, however large: a hung client fails the run instead of hanging it
READY_TIMEOUT_S = 120.0  # a service's start on a busy shared machine can take a while
# The built-in model with 100-token replies and no delay; the per-tenant rate limits raised
# (every turn is several gateway calls), everything else as `cogmesh up` has it.
SUITE: dict[str, object] = {
    "local_reply_tokens": TOKENS,
    "local_delay_ms": 0,
    "tenant_rate_per_s": 1e6,
    "tenant_burst": 1_000_000,
    "tenant_max_streams": 100_000,
}


@dataclass(frozen=True)
class Route:
    name: str
    label: str
    calls: str  # the gateway calls one turn makes on this path


ROUTES = [
    Route(BASELINE, "gateway SendMessage, gRPC (raw grpc.aio stub)", "SendMessage"),
    Route("connect", "SendMessage through the edge, Connect (connectrpc client, binary)", "SendMessage"),
    Route("chat-sdk", "Chat Completions stream, openai SDK", "GetSession, SendMessage"),
    Route("chat-httpx", "Chat Completions stream, bare httpx SSE", "GetSession, SendMessage"),
    Route("responses-sdk", "Responses stream, openai SDK", "GetSession, SendMessage"),
    Route("responses-httpx", "Responses stream, bare httpx SSE", "GetSession, SendMessage"),
    Route("agui", "AG-UI run, bare httpx SSE", "GetSession, SendMessage"),
    Route("mcp", "MCP tools/call with progress, mcp ClientSession", "ListAgents, GetSession, SendMessage"),
]
ROUTE = {route.name: route for route in ROUTES}


# --------------------------------------------------------------------------- reading the streams


async def sse(lines: AsyncIterable[str]) -> AsyncIterator[tuple[str, str]]:
    """Server-sent events as (event name, data) from a stream's lines; comments and ids skipped."""
    name, data = "", list[str]()
    async for line in lines:
        if not line:
            if data:
                yield name or "message", "\n".join(data)
            name, data = "", []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif line.startswith("event:"):
            name = line[6:].strip()
    if data:
        yield name or "message", "\n".join(data)


def chat_text(chunk: dict[str, Any]) -> str:
    """The text a chat.completion.chunk adds to the reply."""
    choices = chunk.get("choices") or [{}]
    return str((choices[0].get("delta") or {}).get("content") or "")


def responses_text(event: dict[str, Any]) -> str:
    return str(event.get("delta") or "") if event.get("type") == "response.output_text.delta" else ""


def agui_text(event: dict[str, Any]) -> str:
    return str(event.get("delta") or "") if event.get("type") == "TEXT_MESSAGE_CONTENT" else ""


# --------------------------------------------------------------------------- the clients (each its own process)


async def time_turn(responses: AsyncIterable[Any]) -> tuple[Timing, str]:
    """Time a SendMessage stream (gRPC or Connect) and join its reply's deltas."""
    deltas: list[str] = []

    async def events() -> AsyncIterator[Any]:
        async for response in responses:
            for event in response.events:
                kind = event.WhichOneof("payload")
                if kind == "error":
                    raise RuntimeError(f"error event: {event.error.message}")
                if kind == "assistant_delta":
                    deltas.append(event.assistant_delta.text)
                yield event

    timing = await time_stream(events, lambda event: event.WhichOneof("payload") == "assistant_delta")
    return timing, "".join(deltas)


class Grpc:
    """The baseline: SendMessage on the gateway's gRPC port, as bench.hotpath's cogmesh client sends it."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.channel = grpc.aio.insecure_channel(config["gateway"])
        self.stub = gateway_pb2_grpc.GatewayServiceStub(self.channel)  # type: ignore[no-untyped-call]

    async def turn(self, session_id: str, text: str) -> tuple[Timing, str]:
        request = gateway_pb2.SendMessageRequest(session_id=session_id, content=text)
        return await time_turn(self.stub.SendMessage(request, timeout=TURN_TIMEOUT_S))

    async def close(self) -> None:
        await self.channel.close()


class Connect:
    """The same call through the edge: connectrpc's generated client, Connect protocol, binary protobuf."""

    def __init__(self, config: dict[str, Any]) -> None:
        from cogmesh.gateway.v1.gateway_connect import GatewayServiceClient

        self.client = GatewayServiceClient(config["edge"], timeout_ms=int(TURN_TIMEOUT_S * 1000))

    async def turn(self, session_id: str, text: str) -> tuple[Timing, str]:
        return await time_turn(
            self.client.send_message(gateway_pb2.SendMessageRequest(session_id=session_id, content=text))
        )

    async def close(self) -> None:
        await self.client.close()


class OpenAISdk:
    """The real `openai` SDK on the edge's /v1: Chat Completions or Responses, streamed."""

    def __init__(self, config: dict[str, Any]) -> None:
        import openai

        self.client = openai.AsyncOpenAI(
            base_url=f"{config['edge']}/v1", api_key="dev", max_retries=0, timeout=TURN_TIMEOUT_S
        )
        self.responses = config["path"] == "responses-sdk"

    async def turn(self, session_id: str, text: str) -> tuple[Timing, str]:
        answer: list[str] = []

        async def chat() -> AsyncIterator[Any]:
            stream = await self.client.chat.completions.create(
                model=AGENT,
                messages=[{"role": "user", "content": text}],
                stream=True,
                extra_headers={"X-Cogmesh-Session": session_id},
            )
            async with stream:
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        answer.append(chunk.choices[0].delta.content)
                    yield chunk

        async def responses() -> AsyncIterator[Any]:
            stream = await self.client.responses.create(model=AGENT, input=text, conversation=session_id, stream=True)
            async with stream:
                async for event in stream:
                    if event.type == "response.output_text.delta":
                        answer.append(event.delta)
                    elif event.type in ("error", "response.failed"):
                        raise RuntimeError(f"{event.type}: {event}")
                    yield event

        if self.responses:
            timing = await time_stream(responses, lambda event: event.type == "response.output_text.delta")
        else:
            timing = await time_stream(chat, lambda chunk: bool(chunk.choices and chunk.choices[0].delta.content))
        return timing, "".join(answer)

    async def close(self) -> None:
        await self.client.close()


class HttpxSse:
    """Bare httpx on an SSE endpoint of the edge: the wire's cost without a protocol SDK (json.loads per event)."""

    def __init__(self, config: dict[str, Any]) -> None:
        import httpx

        self.http = httpx.AsyncClient(base_url=config["edge"], timeout=TURN_TIMEOUT_S)
        self.path = config["path"]

    def request(self, session_id: str, text: str) -> tuple[str, dict[str, Any], dict[str, str], Callable[..., str]]:
        """(URL path, body, headers, the reader of one event's text) for this path's turn."""
        user = {"role": "user", "content": text}
        if self.path == "chat-httpx":
            body = {"model": AGENT, "messages": [user], "stream": True}
            return "/v1/chat/completions", body, {"x-cogmesh-session": session_id}, chat_text
        if self.path == "responses-httpx":
            return (
                "/v1/responses",
                {"model": AGENT, "input": text, "conversation": session_id, "stream": True},
                {},
                (responses_text),
            )
        body = {"threadId": session_id, "runId": "bench", "messages": [{"id": "m1", **user}]}
        return f"/agui/{AGENT}", body, {}, agui_text

    async def turn(self, session_id: str, text: str) -> tuple[Timing, str]:
        url, body, headers, text_of = self.request(session_id, text)
        answer: list[str] = []

        async def events() -> AsyncIterator[str]:
            async with self.http.stream("POST", url, json=body, headers=headers) as response:
                if response.status_code != 200:
                    raise RuntimeError(f"HTTP {response.status_code}: {(await response.aread())[:300]!r}")
                async for name, data in sse(response.aiter_lines()):
                    if data == "[DONE]":
                        return
                    payload = json.loads(data)
                    kind = str(payload.get("type", name))
                    if kind in ("error", "response.failed", "RUN_ERROR"):
                        raise RuntimeError(f"{kind}: {data[:300]}")
                    piece = text_of(payload)
                    answer.append(piece)
                    yield piece

        timing = await time_stream(events, bool)
        return timing, "".join(answer)

    async def close(self) -> None:
        await self.http.aclose()


class Mcp:
    """The real `mcp` client: one ClientSession (initialize once), a tools/call per turn with a progress token."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.url = f"{config['edge']}/mcp"
        self.stack = contextlib.AsyncExitStack()
        self.session: Any = None

    async def open(self) -> None:
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        http = create_mcp_http_client()
        read, write = await self.stack.enter_async_context(streamable_http_client(self.url, http_client=http))
        self.session = await self.stack.enter_async_context(ClientSession(read, write))
        await self.session.initialize()

    async def turn(self, session_id: str, text: str) -> tuple[Timing, str]:
        started = time.perf_counter()
        first = 0.0
        notices = 0

        async def progress(value: float, total: float | None, message: str | None) -> None:
            nonlocal first, notices
            first = first or time.perf_counter()
            notices += 1

        result = await self.session.call_tool(
            AGENT, {"message": text, "session_id": session_id}, progress_callback=progress
        )
        end = time.perf_counter()
        if result.is_error:
            raise RuntimeError(f"isError: {result.content[0].text if result.content else result}")
        first_token = (first or end) - started
        return Timing(first_token, first_token, end - started, notices + 1), str(result.content[0].text)

    async def close(self) -> None:
        await self.stack.aclose()


CLIENTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "grpc": Grpc,
    "connect": Connect,
    "chat-sdk": OpenAISdk,
    "responses-sdk": OpenAISdk,
    "chat-httpx": HttpxSse,
    "responses-httpx": HttpxSse,
    "agui": HttpxSse,
    "mcp": Mcp,
}


async def run_turns(client: Any, command: dict[str, Any]) -> dict[str, Any]:
    """One measurement in the client's process: a turn per session, one after the other."""
    timings: list[Timing] = []
    errors: collections.Counter[str] = collections.Counter()
    samples: dict[str, str] = {}
    for session_id in command["sessions"]:
        try:
            timing, answer = await asyncio.wait_for(client.turn(session_id, command["text"]), TURN_TIMEOUT_S)
        except TimeoutError:
            errors["TimeoutError"] += 1
            samples.setdefault("TimeoutError", f"the turn did not end within {TURN_TIMEOUT_S:.0f} s")
            continue
        except Exception as exc:  # noqa: BLE001 - every failure is counted by kind, with one message each
            kind = type(exc).__name__
            errors[kind] += 1
            samples.setdefault(kind, str(exc)[:300])
            continue
        if answer != command["expect"]:
            errors["wrong answer"] += 1
            samples.setdefault("wrong answer", f"{answer[:120]!r} (expected {command['expect'][:120]!r})")
            continue
        timings.append(timing)
    return {
        "timings": [[t.first_event, t.first_token, t.full, t.events] for t in timings],
        "errors": dict(errors),
        "samples": samples,
    }


def emit(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def client_main(config: dict[str, Any]) -> None:
    """A client process: {"ready": pid}, then one JSON command a line on stdin, one result a line; EOF ends it."""
    client = CLIENTS[config["path"]](config)
    if isinstance(client, Mcp):
        await client.open()
    loop = asyncio.get_running_loop()
    lines = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(lines), sys.stdin)
    emit({"ready": os.getpid()})
    try:
        while line := await lines.readline():
            emit(await run_turns(client, json.loads(line)))
    finally:
        await client.close()


# --------------------------------------------------------------------------- the bench's side


@contextlib.asynccontextmanager
async def suite_with_edge(**overrides: object) -> AsyncIterator[tuple[SuiteSettings, Supervisor]]:
    """bench.harness.suite with the browser edge started after the gateway, as `cogmesh up` starts it."""
    addresses = suite_addresses(int(str(overrides.get("runtime_workers", 0))))
    taken = {a for value in addresses.values() for a in value.split(",")}
    web = f"127.0.0.1:{free_ports(1)[0]}"
    while web in taken:  # the services' ports were free a moment ago: the kernel may hand one out again
        web = f"127.0.0.1:{free_ports(1)[0]}"
    overrides = {**overrides, "web_addr": web}
    settings = SuiteSettings(**addresses, **overrides)  # type: ignore[arg-type]
    log_dir = Path(tempfile.mkdtemp(prefix="cogmesh-bench-edges-"))
    supervisor = Supervisor(settings, log_dir, lambda _: None, ready_timeout_s=READY_TIMEOUT_S, edges=["web"])
    with exported_settings(overrides):
        await supervisor.start()
        try:
            yield settings, supervisor
        finally:
            await supervisor.stop(0.5)


@contextlib.asynccontextmanager
async def client_process(path: str, config: dict[str, Any]) -> AsyncIterator[Driver]:
    LOGS.mkdir(parents=True, exist_ok=True)
    with (LOGS / f"{path}.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.edges",
            "--client",
            json.dumps({**config, "path": path}),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            limit=1 << 24,  # a measurement's timings come back on one line
        )
    try:
        one = Driver(path, process, process.pid)
        try:
            one.pid = int((await one.read(120))["ready"])
        except RuntimeError:
            raise RuntimeError(f"the {path} client exited; see {LOGS / (path + '.log')}") from None
        yield one
    finally:
        await stop_process(process)


@dataclass
class Part:
    """One measurement of one path: its turns' timings and the CPU every process spent on them."""

    turns: int
    timings: list[list[float]]
    errors: dict[str, int]
    samples: dict[str, str]
    cpu_s: dict[str, float]  # by process name (the client as "client"), seconds
    wall_s: float


@dataclass
class Row:
    path: str
    turns: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    samples: dict[str, str] = field(default_factory=dict)
    ms: dict[str, float] = field(default_factory=dict)  # ttfe/ttft/full p50/p99
    cpu_ms: dict[str, float] = field(default_factory=dict)  # per turn, by service ("client" the client's)
    wall_s: float = 0.0


def combine(path: str, parts: Iterable[Part]) -> Row:
    """A path's rounds as one row: timings pooled, CPU summed and divided by all its turns."""
    parts = list(parts)
    row = Row(path)
    timings: list[list[float]] = []
    cpu: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    for part in parts:
        row.turns += part.turns
        row.wall_s += part.wall_s
        timings += part.timings
        cpu.update(part.cpu_s)
        errors.update(part.errors)
        for kind, text in part.samples.items():
            row.samples.setdefault(kind, text)
    row.ok, row.errors = len(timings), dict(errors)
    for metric, index in {"ttfe": 0, "ttft": 1, "full": 2}.items():
        values = [t[index] * 1000 for t in timings]
        row.ms[f"{metric}_p50"], row.ms[f"{metric}_p99"] = median(values), percentile(values, 99)
    row.cpu_ms = (
        {name: seconds * 1000 / row.turns for name, seconds in by_service(dict(cpu)).items()} if row.turns else {}
    )
    return row


def suite_cpu(row: dict[str, Any]) -> float:
    """CPU ms per turn of every process of the suite (services and edge), the client's left out."""
    return sum(v for k, v in row["cpu_ms"].items() if k != "client") if row["cpu_ms"] else math.nan


def ratio(value: float, base: float) -> float:
    """value / base; NaN when the base measured nothing (a tiny run's CPU below one clock tick)."""
    return value / base if base and not math.isnan(base) and not math.isnan(value) else math.nan


def overheads(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each path against the baseline path of the same run: ratios and added milliseconds."""
    base = next((r for r in rows if r["path"] == BASELINE), None)
    if base is None:
        return {}
    out = {}
    for row in rows:
        figures = {
            "ttft_p50_x": ratio(row["ms"]["ttft_p50"], base["ms"]["ttft_p50"]),
            "ttft_p99_x": ratio(row["ms"]["ttft_p99"], base["ms"]["ttft_p99"]),
            "full_p50_x": ratio(row["ms"]["full_p50"], base["ms"]["full_p50"]),
            "ttft_p50_added_ms": row["ms"]["ttft_p50"] - base["ms"]["ttft_p50"],
            "full_p50_added_ms": row["ms"]["full_p50"] - base["ms"]["full_p50"],
            "suite_cpu_x": ratio(suite_cpu(row), suite_cpu(base)),
            "suite_cpu_added_ms": suite_cpu(row) - suite_cpu(base),
            "client_cpu_x": ratio(row["cpu_ms"].get("client", math.nan), base["cpu_ms"].get("client", math.nan)),
        }
        out[row["path"]] = figures
    return out


def cell(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def times(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}x"


def added(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:+.2f}"


def report(data: dict[str, Any]) -> str:
    rows: list[dict[str, Any]] = data["rows"]
    over = overheads(rows)
    latency, cpu, samples = [], [], []
    for row in rows:
        ms, vs, route = row["ms"], over.get(row["path"], {}), ROUTE[row["path"]]
        errors = ", ".join(f"{kind} x{n}" for kind, n in row["errors"].items()) or "0"
        samples += [f"- {row['path']}, {kind}: {text}" for kind, text in row["samples"].items()]
        head = f"{row['path']}: {route.label}"
        latency.append(
            [
                head,
                f"{row['ok']}/{row['turns']}",
                errors,
                f"{cell(ms['ttft_p50'])} / {cell(ms['ttft_p99'])}",
                f"{added(vs.get('ttft_p50_added_ms', math.nan))} ({times(vs.get('ttft_p50_x', math.nan))})",
                f"{cell(ms['full_p50'])} / {cell(ms['full_p99'])}",
                f"{added(vs.get('full_p50_added_ms', math.nan))} ({times(vs.get('full_p50_x', math.nan))})",
            ]
        )
        cpu_ms = row["cpu_ms"]
        named = ("gateway", "web", "runtime", "client")
        others = sum(v for k, v in cpu_ms.items() if k not in named)
        cpu.append(
            [
                row["path"],
                cell(suite_cpu(row)),
                f"{added(vs.get('suite_cpu_added_ms', math.nan))} ({times(vs.get('suite_cpu_x', math.nan))})",
                cell(cpu_ms.get("web", math.nan)),
                cell(cpu_ms.get("gateway", math.nan)),
                cell(cpu_ms.get("runtime", math.nan)),
                cell(others),
                cell(cpu_ms.get("client", math.nan)),
                times(vs.get("client_cpu_x", math.nan)),
                route.calls,
            ]
        )
    idle = ", ".join(f"{name} {value:.1f}" for name, value in data["idle_ms_per_s"].items())
    text = [
        "# Edges: each protocol's overhead over the gateway's own SendMessage (100-token turn)",
        "",
        "The suite as processes (as `cogmesh up` runs them: every service, the runtime as "
        f"{data['runtime_workers']} workers, and the browser edge `gateway.web` in front of the gateway), the "
        f"built-in local model answering each turn with {TOKENS} tokens, one delta each, no delay. The same message "
        "goes through each path one turn at a time; every turn runs in a session of its own, created before the "
        "measured window and named by the protocol's own reference (X-Cogmesh-Session, `conversation`, `threadId`, "
        "the MCP tool's `session_id`). Each path's client is a process of its own. "
        f"{data['turns']} measured turns per path after {data['warmup']} warm-up turns, taken in {data['rounds']} "
        "interleaved rounds. First token = the first text of the reply (gRPC/Connect: the first `assistant_delta`; "
        "Chat Completions: the first chunk with content; Responses: `response.output_text.delta`; AG-UI: "
        "`TEXT_MESSAGE_CONTENT`; MCP: the first progress notification); full = to the end of the stream (MCP: the "
        "call's result). Every turn must answer exactly the 100 tokens.",
        "",
        f"Load average (1/5/15 min) at the start: {data['load_start']}; at the end: {data['load_end']}. Machine: "
        f"{data['cores']} cores, shared with other jobs: read the differences and ratios, not the absolute figures.",
        "",
        "## Latency (ms) and errors",
        "",
        table(
            [
                "path",
                "turns ok",
                "errors",
                "first token p50 / p99",
                "first token p50 vs grpc",
                "full turn p50 / p99",
                "full turn p50 vs grpc",
            ],
            latency,
        ),
        "",
        "## CPU per turn (ms, from /proc)",
        "",
        "(utime + stime of each process over the measured turns) / turns. Suite = every service process and the "
        "edge (`web`); the client's own process apart. Others = sessions, context, policy, models, memory. With "
        f"no turn running the suite's processes burn (CPU ms a second): {idle}; a turn lasting 20-40 ms carries "
        "a share of that background on every path alike.",
        "",
        table(
            [
                "path",
                "suite",
                "suite vs grpc",
                "web (edge)",
                "gateway",
                "runtime",
                "others",
                "client",
                "client vs grpc",
                "gateway calls per turn",
            ],
            cpu,
        ),
        "",
    ]
    if samples:
        text += ["One message of each kind of error:", "", *samples, ""]
    return "\n".join(text)


async def measure(driver: Driver, stub: Any, pids: dict[str, int], turns: int) -> Part:
    """`turns` turns on one path: their sessions made before, and deleted after, the CPU window."""
    created = await asyncio.gather(
        *(stub.CreateSession(gateway_pb2.CreateSessionRequest(agent=AGENT)) for _ in range(turns))
    )
    sessions = [reply.session.session_id for reply in created]
    every = pids | {"client": driver.pid}
    before = {name: cpu_seconds(pid) for name, pid in every.items()}
    started = time.perf_counter()
    driver.write({"sessions": sessions, "text": TEXT, "expect": EXPECT})
    result = await driver.read(COMMAND_TIMEOUT_S)
    wall = time.perf_counter() - started
    spent = {name: cpu_seconds(pid) - before[name] for name, pid in every.items()}
    await asyncio.gather(
        *(stub.DeleteSession(gateway_pb2.DeleteSessionRequest(session_id=s)) for s in sessions),
        return_exceptions=True,
    )
    return Part(turns, result["timings"], result["errors"], result["samples"], spent, wall)


def shares(turns: int, rounds: int) -> list[int]:
    """`turns` split over `rounds` as evenly as can be (rounds with no turn left out)."""
    rounds = max(1, min(rounds, turns))
    return [turns // rounds + (1 if i < turns % rounds else 0) for i in range(rounds)]


async def idle_cpu(pids: dict[str, int], seconds: float) -> dict[str, float]:
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    await asyncio.sleep(seconds)
    return by_service({name: (cpu_seconds(pid) - before[name]) * 1000 / seconds for name, pid in pids.items()})


async def run(paths: list[str], turns: int, warmup: int, rounds: int, idle_s: float) -> dict[str, Any]:
    data: dict[str, Any] = {"load_start": load_average(), "cores": os.cpu_count()}
    parts: dict[str, list[Part]] = {path: [] for path in paths}
    async with contextlib.AsyncExitStack() as stack:
        settings, supervisor = await stack.enter_async_context(suite_with_edge(**SUITE))
        config = {"gateway": settings.gateway_addr, "edge": f"http://{settings.web_addr}"}
        drivers = {path: await stack.enter_async_context(client_process(path, config)) for path in paths}
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(settings.gateway_addr))
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        pids = service_pids(supervisor)
        data["runtime_workers"] = len(supervisor.of("runtime"))
        for path in paths:
            if warmup:
                warm = await measure(drivers[path], stub, pids, warmup)
                if warm.errors:
                    raise RuntimeError(f"{path}: the warm-up failed: {warm.errors} {warm.samples}")
        data["idle_ms_per_s"] = await idle_cpu(pids, idle_s)
        for index, share in enumerate(shares(turns, rounds)):
            order = paths[index % len(paths) :] + paths[: index % len(paths)]  # each round starts elsewhere
            print(f"  round {index + 1}: {share} turns per path", flush=True)
            for path in order:
                parts[path].append(await measure(drivers[path], stub, pids, share))
    data["load_end"] = load_average()
    data |= {"turns": turns, "warmup": warmup, "rounds": len(shares(turns, rounds)), "time": time.time()}
    data["rows"] = [asdict(combine(path, parts[path])) for path in paths]
    data["overheads"] = overheads(data["rows"])
    return data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200, help="measured turns per path")
    parser.add_argument("--warmup", type=int, default=20, help="untimed turns per path first")
    parser.add_argument("--rounds", type=int, default=4, help="interleaved rounds the turns are split over")
    parser.add_argument("--idle", type=float, default=3.0, help="seconds the suite's idle CPU is read over")
    parser.add_argument("--paths", default=",".join(ROUTE), help=f"some of {', '.join(ROUTE)} (grpc always runs)")
    parser.add_argument("--client", help=argparse.SUPPRESS)  # a client process: its JSON config
    args = parser.parse_args(argv)
    if args.client:
        asyncio.run(client_main(json.loads(args.client)))
        return
    paths = [p for p in args.paths.split(",") if p]
    if unknown := [p for p in paths if p not in ROUTE]:
        parser.error(f"--paths: unknown {', '.join(unknown)} (choose from {', '.join(ROUTE)})")
    paths = [BASELINE, *(p for p in ROUTE if p in paths and p != BASELINE)]
    if args.turns < 1:
        parser.error("--turns must be at least 1")
    data = asyncio.run(run(paths, args.turns, args.warmup, args.rounds, args.idle))
    write_data("edges", data)
    text = report(data)
    print(text)
    print(f"written to {write_result('edges', text)} (figures in {RESULTS / 'edges.json'})")


if __name__ == "__main__":
    main()
