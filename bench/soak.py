"""Soak: many sessions of many turns against the suite as real processes; errors and memory.

Each session is created, runs its turns one after another through SendMessage
(echo turns and calculator-tool turns alternate), is checked and deleted. A bounded
number of sessions run at once. Every failed call or turn that does not end with its
`final` event counts as an error. RSS of every service process is sampled when the
suite is up, after the warm-up sessions and at the end; a service is "flat" when its
RSS grew by less than FLAT_MIB and FLAT_RATIO between warm-up and end.

    python -m bench.soak                              # 1,000 sessions x 10 turns -> bench/results/soak.md
    python -m bench.soak --sessions 50 --turns 3 --out /tmp/soak.md
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.harness import RESULTS, median, percentile, suite_addresses, table
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.suite.settings import SuiteSettings
from services.suite.supervisor import Supervisor

FLAT_MIB = 20.0  # growth after warm-up below this (and below FLAT_RATIO) counts as flat
FLAT_RATIO = 0.10
CALL_TIMEOUT_S = 60.0  # any single call or turn taking longer is an error, never a hang
CHANNELS = 4  # the load spreads over a few connections, as separate clients would
# The suite runs in dev mode (one tenant drives every session), so its per-tenant limits
# are lifted: the soak measures the services, not the admission control.
SUITE_ENV = {
    "COGMESH_TENANT_RATE_PER_S": "1000000",
    "COGMESH_TENANT_BURST": "1000000",
    "COGMESH_TENANT_MAX_STREAMS": "100000",
    "COGMESH_LOG_LEVEL": "warning",
}


def gateway_stub(channel: grpc.aio.Channel) -> gateway_pb2_grpc.GatewayServiceStub:
    return gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]


def rss_kib(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass
class Suite:
    address: str
    pids: dict[str, int]

    def rss_mib(self) -> dict[str, float]:
        return {name: rss_kib(pid) / 1024 for name, pid in self.pids.items()}


@contextlib.asynccontextmanager
async def suite_processes() -> AsyncIterator[Suite]:
    """Every service its own process under the supervisor, as `cogmesh up` runs them."""
    addresses = suite_addresses()
    saved = {key: os.environ.get(key) for key in SUITE_ENV}
    os.environ.update(SUITE_ENV)  # the supervisor hands its environment to the children
    supervisor = Supervisor(SuiteSettings(**addresses), Path(tempfile.mkdtemp(prefix="cogmesh-soak-")), print)  # type: ignore[arg-type]
    try:
        await supervisor.start()
        pids = {name: child.process.pid for name, child in supervisor.children.items() if child.process}
        yield Suite(addresses["gateway_addr"], pids)
        restarts = {name: child.restarts for name, child in supervisor.children.items() if child.restarts}
        if restarts:
            raise RuntimeError(f"services restarted during the soak: {restarts}")
    finally:
        await supervisor.stop(0.5)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass
class Stats:
    turns: int = 0
    sessions: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    turn_s: list[float] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)

    def error(self, kind: str, detail: str) -> None:
        self.errors[kind] += 1
        if len(self.examples) < 5:
            self.examples.append(f"{kind}: {detail[:200]}")


def content(session: int, turn: int) -> tuple[str, str]:
    """The turn's message and a piece of text its final answer must contain."""
    if turn % 2:
        a, b = session % 97 + 2, turn + 3
        return f"What is {a} * {b}?", str(a * b)  # the calculator tool
    return f"soak session {session} turn {turn}", f"turn {turn}"  # echoed back


async def one_turn(stub: gateway_pb2_grpc.GatewayServiceStub, session_id: str, i: int, t: int, stats: Stats) -> None:
    text, expected = content(i, t)
    started = time.perf_counter()
    last = None
    try:
        call = stub.SendMessage(
            gateway_pb2.SendMessageRequest(session_id=session_id, content=text), timeout=CALL_TIMEOUT_S
        )
        async for response in call:
            if response.events:
                last = response.events[-1]
    except grpc.aio.AioRpcError as err:
        stats.error(f"SendMessage {err.code().name}", err.details() or "")
        return
    stats.turns += 1
    if last is None or last.WhichOneof("payload") != "final":
        kind = last.WhichOneof("payload") if last is not None else "nothing"
        stats.error(f"turn ended with {kind}", str(last.error if last is not None else ""))
    elif expected not in last.final.text:
        stats.error("wrong answer", f"{text!r} -> {last.final.text!r}")
    else:
        stats.turn_s.append(time.perf_counter() - started)


async def one_session(stub: gateway_pb2_grpc.GatewayServiceStub, i: int, turns: int, stats: Stats) -> None:
    try:
        created = await stub.CreateSession(gateway_pb2.CreateSessionRequest(user_id=f"soak-{i}"), timeout=30)
        session_id = created.session.session_id
        for t in range(turns):
            await one_turn(stub, session_id, i, t, stats)
        got = await stub.GetSession(gateway_pb2.GetSessionRequest(session_id=session_id), timeout=30)
        if got.session.active_turn_id:
            stats.error("turn left running", got.session.active_turn_id)
        deleted = await stub.DeleteSession(gateway_pb2.DeleteSessionRequest(session_id=session_id), timeout=30)
        if not deleted.deleted:
            stats.error("DeleteSession", f"session {session_id} was not deleted")
    except grpc.aio.AioRpcError as err:
        stats.error(f"session call {err.code().name}", err.details() or "")
    stats.sessions += 1


async def run_load(address: str, first: int, count: int, turns: int, concurrency: int, stats: Stats) -> None:
    channels = [grpc.aio.insecure_channel(address) for _ in range(CHANNELS)]
    stubs = [gateway_stub(c) for c in channels]
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(first, first + count):
        queue.put_nowait(i)

    async def worker(w: int) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            await one_session(stubs[w % CHANNELS], i, turns, stats)

    try:
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    finally:
        for channel in channels:
            await channel.close()


async def count_sessions(address: str) -> int:
    """Sessions still stored for the tenant: the soak deletes every one it made."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = gateway_stub(channel)
        total, token = 0, ""
        while True:
            page = await stub.ListSessions(gateway_pb2.ListSessionsRequest(page_size=100, page_token=token), timeout=30)
            total += len(page.sessions)
            token = page.next_page_token
            if not token:
                return total


@dataclass
class Result:
    sessions: int
    turns: int
    concurrency: int
    warmup: int
    stats: Stats
    wall_s: float
    rss: dict[str, dict[str, float]]  # phase -> process (service, or runtime-1, runtime-2...) -> MiB
    peak: dict[str, float]
    left_sessions: int

    @property
    def growth(self) -> dict[str, float]:
        return {name: self.rss["end"][name] - self.rss["warm"][name] for name in self.rss["end"]}

    @property
    def flat(self) -> dict[str, bool]:
        return {
            name: grew < FLAT_MIB and grew < FLAT_RATIO * self.rss["warm"][name] for name, grew in self.growth.items()
        }

    @property
    def ok(self) -> bool:
        return not self.stats.errors and self.left_sessions == 0

    def markdown(self) -> str:
        s = self.stats
        rate = s.turns / self.wall_s if self.wall_s else float("nan")
        rows = [
            [
                name,
                f"{self.rss['start'][name]:.1f}",
                f"{self.rss['warm'][name]:.1f}",
                f"{self.rss['end'][name]:.1f}",
                f"{self.peak[name]:.1f}",
                f"{self.growth[name]:+.1f}",
                "yes" if self.flat[name] else "**no**",
            ]
            for name in self.rss["start"]  # every process: runtime-1, runtime-2, ...
        ]
        errors = ", ".join(f"{kind}: {n}" for kind, n in s.errors.most_common()) or "none"
        text = (
            f"# Soak\n\n`python -m bench.soak --sessions {self.sessions} --turns {self.turns} "
            f"--concurrency {self.concurrency}`: every service its own process, the runtime's workers one each "
            f"(in-memory stores), {self.concurrency} sessions at a time, each created, run turn after turn "
            f"through SendMessage (echo and calculator-tool turns alternate), checked and deleted. "
            f"The first {self.warmup} sessions are the warm-up.\n\n"
            + table(
                ["sessions", "turns", "errors", "sessions left", "wall s", "turns/s", "turn p50 ms", "turn p99 ms"],
                [
                    [
                        s.sessions,
                        s.turns,
                        sum(s.errors.values()),
                        self.left_sessions,
                        f"{self.wall_s:.0f}",
                        f"{rate:.1f}",
                        f"{median(s.turn_s) * 1000:.1f}",
                        f"{percentile(s.turn_s, 99) * 1000:.1f}",
                    ]
                ],
            )
            + f"\n\nErrors: {errors}.\n"
            + "".join(f"\n- {example}" for example in s.examples)
            + "\n\n## RSS per process (MiB)\n\n"
            + f"Flat: grew less than {FLAT_MIB:g} MiB and less than {FLAT_RATIO:.0%} from warm-up to end.\n\n"
            + table(["service", "start", "after warm-up", "end", "peak", "end - warm-up", "flat"], rows)
            + "\n"
        )
        return text


async def soak(sessions: int, turns: int, concurrency: int, warmup: int) -> Result:
    stats = Stats()
    async with suite_processes() as suite:
        rss = {"start": suite.rss_mib()}
        peak = dict(rss["start"])
        sampling = True

        async def sample() -> None:
            while sampling:
                for name, mib in suite.rss_mib().items():
                    peak[name] = max(peak[name], mib)
                await asyncio.sleep(1.0)

        sampler = asyncio.create_task(sample())
        started = time.monotonic()
        try:
            await run_load(suite.address, 0, warmup, turns, concurrency, stats)
            rss["warm"] = suite.rss_mib()
            await run_load(suite.address, warmup, sessions - warmup, turns, concurrency, stats)
            wall = time.monotonic() - started
            await asyncio.sleep(1.0)  # let the last deletions and stream teardowns settle
            rss["end"] = suite.rss_mib()
            left = await count_sessions(suite.address)
        finally:
            sampling = False
            await sampler
        for name, mib in rss["end"].items():
            peak[name] = max(peak[name], mib)
    return Result(sessions, turns, concurrency, warmup, stats, wall, rss, peak, left)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=10, help="turns per session")
    parser.add_argument("--concurrency", type=int, default=32, help="sessions running at once")
    parser.add_argument("--warmup", type=int, default=0, help="warm-up sessions (default: a tenth)")
    parser.add_argument(
        "--no-flat-check", action="store_true", help="exit 0 even if RSS grew (short runs have no steady state)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "soak.md", help="where the markdown report goes")
    args = parser.parse_args(argv)
    if args.sessions < 2 or args.turns < 1 or args.concurrency < 1:
        parser.error("--sessions must be at least 2, --turns and --concurrency at least 1")
    warmup = args.warmup or max(1, args.sessions // 10)
    if warmup >= args.sessions:
        parser.error("--warmup must be smaller than --sessions")
    result = asyncio.run(soak(args.sessions, args.turns, args.concurrency, warmup))
    report = result.markdown()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)
    print(f"written to {args.out}", file=sys.stderr)
    flat = args.no_flat_check or all(result.flat.values())
    return 0 if result.ok and flat else 1


if __name__ == "__main__":
    raise SystemExit(main())
