"""The hot path: the same turns through cogmesh, LangGraph and the bare `openai` SDK, on one model server.

One local server speaks the OpenAI chat-completions wire format (bench/model_server.py:
SSE, one token per chunk, usage chunk, tool calls, a set pace) in a process of its own.
Side by side, in one run, against that server:

- **cogmesh**: a client of the gateway, every service its own process (as `cogmesh up`
  runs them), the agent's model an `openai` provider model whose base_url is the server;
  with in-memory stores, then with Redis (COGMESH_REDIS_URL, a private redis-server);
- **langgraph**: LangGraph in-process (model node + ToolNode) with ChatOpenAI on the server,
  in the peer's virtualenv (bench/peer);
- **sdk**: the bare `openai` SDK streaming the very request cogmesh's runtime sends
  (system prompt and tool schemas copied from it), the tool loop done by hand: the floor.

Each system's client runs in a process of its own (bench/hotpath_driver.py). Per turn kind
and concurrency: p50/p99 of time to first event, to first token (first assistant text) and
to the end of the turn, errors, and the CPU seconds of every process of the system (from
/proc, before and after the measured turns, divided by the turns; the model server's CPU
is nobody's). A new session per cogmesh turn, created before the measured window.
Writes bench/results/hotpath.md and hotpath.json.

    python -m bench.hotpath [--modes memory,redis] [--levels 1,10,100,200,1000] [--turns 200] [--no-peer]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from bench.harness import RESULTS, median, percentile, read_data, suite, table, write_data, write_result
from bench.model_server import Script
from bench.peer.server import VENV, ensure_venv, peer_env
from bench.sessions import redis_for
from services.lib.agents import DEFAULT_AGENTS_DIR
from services.suite.supervisor import Supervisor

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "bench" / "out" / "hotpath"
MODEL = "gpt-4o-mini"  # a catalogue model of the `openai` provider, so its pricing and capabilities apply
AGENT = "hotpath"
AGENT_YAML = f"""# bench.hotpath: the default agent (same prompts, calculator) on an `openai` provider model.
name: {AGENT}
description: The default agent on the benchmark's OpenAI-compatible server.
prompts_dir: default
model: {MODEL}
tools: [calculator]
default_role: assistant
mode: primary
"""
TOKENS_TEXT = "Tell me something."
TOOL_TEXT = "What is 17 * 23?"
# Every concurrent cogmesh session is a stream at the gateway: the defaults throttle a tenant.
SUITE: dict[str, object] = {"tenant_rate_per_s": 1e6, "tenant_burst": 1_000_000, "tenant_max_streams": 100_000}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
COMMAND_TIMEOUT_S = 900.0  # one measurement, however large: a hung driver fails the run instead of hanging it
SYSTEMS = ["sdk", "langgraph", "cogmesh", "cogmesh+redis"]
READY_TIMEOUT_S = 120.0  # a service's start on a busy shared machine can take a while


def reply_text(tokens: int) -> str:
    return " ".join(f"tok{i}" for i in range(tokens))


@dataclass(frozen=True)
class Workload:
    name: str
    label: str
    script: Script
    text: str
    expect: str


TOKENS = Workload("tokens", "100 tokens, zero-latency model", Script(tokens=100), TOKENS_TEXT, reply_text(100))
TOOL = Workload(
    "tool", "calculator call, then the answer (zero latency)", Script(tool=True), TOOL_TEXT, "17 * 23 = 391."
)
PACED = Workload(
    "paced",
    "paced: 200 ms to first token, 50 tokens 20 ms apart",
    Script(ttft_ms=200, tokens=50, gap_ms=20),
    TOKENS_TEXT,
    reply_text(50),
)
WORKLOADS = {w.name: w for w in (TOKENS, TOOL, PACED)}
IDEAL_PACED_MS = PACED.script.ttft_ms + (PACED.script.tokens - 1) * PACED.script.gap_ms


@dataclass(frozen=True)
class Case:
    workload: Workload
    concurrency: int
    turns: int


def cases(turns: int, paced_turns: int, levels: list[int], level_turns: int) -> list[Case]:
    """The measurements of one run: zero-latency turns one at a time, then paced ones at each level."""
    out = [Case(TOKENS, 1, turns), Case(TOOL, 1, max(1, turns // 2))]
    for level in levels:
        count = paced_turns if level == 1 else math.ceil(max(level, level_turns) / level) * level
        out.append(Case(PACED, level, count))
    return out


# --------------------------------------------------------------------------- processes


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """utime + stime of a process (all its threads), or of one of its threads, from /proc."""
    stat = Path(f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


async def stop_process(process: asyncio.subprocess.Process, grace_s: float = 10.0) -> None:
    """Close its stdin (our processes stop at EOF), then SIGTERM, then SIGKILL."""
    if process.stdin is not None and not process.stdin.is_closing():
        process.stdin.close()
    for signal_it in (None, process.terminate, process.kill):
        if process.returncode is not None:
            return
        if signal_it is not None:
            with contextlib.suppress(ProcessLookupError):
                signal_it()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), grace_s)


@dataclass
class ModelServer:
    url: str
    pid: int
    client: httpx.AsyncClient

    async def script(self, script: Script) -> None:
        (await self.client.post("/bench/script", json=asdict(script))).raise_for_status()

    async def stats(self) -> dict[str, Any]:
        reply = (await self.client.get("/bench/stats")).raise_for_status()
        return dict(reply.json())


@contextlib.asynccontextmanager
async def model_server() -> AsyncIterator[ModelServer]:
    LOGS.mkdir(parents=True, exist_ok=True)
    with (LOGS / "model-server.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.model_server",
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
        )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        if not line:
            raise RuntimeError(f"the model server exited; see {LOGS / 'model-server.log'}")
        url = f"http://127.0.0.1:{json.loads(line)['port']}"
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            yield ModelServer(url, process.pid, client)
    finally:
        await stop_process(process)


class Driver:
    """One system's client process (bench.hotpath_driver), spoken to a JSON line at a time."""

    def __init__(self, name: str, process: asyncio.subprocess.Process, pid: int) -> None:
        self.name, self.process, self.pid = name, process, pid

    async def read(self, timeout_s: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout_s)
        if not line:
            raise RuntimeError(f"the {self.name} driver exited; see {LOGS / (self.name + '.log')}")
        return dict(json.loads(line))

    def write(self, message: dict[str, Any] | str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write((message if isinstance(message, str) else json.dumps(message)).encode() + b"\n")


@contextlib.asynccontextmanager
async def driver(name: str, config: dict[str, Any]) -> AsyncIterator[Driver]:
    in_peer_venv = config["system"] == "langgraph"
    python = str(VENV / "bin" / "python") if in_peer_venv else sys.executable
    env = peer_env() | {"PYTHONPATH": str(ROOT)} if in_peer_venv else dict(os.environ)
    LOGS.mkdir(parents=True, exist_ok=True)
    with (LOGS / f"{name}.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            python,
            "-m",
            "bench.hotpath_driver",
            json.dumps(config),
            cwd=ROOT,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            limit=1 << 24,  # a measurement's timings come back on one line
        )
    try:
        one = Driver(name, process, process.pid)
        ready = await one.read(120)
        one.pid = int(ready["ready"])
        yield one
    finally:
        await stop_process(process)


# --------------------------------------------------------------------------- measuring


@dataclass
class Row:
    workload: str
    concurrency: int
    system: str
    turns: int
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    samples: dict[str, str] = field(default_factory=dict)
    ms: dict[str, float] = field(default_factory=dict)  # ttfe/ttft/full p50/p99
    cpu_ms: dict[str, float] = field(default_factory=dict)  # per turn, by process
    wall_s: float = 0.0
    model_server_cores: float = 0.0
    load: str = ""
    taken_over: int = 0  # turns another runtime worker finished while their first one still ran them

    @property
    def cpu_total_ms(self) -> float:
        return sum(self.cpu_ms.values())


@dataclass
class System:
    name: str
    driver: Driver
    pids: dict[str, int]  # process name -> pid: the client and, for cogmesh, every service (and Redis)


Hook = Callable[[], Awaitable[None]]


async def measure(
    system: System, case: Case, server: ModelServer, armed: Hook | None = None, done: Hook | None = None
) -> Row:
    """One measurement; `armed` runs once the turns' sessions exist, `done` after the CPU is read."""
    command = {
        "text": case.workload.text,
        "expect": case.workload.expect,
        "turns": case.turns,
        "concurrency": case.concurrency,
    }
    system.driver.write(command)
    if not (await system.driver.read(COMMAND_TIMEOUT_S)).get("armed"):
        raise RuntimeError(f"{system.name}: the driver did not arm")
    if armed is not None:
        await armed()
    pids = system.pids | {"model server": server.pid}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.perf_counter()
    system.driver.write("go")
    result = await system.driver.read(COMMAND_TIMEOUT_S)
    wall = time.perf_counter() - started
    spent = by_service({name: cpu_seconds(pid) - before[name] for name, pid in pids.items()})
    if done is not None:
        await done()
    server_cpu = spent.pop("model server")
    timings = result["timings"]
    columns = {"ttfe": 0, "ttft": 1, "full": 2}
    ms = {}
    for metric, index in columns.items():
        values = [t[index] * 1000 for t in timings]
        ms[f"{metric}_p50"], ms[f"{metric}_p99"] = median(values), percentile(values, 99)
    return Row(
        workload=case.workload.name,
        concurrency=case.concurrency,
        system=system.name,
        turns=case.turns,
        ok=len(timings),
        errors=result["errors"],
        samples=result["samples"],
        ms=ms,
        cpu_ms={name: seconds * 1000 / case.turns for name, seconds in spent.items()},
        wall_s=wall,
        model_server_cores=server_cpu / wall if wall else math.nan,
        load=load_average(),
        taken_over=int(result.get("taken_over", 0)),
    )


def write_agent(directory: Path, server_url: str) -> tuple[Path, Path]:
    """The shipped agents plus `hotpath`, and a providers file pointing `openai` at the model server."""
    agents = directory / "agents"
    shutil.copytree(DEFAULT_AGENTS_DIR, agents)
    (agents / f"{AGENT}.yaml").write_text(AGENT_YAML)
    providers = directory / "providers.yaml"
    providers.write_text(f"providers:\n  openai: {{base_url: '{server_url}/v1', api_key_required: false}}\n")
    return agents, providers


def redis_pid(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("server")["process_id"])
    finally:
        client.close()


def by_service(per_process: dict[str, float]) -> dict[str, float]:
    """Sums the processes of one service (runtime-1, runtime-2 -> runtime)."""
    totals: dict[str, float] = {}
    for name, value in per_process.items():
        service = re.sub(r"-\d+$", "", name)
        totals[service] = totals.get(service, 0.0) + value
    return totals


def service_pids(supervisor: Supervisor) -> dict[str, int]:
    return {name: child.process.pid for name, child in supervisor.children.items() if child.process is not None}


async def captured_request(cogmesh: System, server: ModelServer) -> dict[str, Any]:
    """One cogmesh turn; the request its runtime sent, which the SDK and LangGraph then send too."""
    await server.script(TOKENS.script)
    row = await measure(cogmesh, Case(TOKENS, 1, 1), server)
    if row.ok != 1:
        raise RuntimeError(f"the first cogmesh turn failed: {row.errors} {row.samples}")
    request = (await server.stats())["last_request"]
    if request["messages"][-1] != {"role": "user", "content": TOKENS_TEXT}:
        raise RuntimeError(f"unexpected last message in cogmesh's request: {request['messages'][-1]}")
    return dict(request)


async def warm_up(systems: list[System], server: ModelServer, turns: int) -> None:
    for workload in (TOKENS, TOOL):
        await server.script(workload.script)
        for system in systems:
            row = await measure(system, Case(workload, 1, turns), server)
            if row.errors:
                raise RuntimeError(f"{system.name} warm-up ({workload.name}) failed: {row.errors} {row.samples}")


async def run_cases(systems: list[System], server: ModelServer, plan: list[Case]) -> list[Row]:
    rows = []
    for case in plan:
        await server.script(case.workload.script)
        for system in systems:
            print(f"  {case.workload.name} x{case.concurrency}: {system.name} ({case.turns} turns)", flush=True)
            rows.append(await measure(system, case, server))
    return rows


async def run_mode(
    mode: str, server: ModelServer, plan: list[Case], peers: list[str], warmup: int, work: Path, idle_s: float
) -> tuple[list[Row], dict[str, Any]]:
    """cogmesh with one kind of stores, and the peers (SDK, LangGraph) named, on the same cases."""
    agents, providers = write_agent(work / mode, server.url)
    with redis_for(mode) as redis_url:
        overrides = SUITE | {"agents_dir": agents, "providers_file": providers}
        overrides |= {"redis_url": redis_url} if redis_url else {}
        async with contextlib.AsyncExitStack() as stack:
            settings, supervisor = await stack.enter_async_context(suite(READY_TIMEOUT_S, **overrides))
            name = "cogmesh+redis" if redis_url else "cogmesh"
            client = await stack.enter_async_context(
                driver(name, {"system": "cogmesh", "gateway": settings.gateway_addr, "agent": AGENT})
            )
            pids = {"client": client.pid} | service_pids(supervisor)
            pids |= {"redis": redis_pid(redis_url)} if redis_url else {}
            cogmesh = System(name, client, pids)
            request = await captured_request(cogmesh, server)
            systems = []
            for peer in peers:
                config = {
                    "system": peer,
                    "base_url": f"{server.url}/v1",
                    "model": request["model"],
                    "prefix": request["messages"][:-1],
                    "tools": request.get("tools") or [],
                }
                peer_driver = await stack.enter_async_context(driver(peer, config))
                systems.append(System(peer, peer_driver, {"client": peer_driver.pid}))
            systems.append(cogmesh)
            await warm_up(systems, server, warmup)
            idle = await idle_cpu(cogmesh, idle_s)
            print(f"== {mode} stores: {', '.join(s.name for s in systems)}", flush=True)
            rows = await run_cases(systems, server, plan)
    shown = {k: v for k, v in request.items() if k != "messages"} | {"messages": len(request["messages"])}
    return rows, {"request": shown, "idle_ms_per_s": idle}


async def idle_cpu(system: System, seconds: float) -> dict[str, float]:
    """CPU ms a second each process burns with no turn running (timers, health, reaper): background."""
    before = {name: cpu_seconds(pid) for name, pid in system.pids.items()}
    await asyncio.sleep(seconds)
    return by_service({name: (cpu_seconds(pid) - before[name]) * 1000 / seconds for name, pid in system.pids.items()})


# --------------------------------------------------------------------------- the report


def cell(value: float, digits: int = 1) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def ratio(value: float, base: float) -> float:
    """value / base; NaN when the base measured nothing (a tiny run's CPU below one clock tick)."""
    return value / base if base and not math.isnan(base) else math.nan


def find(rows: list[dict[str, Any]], workload: str, concurrency: int, system: str) -> dict[str, Any] | None:
    return next(
        (r for r in rows if (r["workload"], r["concurrency"], r["system"]) == (workload, concurrency, system)), None
    )


def cpu_total(row: dict[str, Any] | None) -> float:
    return sum(row["cpu_ms"].values()) if row else math.nan


def errors_of(row: dict[str, Any]) -> int:
    return sum(row["errors"].values())


def taken_over(row: dict[str, Any]) -> int:
    """Turns another runtime worker finished while the first still ran them (the driver counts them)."""
    if "taken_over" in row:
        return int(row["taken_over"])
    sample = row["samples"].get("taken over")  # JSON written before the count had a field of its own
    return int(sample.split()[0]) if sample else 0


def targets(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Issue 32's targets, as ratios to the SDK (and LangGraph) in the same run, for each kind of stores."""

    def verdict(ok: bool | None) -> str:
        return "not measured" if ok is None else "**met**" if ok else "**not met**"

    stores = [(s, "Redis" if "redis" in s else "memory") for s in ("cogmesh", "cogmesh+redis")]
    stores = [(s, label) for s, label in stores if any(r["system"] == s for r in rows)]
    sdk_ttft = (find(rows, "tokens", 1, "sdk") or {"ms": {"ttft_p50": math.nan}})["ms"]["ttft_p50"]
    out = []
    for system, label in stores:
        row = find(rows, "tokens", 1, system)
        if row is None:
            continue
        ours = row["ms"]["ttft_p50"]
        ok = None if math.isnan(ours - sdk_ttft) else ours <= sdk_ttft + 3
        out.append(
            [
                f"first token p50, 100-token turn, one session at a time ({label} stores)",
                "<= SDK + 3 ms",
                f"{cell(ours, 2)} ms, SDK {cell(sdk_ttft, 2)} ms (+{cell(ours - sdk_ttft, 2)} ms)",
                verdict(ok),
            ]
        )
    for workload, level, name in (
        ("tokens", 1, "100-token turn"),
        ("tool", 1, "calculator turn"),
        ("paced", 1, "paced turn, one at a time"),
        ("paced", 200, "paced turn, 200 at once"),
    ):
        sdk_cpu = cpu_total(find(rows, workload, level, "sdk"))
        graph_cpu = cpu_total(find(rows, workload, level, "langgraph"))
        for system, label in stores:
            ours_cpu = cpu_total(find(rows, workload, level, system))
            ok = None if math.isnan(ours_cpu + sdk_cpu) else ours_cpu <= 1.5 * sdk_cpu
            if ok is not None and not math.isnan(graph_cpu):
                ok = ok and ours_cpu < graph_cpu
            out.append(
                [
                    f"CPU per turn, all processes, {name} ({label} stores)",
                    "<= 1.5x SDK and < LangGraph",
                    f"{cell(ours_cpu, 2)} ms = {cell(ratio(ours_cpu, sdk_cpu), 2)}x SDK ({cell(sdk_cpu, 2)} ms), "
                    f"{cell(ratio(ours_cpu, graph_cpu), 2)}x LangGraph ({cell(graph_cpu, 2)} ms)",
                    verdict(ok),
                ]
            )
    for system, label in stores:
        ours_row, sdk_row = find(rows, "paced", 200, system), find(rows, "paced", 200, "sdk")
        if ours_row is None or sdk_row is None:
            continue
        p50 = ratio(ours_row["ms"]["full_p50"], sdk_row["ms"]["full_p50"])
        p99 = ratio(ours_row["ms"]["full_p99"], sdk_row["ms"]["full_p99"])
        out.append(
            [
                f"200 paced turns at once, full turn ({label} stores)",
                "p50 <= 1.1x SDK, p99 <= 1.3x SDK, 0 errors",
                f"p50 {cell(p50, 2)}x, p99 {cell(p99, 2)}x, {errors_of(ours_row)} errors",
                verdict(p50 <= 1.1 and p99 <= 1.3 and errors_of(ours_row) == 0),
            ]
        )
    for system, label in stores:
        row = find(rows, "paced", 1000, system)
        if row is None:
            continue
        p99, taken = row["ms"]["ttfe_p99"], taken_over(row)
        out.append(
            [
                f"1,000 sessions at once, one paced turn each ({label} stores)",
                "0 errors, time to first event p99 < 200 ms, 0 turns taken over",
                f"{errors_of(row)} errors, TTFE p99 {cell(p99)} ms, {taken} taken over",
                verdict(errors_of(row) == 0 and p99 < 200 and taken == 0),
            ]
        )
    return out


def report(data: dict[str, Any]) -> str:
    rows: list[dict[str, Any]] = data["rows"]
    labels = {w.name: w.label for w in WORKLOADS.values()}
    latency, cpu, split, samples = [], [], [], []
    services = ["client", "gateway", "runtime", "sessions", "context", "policy", "models", "memory", "redis"]
    for row in rows:
        ms = row["ms"]
        errors = ", ".join(f"{k} x{v}" for k, v in row["errors"].items()) or "0"
        samples += [
            f"- {row['system']}, {row['workload']} x{row['concurrency']}, {k}: {v}" for k, v in row["samples"].items()
        ]
        head = [labels[row["workload"]], row["concurrency"], row["system"]]
        latency.append(
            [
                *head,
                f"{row['ok']}/{row['turns']}",
                errors,
                f"{cell(ms['ttfe_p50'], 2)} / {cell(ms['ttfe_p99'], 2)}",
                f"{cell(ms['ttft_p50'], 2)} / {cell(ms['ttft_p99'], 2)}",
                f"{cell(ms['full_p50'])} / {cell(ms['full_p99'])}",
            ]
        )
        total = cpu_total(row)
        sdk, graph = (cpu_total(find(rows, row["workload"], row["concurrency"], s)) for s in ("sdk", "langgraph"))
        cpu.append(
            [
                *head,
                cell(total, 2),
                cell(row["cpu_ms"]["client"], 2),
                cell(total - row["cpu_ms"]["client"], 2),
                f"{cell(ratio(total, sdk), 2)}x",
                f"{cell(ratio(total, graph), 2)}x",
                cell(total * row["turns"] / 1000 / row["wall_s"], 2),
                cell(row["model_server_cores"], 2),
            ]
        )
        if row["system"].startswith("cogmesh"):
            split.append([*head, *(cell(row["cpu_ms"].get(name, math.nan), 2) for name in services)])
    text = [
        "# The hot path: cogmesh vs LangGraph in-process vs the bare openai SDK, same model server",
        "",
        "One local OpenAI-compatible server (bench/model_server.py, its own process: SSE, one token per chunk, "
        "a usage chunk, tool calls, a set pace) serves every system in the same run. **cogmesh**: a gRPC client "
        "of the gateway, the services as processes (as `cogmesh up` runs them, the runtime as two workers: "
        "default logging, tracing and metrics; only the per-tenant rate limits raised), the agent's model `"
        + MODEL
        + "` of the `openai` provider with base_url on the server; **cogmesh+redis**: the same with "
        "COGMESH_REDIS_URL (a private redis-server). **langgraph**: a LangGraph agent graph (model node, ToolNode) "
        "with ChatOpenAI, in-process. **sdk**: the bare `openai` SDK sending the same request as cogmesh's runtime "
        "(its system prompt and calculator schema, copied from the server), the tool loop by hand. Every system's "
        "client is its own process; each cogmesh turn runs in a new session, created before the measured window. "
        "Turns run in rounds of N at once. Every turn must answer exactly the expected text.",
        "",
        f"Paced turns: the ideal full turn is {IDEAL_PACED_MS:.0f} ms. TTFE = time to the first streamed event of "
        "any kind; first token = to the first assistant text; full = to the end of the stream. Load average "
        f"(1/5/15 min) at the start: {data['load_start']}; at the end: {data['load_end']}. Machine: "
        f"{os.cpu_count()} cores, shared.",
        "",
        "## Latency and errors",
        "",
        table(
            [
                "turn",
                "at once",
                "system",
                "turns ok",
                "errors",
                "TTFE p50 / p99 ms",
                "first token p50 / p99 ms",
                "full turn p50 / p99 ms",
            ],
            latency,
        ),
        "",
        "## CPU per turn (every process of the system, from /proc)",
        "",
        "CPU ms per turn = (utime + stime over the measured turns) / turns. Services = every process but the "
        "client (cogmesh's services, and Redis). Cores busy = the system's CPU over the wall time of the "
        "measurement. The model server's own use is in the last column, counted for nobody.",
        "",
        table(
            [
                "turn",
                "at once",
                "system",
                "CPU ms/turn",
                "client",
                "services",
                "vs SDK",
                "vs LangGraph",
                "cores busy",
                "model server cores",
            ],
            cpu,
        ),
        "",
        "### cogmesh's CPU per turn by process (ms)",
        "",
        "With no turn running, cogmesh's processes burn (CPU ms a second, background timers, health and lease "
        "sweeps): "
        + "; ".join(
            f"{mode} stores: " + ", ".join(f"{name} {ms:.1f}" for name, ms in idle.items())
            for mode, idle in data["idle_ms_per_s"].items()
        )
        + ". A paced turn one at a time lasts about 1.2 s, so that background is part of its CPU per turn.",
        "",
        table(["turn", "at once", "system", *services], split),
        "",
        "## Targets (issue 32), as ratios in this run",
        "",
        table(["target", "bound", "measured", "status"], targets(rows)),
        "",
        "cogmesh here means all its processes: the client, every service process and, with Redis, redis-server.",
        "",
    ]
    if samples:
        text += ["One message of each kind of error, and turns taken over by another runtime worker:", "", *samples, ""]
    return "\n".join(text)


async def run(modes: list[str], plan: list[Case], with_peer: bool, warmup: int, idle_s: float) -> dict[str, Any]:
    peers = ["sdk", "langgraph"] if with_peer else ["sdk"]
    if with_peer:
        ensure_venv()
    data: dict[str, Any] = {"load_start": load_average(), "rows": [], "requests": {}, "idle_ms_per_s": {}}
    with tempfile.TemporaryDirectory(prefix="cogmesh-hotpath-") as work:
        async with model_server() as server:
            for index, mode in enumerate(modes):
                # The peers have no stores: measured once, beside cogmesh with the first kind of stores.
                rows, seen = await run_mode(mode, server, plan, peers if index == 0 else [], warmup, Path(work), idle_s)
                data["rows"] += [asdict(r) for r in rows]
                data["requests"][mode] = seen["request"]
                data["idle_ms_per_s"][mode] = seen["idle_ms_per_s"]
    data["load_end"] = load_average()
    data["time"] = time.time()
    data["plan"] = [{"workload": c.workload.name, "concurrency": c.concurrency, "turns": c.turns} for c in plan]
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="memory,redis", help="cogmesh's stores: memory, redis or both")
    parser.add_argument("--levels", default="1,10,100,200,1000", help="paced turns: sessions at once")
    parser.add_argument("--turns", type=int, default=200, help="zero-latency 100-token turns (tool turns: half)")
    parser.add_argument("--paced-turns", type=int, default=20, help="paced turns one at a time")
    parser.add_argument("--level-turns", type=int, default=50, help="paced turns at least, per level above 1")
    parser.add_argument("--warmup", type=int, default=20, help="untimed turns per system and zero-latency kind")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds cogmesh's idle CPU is read over")
    parser.add_argument("--no-peer", action="store_true", help="skip LangGraph (no peer venv needed)")
    parser.add_argument("--report", action="store_true", help="only render hotpath.md again from hotpath.json")
    args = parser.parse_args()
    if args.report:
        if (saved := read_data("hotpath")) is None:
            parser.error(f"--report: no {RESULTS / 'hotpath.json'} to render")
        print(f"written to {write_result('hotpath', report(saved))}")
        return
    modes = args.modes.split(",")
    if unknown := set(modes) - {"memory", "redis"}:
        parser.error(f"--modes: unknown {', '.join(sorted(unknown))} (use memory and/or redis)")
    plan = cases(args.turns, args.paced_turns, [int(n) for n in args.levels.split(",")], args.level_turns)
    data = asyncio.run(run(modes, plan, not args.no_peer, args.warmup, args.idle))
    write_data("hotpath", data)
    text = report(data)
    print(text)
    print(f"written to {write_result('hotpath', text)} (figures in {RESULTS / 'hotpath.json'})")


if __name__ == "__main__":
    main()
