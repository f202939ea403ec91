"""Shared bench plumbing: the suite as real processes on free ports, percentiles, tables."""

from __future__ import annotations

import contextlib
import socket
import statistics
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from services.kit.config import Settings
from services.suite.supervisor import ORDER, Supervisor

RESULTS = Path(__file__).resolve().parent / "results"


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@contextlib.asynccontextmanager
async def suite_processes(**overrides: object) -> AsyncIterator[Settings]:
    """`cogmesh up` in miniature: every service its own process, as in production."""
    ports = free_ports(len(ORDER))
    settings = Settings(
        **{f"{name}_addr": f"127.0.0.1:{port}" for name, port in zip(ORDER, ports, strict=True)},  # type: ignore[arg-type]
        **overrides,  # type: ignore[arg-type]
    )
    supervisor = Supervisor(settings, Path(tempfile.mkdtemp(prefix="cogmesh-bench-")), lambda _: None)
    await supervisor.start()
    try:
        yield settings
    finally:
        await supervisor.stop(0.5)


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


def write_result(name: str, text: str) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.md"
    path.write_text(text)
    return path
