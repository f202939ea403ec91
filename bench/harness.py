"""Shared bench plumbing: the suite as real processes on free ports, timing, percentiles, tables.

Results go to bench/results/ unless COGMESH_BENCH_RESULTS names another folder (the
`--quick` run writes to bench/out/quick so it never overwrites the real figures).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.peer.timing import Timing as Timing  # the one timing code, shared with the peer's venv
from bench.peer.timing import time_stream as time_stream
from services.suite import supervisor
from services.suite.settings import SuiteSettings
from services.suite.supervisor import ORDER, Supervisor

RESULTS = Path(os.environ.get("COGMESH_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def suite_addresses(runtime_workers: int = 0) -> dict[str, str]:
    """`<service>_addr` settings on free loopback ports; the runtime's lists one port per worker,
    as many as `cogmesh up` runs (`runtime_workers`, 0: one per core, at least 2)."""
    workers = supervisor.runtime_workers(SuiteSettings(runtime_workers=runtime_workers))
    ports = iter(free_ports(len(ORDER) + workers - 1))
    addresses = {f"{name}_addr": f"127.0.0.1:{next(ports)}" for name in ORDER if name != "runtime"}
    addresses["runtime_addr"] = ",".join(f"127.0.0.1:{next(ports)}" for _ in range(workers))
    return addresses


@contextlib.asynccontextmanager
async def suite(ready_timeout_s: float = 30.0, **overrides: object) -> AsyncIterator[tuple[SuiteSettings, Supervisor]]:
    """`cogmesh up` in miniature: every service its own process, as in production.

    Overrides are SuiteSettings fields; the children read them from COGMESH_* variables,
    so they are exported to the children's environment too. `ready_timeout_s`: how long
    each service may take to say SERVING (longer on a machine shared with other jobs).
    """
    workers = overrides.get("runtime_workers", 0)
    settings = SuiteSettings(**suite_addresses(int(workers)), **overrides)  # type: ignore[arg-type]
    log_dir = Path(tempfile.mkdtemp(prefix="cogmesh-bench-"))
    supervisor = Supervisor(settings, log_dir, lambda _: None, ready_timeout_s=ready_timeout_s)
    with exported_settings(overrides):  # for the suite's lifetime: a restarted child must get them too
        await supervisor.start()
        try:
            yield settings, supervisor
        finally:
            await supervisor.stop(0.5)


@contextlib.contextmanager
def exported_settings(overrides: dict[str, object]) -> Iterator[None]:
    """COGMESH_* variables for the overrides: the children read only their environment."""
    saved = dict(os.environ)
    for name, value in overrides.items():
        os.environ[f"COGMESH_{name.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.asynccontextmanager
async def suite_processes(**overrides: object) -> AsyncIterator[SuiteSettings]:
    async with suite(**overrides) as (settings, _):
        yield settings


def rss_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def suite_rss(supervisor: Supervisor) -> dict[str, int]:
    """RSS of every service of a running suite, its processes together (the runtime's workers)."""
    totals: dict[str, int] = {}
    for child in supervisor.children.values():
        if child.process is not None:
            totals[child.service] = totals.get(child.service, 0) + rss_bytes(child.process.pid)
    return totals


def percentile(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def parse_tables(markdown: str) -> list[list[dict[str, str]]]:
    """Every markdown table in a text, as rows keyed by header: how plots read other benches' results."""
    tables: list[list[dict[str, str]]] = []
    headers: list[str] | None = None
    for line in [*markdown.splitlines(), ""]:
        if not line.startswith("|"):
            headers = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if headers is None:
            headers = cells
            tables.append([])
        elif not all(set(c) <= set(":-") for c in cells):
            tables[-1].append(dict(zip(headers, cells, strict=False)))
    return tables


def write_result(name: str, text: str) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.md"
    path.write_text(text)
    return path


def write_data(name: str, data: dict[str, Any]) -> Path:
    """The figures behind a result table, for the plots."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def read_data(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None
