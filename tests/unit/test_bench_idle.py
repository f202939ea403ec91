"""bench.idle at a tiny scale: every process of both kinds of stores is measured, the figures are finite
and the report states the target. No assertion on the figures themselves: a loaded machine moves them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.support.bench import run_bench_module

PROCESSES = {"gateway", "sessions", "runtime-1", "runtime-2", "models", "policy", "context", "memory"}


@pytest.mark.timeout(600)
def test_the_idle_bench_measures_every_process_of_both_stores(tmp_path: Path) -> None:
    args = ["--seconds", "1", "--settle", "0", "--turns", "1", "--rounds", "1"]
    run_bench_module("bench.idle", *args, results=tmp_path)
    rounds = json.loads((tmp_path / "idle.json").read_text())["rounds"]
    assert [r["stores"] for r in rounds] == ["memory", "redis"]
    for r in rounds:
        expected = PROCESSES | ({"redis"} if r["stores"] == "redis" else set())
        assert set(r["processes"]) == expected, r["processes"].keys()
        for name, figures in r["processes"].items():
            assert all(math.isfinite(v) and v >= 0 for v in figures.values()), (name, figures)
        assert r["cpu_ms_per_s"] > 0 and r["wakeups_per_s"] > 0
        assert r["loop_ms_per_s"] <= r["cpu_ms_per_s"]
    assert rounds[1]["redis_commands_per_s"] >= 0
    report = (tmp_path / "idle.md").read_text()
    assert "memory stores:" in report and "redis stores:" in report
    assert "target 5" in report and "target 10" in report
