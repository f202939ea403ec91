"""bench.journal at a tiny scale: the suite with and without its steps recorded, on both stores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bench import run_bench_module


@pytest.mark.timeout(600)
def test_the_journal_bench_compares_the_same_turns_with_and_without_step_records(tmp_path: Path) -> None:
    run_bench_module("bench.journal", "--turns", "3", "--rounds", "1", "--concurrency", "1", results=tmp_path)
    rows = json.loads((tmp_path / "journal.json").read_text())["rows"]
    assert sorted((r["store"], r["journal"]) for r in rows) == [
        ("memory", False),
        ("memory", True),
        ("redis", False),
        ("redis", True),
    ]
    for row in rows:
        # COGMESH_JOURNAL_STEPS=false keeps the request alone; by default every step is recorded.
        expected = ["request", "start", "model", "decide", "tool", "step"] if row["journal"] else ["request"]
        assert row["records"] == expected, row
        assert "runtime" in row["cpu_ms"] and "sessions" in row["cpu_ms"]
        assert ("redis" in row["cpu_ms"]) == (row["store"] == "redis")
    report = (tmp_path / "journal.md").read_text()
    assert "| store | at once | CPU ms/turn, journal |" in report
