"""The benchmark plumbing: `python -m bench --quick` end to end, and the pieces it is built from.

The quick run starts the suite as processes (in-memory and Redis stores) with tiny
sizes; the figures are not checked, only that every path produces sound results.
The LangGraph peer runs only when its virtualenv exists (creating it is minutes of pip).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bench import harness
from bench.peer import server

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"
# The shape bench/gateway.py writes (its run takes minutes, so the quick test feeds the plots a copy).
GATEWAY_MD = """# Gateway

## Fan-out to subscribers of one session

| subscribers | cogmesh events/s (aggregate) | raw grpc.aio events/s | ratio | cogmesh p99 lag ms | raw p99 lag ms |
|---|---|---|---|---|---|
| 1 | 19,315 | 8,171 | 2.36 | 5.80 | 1.91 |
| 100 | 250,482 | 10,296 | 24.3 | 91.61 | 218.40 |

## A new turn

| metric | p50 ms | p99 ms |
|---|---|---|
| time to first event | 6.03 | 13.81 |
"""


def run_bench(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COGMESH_BENCH_RESULTS"}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


# Three suites start one after the other (six processes each): under a minute on an idle 2-core machine,
# several when it is shared, so the bound is generous.
@pytest.mark.timeout(600)
def test_quick_run_writes_tables_plots_and_targets(tmp_path: Path) -> None:
    (tmp_path / "gateway.md").write_text(GATEWAY_MD)
    done = run_bench("bench", "--quick", "peer", "concurrency", "--out", str(tmp_path), timeout=560)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    for name in ("latency", "fanout", "concurrency"):
        assert (tmp_path / f"{name}.png").read_bytes().startswith(PNG), name
    concurrency = json.loads((tmp_path / "concurrency.json").read_text())["modes"]
    assert set(concurrency) == {"memory", "redis"}
    for mode, levels in concurrency.items():
        assert [level["sessions"] for level in levels] == [4, 12]
        for level in levels:
            assert level["errors"] == {} and level["ok"] == level["sessions"], (mode, level)
            assert level["subscriber_errors"] == 0, (mode, level)
            assert 0 < level["ttfe_p50_ms"] <= level["ttfe_p99_ms"]
        if mode == "redis":  # sessions really went to Redis
            assert levels[-1]["redis_session_kb"] > 0
    peer = json.loads((tmp_path / "peer.json").read_text())["systems"]
    for workload, expected_deltas in (("tokens", 34), ("tool", 2)):
        assert set(peer[workload]) == {"cogmesh", "in-process"}
        for figures in peer[workload].values():
            assert figures["events"] >= expected_deltas + 2  # status, deltas, usage, final
            assert 0 < figures["ttfe_p50_ms"] <= figures["full_p50_ms"]

    report = (tmp_path / "BENCHMARKS.md").read_text()
    assert "## Targets (gateway issue)" in report
    assert "| fan-out to 100 subscribers, aggregate | >= 200,000 events/s | 250,482 events/s | **met** |" in report
    assert "| fan-out p99 lag, 100 subscribers (burst) | < 50 ms | 91.61 ms | **not met** |" in report
    assert "![fan-out](fanout.png)" in report
    for section in ("## Gateway", "## cogmesh vs the LangGraph peer", "## Concurrency"):
        assert section in report


def test_unknown_bench_is_named() -> None:
    done = run_bench("bench", "nonsense", timeout=60)
    assert done.returncode == 2 and "unknown bench(es): nonsense" in done.stderr


def test_parse_tables_reads_rows_by_header() -> None:
    tables = harness.parse_tables(GATEWAY_MD)
    assert len(tables) == 2
    assert tables[0][1]["cogmesh events/s (aggregate)"] == "250,482"
    assert tables[1] == [{"metric": "time to first event", "p50 ms": "6.03", "p99 ms": "13.81"}]


def test_time_stream_times_first_event_first_token_and_end() -> None:
    async def events() -> AsyncIterator[str]:
        yield "status"
        await asyncio.sleep(0.05)
        yield "token"
        await asyncio.sleep(0.05)
        yield "final"

    timing = asyncio.run(harness.time_stream(events, lambda e: e == "token"))
    assert timing.events == 3
    # Generous margins: only the order and rough size matter on a noisy machine.
    assert timing.first_event < timing.first_token < timing.full
    assert timing.first_token >= 0.04 and timing.full >= 0.09


def test_percentile_of_nothing_is_nan_not_an_error() -> None:
    assert harness.percentile([], 99) != harness.percentile([], 99)
    assert harness.percentile([1.0, 2.0, 3.0, 4.0], 50) in (2.0, 3.0)


@pytest.mark.skipif(
    not server.venv_ready(), reason="the LangGraph peer's venv is absent (python -m bench.peer makes it)"
)
@pytest.mark.timeout(600)
def test_peer_runs_side_by_side(tmp_path: Path) -> None:
    env_out = {"COGMESH_BENCH_RESULTS": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.peer", "--turns", "3", "--rounds", "1", "--warmup", "1"],
        cwd=ROOT,
        env=os.environ | env_out,
        capture_output=True,
        text=True,
        timeout=560,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    peer = json.loads((tmp_path / "peer.json").read_text())["systems"]
    # The peer's fake model streams 100 tokens one per event, plus metadata and the last (empty) chunk.
    assert peer["tokens"]["langgraph"]["events"] >= 101
    assert peer["tokens"]["langgraph in-process"]["events"] == 101
    assert peer["tool"]["langgraph"]["turns"] == 3
    assert "cogmesh / langgraph" in (tmp_path / "peer.md").read_text()


@pytest.mark.timeout(300)
def test_memory_bench_writes_both_tables(tmp_path: Path) -> None:
    env = {**os.environ, "COGMESH_BENCH_RESULTS": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.memory", "--sizes", "400", "--queries", "5"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    latency, memory = harness.parse_tables((tmp_path / "memory.md").read_text())
    searches = {row["search"] for row in latency}
    assert "cogmesh BM25, Redis store" in searches and "raw bm25s get_scores + top 10 (baseline)" in searches
    redis_row = next(row for row in latency if row["search"] == "cogmesh BM25, Redis store")
    assert float(redis_row["p50 ms"]) > 0  # a round trip to Redis at least
    (row,) = memory
    assert row["memories"] == "400" and int(row["Redis B"].replace(",", "")) > 0
