"""bench.memory_pack at a tiny scale: the three kinds of turn run and are compared with the plain one."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.harness import parse_tables
from tests.support.bench import run_bench_module


@pytest.mark.timeout(600)
def test_the_memory_pack_bench_compares_pack_and_pinned_turns_with_plain_ones(tmp_path: Path) -> None:
    run_bench_module("bench.memory_pack", "--turns", "10", "--memories", "30", results=tmp_path)
    (rows,) = parse_tables((tmp_path / "memory_pack.md").read_text())
    assert [row["turn"] for row in rows] == ["plain", "pack", "pinned"]
    assert rows[0]["end vs plain"] == "1.00x" and rows[0]["CPU vs plain"] == "1.00x"
    for row in rows:
        assert row["turns"] == "10"
        assert float(row["first token p50 ms"]) > 0 and float(row["CPU ms/turn"]) > 0
