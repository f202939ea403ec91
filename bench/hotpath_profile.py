"""Where a cogmesh turn's CPU and first-token latency go: py-spy on every service, message counts, spans.

The suite as processes (in-memory stores) on bench.hotpath's model server, driven by
bench.hotpath's cogmesh client, under three loads: 100-token zero-latency turns one at a
time, calculator turns (a tool call, then the answer) one at a time, and 200 paced turns
at once. For each load:

- py-spy (`record --native`: Cython and C frames too, so gRPC's and protobuf's work shows
  by name) samples every service process during the measured turns; the stacks are
  summed into self and cumulative shares per frame and grouped into causes (gRPC,
  protobuf, the openai SDK and pydantic, logs/metrics/tracing, asyncio, redis-py, our
  own code...), by the frame nearest the sample's leaf that belongs to a known package;
- the CPU per turn of each service and of each of its threads, from /proc;
- the gRPC messages per turn on each hop, from the services' Prometheus counters
  (unary calls by method, stream messages sent by method), before and after.

Then, on a suite that exports its spans over OTLP to a collector in this process, the
turn's timeline: every RPC span's start and length relative to the gateway's SendMessage,
and the model request's arrival at the model server (its own clock stamp), so the
internal calls made before the model is called, and their order, can be read off.

Writes bench/results/hotpath.profile.tables.md (tables) and hotpath.profile.json; the
raw py-spy stacks go to bench/out/hotpath/profile/. Needs py-spy (pip install py-spy) and
ptrace rights over the services (root, or kernel.yama.ptrace_scope=0).

    python -m bench.hotpath_profile [--turns 300] [--tool-turns 150] [--paced 200] [--rate 100]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import random
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from bench.harness import median, suite, table, write_data, write_result
from bench.hotpath import (
    AGENT,
    LOGS,
    PACED,
    READY_TIMEOUT_S,
    ROOT,
    SUITE,
    TOKENS,
    TOOL,
    Case,
    ModelServer,
    System,
    cpu_seconds,
    driver,
    load_average,
    measure,
    model_server,
    service_pids,
    write_agent,
)
from bench.sessions import redis_for
from services.suite.supervisor import ORDER

PROFILES = LOGS / "profile"
SUFFIX = {"memory": "", "redis": ".redis"}  # the results' file names: hotpath.profile[.redis].tables.md
OUR_CODE = ("services/", "gateway/", "clients/")  # folders of the repository: our own Python
# Causes, by where a frame's code lives; the first match from the sample's leaf up names the cause.
CAUSES: list[tuple[str, tuple[str, ...]]] = [
    ("Python garbage collector", ("gc_collect_main", "gc_collect_with_callback")),
    ("protobuf encode/decode", ("google/protobuf", "upb", "_message.", "PyUpb", "/protobuf/")),
    ("gRPC (per call and per message)", ("grpc/", "cygrpc", "grpc_", "grpc::", "libgrpc", "_cython/")),
    (
        "model SDKs and their HTTP client",
        (
            *("openai/", "anthropic/", "pydantic", "jiter"),
            *("httpx", "httpcore", "h11/", "anyio/", "sniffio/"),
            *("aiohttp/", "multidict/", "yarl/", "propcache/"),
        ),
    ),
    ("logs, metrics, tracing", ("structlog/", "opentelemetry/", "prometheus_client/", "logging/")),
    ("redis-py", ("redis/", "hiredis")),
    ("json (stdlib)", ("json/", "_json.c")),
    ("our code (cogmesh)", tuple(f"({folder}" for folder in OUR_CODE)),
    ("asyncio event loop", ("asyncio/", "selectors.py", "_asynciomodule", "selectmodule", "epoll")),
]
NOT_A_NAME = re.compile(r"^0x[0-9a-f]+ ")  # a native frame py-spy could not name
# A thread whose deepest named frame is one of these is waiting, not working. (--native pauses the
# process to unwind, so py-spy cannot tell idle threads apart itself: they are dropped here.)
WAITING = {
    "epoll_wait",
    "epoll_pwait",
    "poll",
    "select",
    "PyThread_acquire_lock_timed",
    "pthread_cond_timedwait",
    "pthread_cond_wait",
    "sem_timedwait",
    "sem_wait",
    "nanosleep",
    "clock_nanosleep",
    "accept",
    "accept4",
}


@dataclass
class Profile:
    """Folded stacks of one process: (frames root..leaf, samples)."""

    stacks: list[tuple[list[str], int]] = field(default_factory=list)

    @property
    def samples(self) -> int:
        return sum(n for _, n in self.stacks)

    waiting: int = 0  # samples of threads that were waiting (dropped)

    @classmethod
    def read(cls, path: Path) -> Profile:
        profile = cls()
        if not path.exists():
            return profile
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = stack.split(";")
            named = [f for f in frames if not NOT_A_NAME.match(f)]
            if named and named[-1].split(" ", 1)[0] in WAITING:
                profile.waiting += int(count)
            else:
                profile.stacks.append((frames, int(count)))
        return profile

    def causes(self) -> dict[str, float]:
        shares: collections.Counter[str] = collections.Counter()
        for frames, n in self.stacks:
            shares[cause_of(frames)] += n
        return {k: v / max(1, self.samples) for k, v in shares.most_common()}

    def top_self(self, count: int) -> list[tuple[str, float]]:
        shares: collections.Counter[str] = collections.Counter()
        for frames, n in self.stacks:
            named = [f for f in frames if not NOT_A_NAME.match(f)]
            shares[short(named[-1]) if named else "?"] += n
        return [(k, v / max(1, self.samples)) for k, v in shares.most_common(count)]

    def top_cumulative(self, count: int, our_code_only: bool = False) -> list[tuple[str, float]]:
        shares: collections.Counter[str] = collections.Counter()
        for frames, n in self.stacks:
            named = (f for f in frames if not NOT_A_NAME.match(f) and (ours(f) or not our_code_only))
            for frame in {short(f) for f in named}:
                shares[frame] += n
        return [(k, v / max(1, self.samples)) for k, v in shares.most_common(count)]


def cause_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        frame = frame.replace(f"{ROOT}/", "")  # our files by their path in the repository
        for cause, parts in CAUSES:
            if any(part in frame for part in parts):
                return cause
    return "other (interpreter, libc, other packages)"


def ours(frame: str) -> bool:
    return frame.replace(f"{ROOT}/", "").split(" (", 1)[-1].startswith(OUR_CODE)


def short(frame: str) -> str:
    """`func (/abs/path/to/file.py:12)` -> `func (path/to/file.py)`, relative to the repository or the
    site-packages or stdlib folder: lines differ from sample to sample, the function does not."""
    match = re.match(r"^(.*) \((.*?)(?::\d+)?\)$", frame)
    if not match:
        return frame
    name, where = match.groups()
    where = where.replace(f"{ROOT}/", "").split("site-packages/")[-1]
    where = re.sub(r"^.*/lib/python3\.\d+/", "", where)
    return f"{name} ({where})"


# --------------------------------------------------------------------------- py-spy, /proc, /metrics


@contextlib.asynccontextmanager
async def sampling(pids: dict[str, int], label: str, rate: int) -> AsyncIterator[dict[str, Path]]:
    """py-spy on every process while the body runs; yields the file each writes when stopped."""
    spy = shutil.which("py-spy", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if spy is None:
        raise SystemExit("py-spy is not installed: pip install py-spy")
    PROFILES.mkdir(parents=True, exist_ok=True)
    files = {name: PROFILES / f"{label}.{name}.txt" for name in pids}
    spies = []
    for name, pid in pids.items():
        files[name].unlink(missing_ok=True)
        command = [spy, "record", "--native", "--format", "raw", "--rate", str(rate), "-o", str(files[name])]
        spies.append(
            await asyncio.create_subprocess_exec(
                *command, "-p", str(pid), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
            )
        )
    try:
        for process in spies:  # attached once it says it samples
            assert process.stdout is not None
            while b"Sampling process" not in (line := await asyncio.wait_for(process.stdout.readline(), 60)):
                if not line:
                    raise RuntimeError("py-spy exited before sampling (ptrace not permitted?)")
        yield files
    finally:
        for process in spies:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        for process in spies:
            try:
                await asyncio.wait_for(process.communicate(), 120)
            except TimeoutError:
                process.kill()
                await process.wait()


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds by thread name (numbered threads of one name summed) of a process."""
    out: dict[str, float] = collections.defaultdict(float)
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread may end while we read
            name = (task / "comm").read_text().strip()
            out[re.sub(r"\d+$", "#", name)] += cpu_seconds(pid, int(task.name))
    return dict(out)


def metrics_base_port(count: int) -> int:
    """A port p such that p .. p+count-1 are free now (each service serves /metrics on one).

    Below the kernel's ephemeral range, so the suite's own port-0 picks cannot land on them.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        base = random.randrange(10_000, low - count)
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + count):
                    stack.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise RuntimeError(f"no {count} consecutive free ports below {low}")


async def scrape(base: int) -> dict[str, dict[tuple[str, str], float]]:
    """Per service: (metric, method) -> value, for unary call counts and stream messages sent."""
    out: dict[str, dict[tuple[str, str], float]] = {}
    async with httpx.AsyncClient(timeout=30) as client:
        for index, name in enumerate(ORDER):
            text = (await client.get(f"http://127.0.0.1:{base + index}/metrics")).text
            values: dict[tuple[str, str], float] = collections.defaultdict(float)
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    method = sample.labels.get("grpc_method", "")
                    if sample.name == "grpc_server_handling_seconds_count":
                        values[("calls", method)] += sample.value
                    elif sample.name == "grpc_server_msg_sent_total":
                        values[("sent", method)] += sample.value
                    elif sample.name == "cogmesh_events_total":
                        values[("events", method)] += sample.value
            out[name] = dict(values)
    return out


def per_turn(before: dict[str, dict[tuple[str, str], float]], after: dict[str, Any], turns: int) -> list[list[Any]]:
    rows = []
    for service in ORDER:
        for key, value in sorted(after[service].items()):
            delta = (value - before[service].get(key, 0.0)) / turns
            if delta > 0.001 and "grpc.health" not in key[1]:
                rows.append([service, key[1], key[0], round(delta, 2)])
    return rows


# --------------------------------------------------------------------------- spans


class SpanStore(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC collector that keeps every span: (service, name, trace, span, parent, start ns, end ns)."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, str, bytes, bytes, bytes, int, int]] = []
        self._lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        got = []
        for resource in request.resource_spans:
            service = next((a.value.string_value for a in resource.resource.attributes if a.key == "service.name"), "?")
            for scope in resource.scope_spans:
                for s in scope.spans:
                    got.append(
                        (
                            service,
                            s.name,
                            s.trace_id,
                            s.span_id,
                            s.parent_span_id,
                            s.start_time_unix_nano,
                            s.end_time_unix_nano,
                        )
                    )
        with self._lock:
            self.spans += got
        return trace_service_pb2.ExportTraceServiceResponse()


@contextlib.contextmanager
def span_store() -> Iterator[tuple[SpanStore, str]]:
    store = SpanStore()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(store, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield store, f"http://127.0.0.1:{port}"
    finally:
        server.stop(0)


ROOT_SPAN = "/cogmesh.gateway.v1.GatewayService/SendMessage"


def timeline(spans: list[tuple[str, str, bytes, bytes, bytes, int, int]], arrivals: list[int]) -> list[list[Any]]:
    """Median start and length of each span (and the model request) relative to its turn's SendMessage."""
    by_trace: dict[bytes, list[tuple[str, str, bytes, bytes, bytes, int, int]]] = collections.defaultdict(list)
    for span in spans:
        by_trace[span[2]].append(span)
    offsets: dict[tuple[str, str], list[tuple[float, float]]] = collections.defaultdict(list)
    turns = 0
    for trace_spans in by_trace.values():
        roots = [s for s in trace_spans if s[1] == ROOT_SPAN and s[0] == "cogmesh-gateway"]
        if len(roots) != 1:
            continue
        root = roots[0]
        turns += 1
        for service, name, _, _, _, start, end in trace_spans:
            offsets[(service.removeprefix("cogmesh-"), name)].append(((start - root[5]) / 1e6, (end - start) / 1e6))
        for arrival in arrivals:
            if root[5] <= arrival <= root[6]:
                offsets[("model server", "chat completion request arrives")].append(((arrival - root[5]) / 1e6, 0.0))
    rows = []
    for (service, name), values in offsets.items():
        rows.append(
            [
                f"{median([v[0] for v in values]):.2f}",
                f"{median([v[1] for v in values]):.2f}",
                service,
                name.rsplit(".", 1)[-1] if name.startswith("/") else name,
                f"{len(values) / max(1, turns):.2f}",
            ]
        )
    return sorted(rows, key=lambda r: float(r[0]))


# --------------------------------------------------------------------------- the run


@dataclass
class Load:
    label: str
    case: Case
    cpu_ms: dict[str, float] = field(default_factory=dict)
    threads_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    messages: list[list[Any]] = field(default_factory=list)
    profiles: dict[str, Profile] = field(default_factory=dict)
    wall_s: float = 0.0
    errors: dict[str, dict[str, Any]] = field(default_factory=dict)  # by pass: failed turns by kind, one message


async def profile_load(load: Load, cogmesh: System, server: ModelServer, base: int, rate: int) -> None:
    """The load twice: once bare (CPU per service and thread, messages per hop), once under py-spy (frames).

    py-spy --native stops a process for every sample, which costs it CPU of its own: the CPU
    figures come from the bare pass only.
    """
    services = {name: pid for name, pid in cogmesh.pids.items() if name != "client"}
    turns = load.case.turns
    await server.script(load.case.workload.script)
    state: dict[str, Any] = {}

    async def before() -> None:
        state["metrics"] = await scrape(base)
        state["threads"] = {name: thread_cpu(pid) for name, pid in services.items()}

    async def after() -> None:
        state["threads_after"] = {name: thread_cpu(pid) for name, pid in services.items()}

    row = await measure(cogmesh, load.case, server, before, after)
    load.errors["bare pass"] = row.errors | {f"{k} (one)": v for k, v in row.samples.items()}
    load.cpu_ms, load.wall_s = row.cpu_ms, row.wall_s
    load.threads_ms = {
        name: {
            thread: (seconds - state["threads"][name].get(thread, 0.0)) * 1000 / turns
            for thread, seconds in state["threads_after"][name].items()
            if seconds > state["threads"][name].get(thread, 0.0)
        }
        for name in services
    }
    load.messages = per_turn(state["metrics"], await scrape(base), turns)

    stack = contextlib.AsyncExitStack()

    async def start_sampling() -> None:
        state["files"] = await stack.enter_async_context(sampling(services, load.label, rate))

    async with stack:
        row = await measure(cogmesh, load.case, server, start_sampling, stack.aclose)
    load.errors["sampled pass"] = row.errors | {f"{k} (one)": v for k, v in row.samples.items()}
    load.profiles = {name: Profile.read(path) for name, path in state["files"].items()}


async def critical_path(server: ModelServer, work: Path, turns: int) -> tuple[list[list[Any]], dict[str, float]]:
    """A suite exporting spans: sequential 100-token turns, then each span's place in its turn."""
    agents, providers = write_agent(work / "traced", server.url)
    with span_store() as (store, endpoint):
        overrides = SUITE | {"agents_dir": agents, "providers_file": providers, "otlp_endpoint": endpoint}
        async with suite(READY_TIMEOUT_S, **overrides) as (settings, supervisor):
            config = {"system": "cogmesh", "gateway": settings.gateway_addr, "agent": AGENT}
            async with driver("cogmesh-traced", config) as client:
                traced = System("cogmesh", client, {"client": client.pid} | service_pids(supervisor))
                await server.script(TOKENS.script)
                await measure(traced, Case(TOKENS, 1, 10), server)  # warm-up
                row = await measure(traced, Case(TOKENS, 1, turns), server)
                arrivals = (await server.stats())["arrivals_ns"]
        # Stopping the suite flushes every service's spans.
    return timeline(store.spans, arrivals), row.ms


def shares(items: list[tuple[str, float]]) -> str:
    return "<br>".join(f"{share * 100:.1f}% `{name}`" for name, share in items)


def report(
    loads: list[Load], path: list[list[Any]], path_ms: dict[str, float], load_avg: tuple[str, str], mode: str
) -> str:
    stores = (
        "in-memory stores"
        if mode == "memory"
        else "Redis stores (a private redis-server; the timeline's suite: memory)"
    )
    text = [
        f"# Hot path profile: tables (generated by `python -m bench.hotpath_profile --mode {mode}`)",
        "",
        f"The suite on {stores}. Load average at start / end: {load_avg[0]} / {load_avg[1]}. "
        "Each load runs twice: bare, for the CPU "
        "per turn of every service and thread (/proc) and the gRPC counters; then with py-spy --native sampling "
        "every service (it stops a process for each sample, so that pass's CPU and latency are not used). "
        "Threads named `python` are the Python threads (the event loop's and helpers'), `event_engine`, "
        "`grpc_global_tim` and `lifeguard` gRPC's C++ threads, which py-spy cannot see into.",
        "",
    ]
    for load in loads:
        failed = "; ".join(f"{name}: {errors}" for name, errors in load.errors.items() if errors) or "none"
        text += [f"## {load.label}", "", f"{load.case.turns} turns, {load.wall_s:.1f} s. Failed turns: {failed}.", ""]
        text += [
            "### CPU per turn by service and thread (ms)",
            "",
            table(
                ["service", "CPU ms/turn", "by thread"],
                [
                    [
                        name,
                        f"{load.cpu_ms.get(name, 0.0):.2f}",
                        ", ".join(
                            f"{thread} {ms:.2f}"
                            for thread, ms in sorted(load.threads_ms.get(name, {}).items(), key=lambda kv: -kv[1])
                        ),
                    ]
                    for name in ["client", *ORDER]
                ],
            ),
            "",
            "### Causes: share of each service's busy Python-thread samples, and that share of its Python "
            "threads' CPU per turn",
            "",
        ]
        causes = sorted({c for p in load.profiles.values() for c in p.causes()})

        def estimate(name: str, cause: str, load: Load = load) -> str:
            share = load.profiles[name].causes().get(cause, 0.0)
            return f"{share * 100:.1f}% ({share * load.threads_ms.get(name, {}).get('python', 0.0):.2f} ms)"

        text.append(
            table(
                ["cause", *ORDER],
                [[cause, *(estimate(name, cause) for name in ORDER)] for cause in causes]
                + [
                    ["busy samples", *(str(load.profiles[name].samples) for name in ORDER)],
                    ["waiting samples (dropped)", *(str(load.profiles[name].waiting) for name in ORDER)],
                ],
            )
        )
        text += ["", "### Top frames per service", ""]
        text.append(
            table(
                ["service", "self (leaf) frames", "cumulative, our code", "cumulative, all"],
                [
                    [
                        name,
                        shares(load.profiles[name].top_self(12)),
                        shares(load.profiles[name].top_cumulative(15, our_code_only=True)),
                        shares(load.profiles[name].top_cumulative(15)),
                    ]
                    for name in ORDER
                ],
            )
        )
        text += [
            "",
            "### gRPC per turn, by serving service and method (Prometheus counters)",
            "",
            "calls = RPCs served (unary and streams), sent = stream messages the server wrote, events = runtime "
            "events those messages carried.",
            "",
            table(["server", "method", "counter", "per turn"], load.messages),
            "",
        ]
    text += [
        "## A turn's timeline (spans exported over OTLP; 100-token zero-latency turns, one at a time)",
        "",
        f"Client-side in the same run: first event p50 {path_ms.get('ttfe_p50', 0):.2f} ms, first token p50 "
        f"{path_ms.get('ttft_p50', 0):.2f} ms, full turn p50 {path_ms.get('full_p50', 0):.2f} ms. Offsets are "
        "from the start of the gateway's SendMessage span (medians over the turns); `per turn` counts spans of "
        "that name per turn. Export adds some cost to every span, so the timings are a little above the "
        "benchmark's.",
        "",
        table(["starts at ms", "lasts ms", "service", "span", "per turn"], path),
        "",
    ]
    return "\n".join(text)


async def run(turns: int, tool_turns: int, paced: int, rate: int, traced_turns: int, mode: str = "memory") -> str:
    load_start = load_average()
    base = metrics_base_port(len(ORDER))
    loads = [
        Load("100-token turns, zero-latency model, one at a time", Case(TOKENS, 1, turns)),
        Load("calculator turns, zero-latency model, one at a time", Case(TOOL, 1, tool_turns)),
        Load(f"paced turns, {paced} at once", Case(PACED, paced, paced * 2)),
    ]
    with tempfile.TemporaryDirectory(prefix="cogmesh-hotpath-profile-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        async with model_server() as server:
            agents, providers = write_agent(work / "profiled", server.url)
            # One runtime worker: each service's samples in one process, the profile's unit.
            overrides = SUITE | {"agents_dir": agents, "providers_file": providers, "metrics_port": base}
            overrides |= {"runtime_workers": 1}
            redis_url = stack.enter_context(redis_for(mode))
            overrides |= {"redis_url": redis_url} if redis_url else {}
            async with suite(READY_TIMEOUT_S, **overrides) as (settings, supervisor):
                config = {"system": "cogmesh", "gateway": settings.gateway_addr, "agent": AGENT}
                async with driver("cogmesh-profiled", config) as client:
                    cogmesh = System("cogmesh", client, {"client": client.pid} | service_pids(supervisor))
                    await server.script(TOKENS.script)
                    await measure(cogmesh, Case(TOKENS, 1, 20), server)  # warm-up
                    for load in loads:
                        print(f"== {load.label}", flush=True)
                        await profile_load(load, cogmesh, server, base, rate)
            print("== timeline (OTLP spans)", flush=True)
            try:
                path, path_ms = await critical_path(server, work, traced_turns)
            except Exception as exc:  # noqa: BLE001 - the profile above is still worth writing
                print(f"the timeline failed: {exc}", flush=True)
                path, path_ms = [["-", "-", "-", f"the timeline failed: {exc}".replace("\n", " ")[:300], "-"]], {}
    write_data(
        f"hotpath.profile{SUFFIX[mode]}",
        {
            "loads": [
                {
                    "label": load.label,
                    "turns": load.case.turns,
                    "cpu_ms": load.cpu_ms,
                    "threads_ms": load.threads_ms,
                    "messages": load.messages,
                    "errors": load.errors,
                    "causes": {name: p.causes() for name, p in load.profiles.items()},
                    "self": {name: p.top_self(25) for name, p in load.profiles.items()},
                }
                for load in loads
            ],
            "timeline": path,
            "time": time.time(),
        },
    )
    return report(loads, path, path_ms, (load_start, load_average()), mode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300, help="100-token turns one at a time")
    parser.add_argument("--tool-turns", type=int, default=150, help="calculator turns one at a time")
    parser.add_argument("--paced", type=int, default=200, help="paced turns at once (two rounds)")
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second per process")
    parser.add_argument(
        "--mode", choices=["memory", "redis"], default="memory", help="the stores (redis: a private redis-server)"
    )
    parser.add_argument("--traced-turns", type=int, default=50, help="turns whose spans make the timeline")
    args = parser.parse_args()
    text = asyncio.run(run(args.turns, args.tool_turns, args.paced, args.rate, args.traced_turns, args.mode))
    print(f"written to {write_result(f'hotpath.profile{SUFFIX[args.mode]}.tables', text)}")


if __name__ == "__main__":
    main()
