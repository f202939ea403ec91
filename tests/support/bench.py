"""Running one bench module the way `python -m bench` does, its results in a folder of the test's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench_module(module: str, *args: str, results: Path, timeout_s: float = 560) -> None:
    """`python -m <module> <args>` writing into `results`; fails with its output's tail if it fails."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=os.environ | {"COGMESH_BENCH_RESULTS": str(results)},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
