"""The soak in miniature (bench/soak.py): the suite as processes, 20 sessions x 3 turns, no errors.

The full run (1,000 x 10, `python -m bench.soak`) also checks that RSS stays flat; this
one is too short for a steady state, so it only checks that RSS was sampled.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOAK = [sys.executable, "-m", "bench.soak"]


@pytest.mark.timeout(300)
def test_quick_soak_has_no_errors(tmp_path: Path) -> None:
    out = tmp_path / "soak.md"
    run = subprocess.run(
        [*SOAK, "--sessions", "20", "--turns", "3", "--concurrency", "8", "--no-flat-check", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = out.read_text()
    assert "| 20 | 60 | 0 | 0 |" in report, report  # sessions, turns, errors, sessions left
    rss = report.split("## RSS")[1]
    for service in ("models", "sessions", "context", "policy", "runtime", "gateway"):
        # One row per process: the runtime's workers are runtime-1, runtime-2, ...
        rows = [line for line in rss.splitlines() if line.startswith((f"| {service} |", f"| {service}-"))]
        assert rows, f"no RSS row for {service}"
        for row in rows:
            assert all(float(cell) > 0 for cell in row.split("|")[2:6]), row  # start, warm-up, end, peak MiB
