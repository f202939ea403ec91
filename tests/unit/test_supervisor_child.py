"""services.suite.child: a service process of `cogmesh up` dies with its supervisor (issue 31)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0  # generous: the check is that it goes, not how fast on a loaded machine
# A stand-in supervisor: starts http.server (blocks for ever) under the launcher, prints its pid, waits.
PARENT = (
    "import os, subprocess, sys; "
    "child = subprocess.Popen([sys.executable, '-m', 'services.suite.child', str(os.getpid()), "
    "'http.server', '0', '--bind', '127.0.0.1'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
    "print(child.pid, flush=True); sys.stdin.read()"
)


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"  # exited, not yet reaped by init


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process states from /proc")
def test_a_child_stops_when_its_supervisor_is_killed() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + WAIT_S
        # Empty while the launcher execs the service (seen on a loaded machine): wait for it to be there.
        while not (cmdline := Path(f"/proc/{child}/cmdline").read_bytes()) and not gone(child):
            assert time.monotonic() < deadline, "the launcher's command line stayed empty"
            time.sleep(0.05)
        assert b"http.server" in cmdline and not gone(child)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + WAIT_S
        while not gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(child), "the child outlived its supervisor"
    finally:
        parent.kill()
        parent.wait()
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_a_child_whose_supervisor_is_already_gone_does_not_start() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "services.suite.child", "1", "http.server", "0"],  # pid 1: not our parent
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert "supervisor (pid 1) is gone; not starting" in result.stderr
