"""bench.hops at a tiny scale: all four pairings measured, the bare pair as the baseline.

No assertion on speed: a few hundred calls on a loaded machine say nothing, only that each figure is there.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.support.bench import run_bench_module


@pytest.mark.timeout(300)
def test_the_hop_bench_measures_every_pairing_against_the_bare_one(tmp_path: Path) -> None:
    run_bench_module("bench.hops", "--calls", "50", "--rounds", "1", results=tmp_path, timeout_s=240)
    rows = json.loads((tmp_path / "hops.json").read_text())["rows"]
    assert [(r["server"], r["client"]) for r in rows] == [
        ("bare", "bare"),
        ("bare", "kit"),
        ("kit", "bare"),
        ("kit", "kit"),
    ]
    for row in rows:
        for key in ("p50_us", "p99_us", "server_cpu_us", "client_cpu_us", "p50_x_bare", "cpu_x_bare"):
            assert math.isfinite(row[key]) and row[key] >= 0, (row, key)
        assert row["p50_us"] > 0 and row["p99_us"] >= row["p50_us"]
    assert rows[0]["p50_x_bare"] == 1 and rows[0]["cpu_x_bare"] == 1
    table = (tmp_path / "hops.md").read_text()
    assert table.count("\n| kit |") == 2 and table.count("\n| bare |") == 2
