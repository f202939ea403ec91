"""Every Python SDK example runs against a real `cogmesh up` process tree and prints what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_cogmesh_up import Up, up  # noqa: F401 - the `cogmesh up` fixture

EXAMPLES = Path(__file__).resolve().parents[2] / "clients" / "python" / "examples"


def example(up: Up, name: str, *args: str) -> str:  # noqa: F811
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--target", up.addresses["gateway"], *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=up.env,
        cwd=EXAMPLES,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_example_is_tested() -> None:
    assert {p.name for p in EXAMPLES.glob("*.py")} == {
        "quickstart.py",
        "approvals.py",
        "client_tools.py",
        "resume.py",
    }


def test_quickstart(up: Up) -> None:  # noqa: F811
    out = example(up, "quickstart.py")
    assert "calls calculator" in out and "final" in out
    assert "answer: (2 + 3) * 4 = 20." in out


@pytest.mark.parametrize(
    ("decision", "answer"),
    [("approve", "12 * 12 = 144."), ("edit", "12 * 12 = 42."), ("reject", 'rejected this call: a human said no".')],
)
def test_approvals(up: Up, decision: str, answer: str) -> None:  # noqa: F811
    out = example(up, "approvals.py", "--decision", decision)
    assert "paused: True" in out and "approval needed: calculator {'expression': '12 * 12'}" in out
    assert answer in out
    assert "question: Which unit? -> centimetres" in out
    assert "answer: The ask_user tool returned: centimetres" in out


def test_client_tools(up: Up) -> None:  # noqa: F811
    out = example(up, "client_tools.py")
    assert f"-> The machine_info tool returned: {sys.version_info.major}.{sys.version_info.minor}." in out
    assert "-> The read_note tool returned: buy milk and bread" in out
    assert '-> The read_note tool failed: "LookupError: no note called diary".' in out


def test_resume(up: Up) -> None:  # noqa: F811
    out = example(up, "resume.py")
    assert "first reader  seq  5" in out and "second reader seq  6" in out
    assert "resumed after seq 5:" in out and "none missed" in out
