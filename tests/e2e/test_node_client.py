"""The Node/TypeScript client's own tests (clients/node/test, node's built-in runner),
run from pytest so `make test` covers them. They start `cogmesh up` themselves, with
API keys, on free ports, and stop it with SIGTERM."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODE_CLIENT = ROOT / "clients" / "node"


@pytest.mark.timeout(600)  # the suite's own runner: 64 tests over four `cogmesh up`s, 2.5 min on a busy machine
def test_node_client_against_a_live_suite() -> None:
    npm = shutil.which("npm")
    assert npm is not None, "npm is required for the Node client's tests"
    assert (NODE_CLIENT / "node_modules" / ".bin" / "tsc").exists(), (
        "clients/node has no dependencies installed: run `npm ci --prefix clients/node`"
    )
    env = dict(os.environ) | {"COGMESH_BIN": str(Path(sys.executable).parent / "cogmesh")}
    result = subprocess.run(
        [npm, "test", "--silent"],
        cwd=NODE_CLIENT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-20_000:]
    # The runner's summary: every test ran and passed, none skipped.
    counts = {k: int(v) for k, v in re.findall(r"^# (tests|pass|fail|skipped|cancelled) (\d+)$", output, re.M)}
    assert counts.get("tests", 0) >= 20 and counts["pass"] == counts["tests"], counts
    assert counts["fail"] == counts["skipped"] == counts["cancelled"] == 0, counts


def test_node_generated_code_is_fresh() -> None:
    node = shutil.which("node")
    assert node is not None, "node is required for the Node client"
    assert (NODE_CLIENT / "node_modules" / ".bin" / "protoc-gen-es").exists(), (
        "clients/node has no dependencies installed: run `npm ci --prefix clients/node`"
    )
    result = subprocess.run(
        [node, "scripts/generate.mjs", "--check"], cwd=NODE_CLIENT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
