"""Faults of `cogmesh up` itself: its output pipe closed, its terminal gone, the supervisor killed.

`cogmesh up | tee log` and Ctrl-C: the terminal sends SIGINT to both, tee dies first and
the supervisor's next line has nowhere to go. Closing the terminal: SIGHUP, and a tty that
answers every write with EIO. kill -9 of the supervisor: nothing of it runs any more. In
every case each service process must be gone and each port free afterwards (issue 31).
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SERVICES = ["models", "policy", "context", "sessions", "memory", "runtime", "gateway", "web"]
STARTUP_S = 120.0  # nine processes on two shared cores
STOP_S = 60.0  # generous: a loaded machine must not fail a supervisor that does stop everything


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a dead child not yet reaped still answers kill 0)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 0)
            return True
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the services bind
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    pids: dict[str, int]  # every service process, by the name the supervisor reported
    ports: list[int]
    output: Callable[[], None]  # closes the test's end of the supervisor's stdout


def read_until_ready(read_line: Callable[[], str]) -> dict[str, int]:
    pids: dict[str, int] = {}
    seen: list[str] = []
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        line = read_line()
        if not line:
            raise AssertionError(f"cogmesh up exited before it was ready; output: {seen}")
        seen.append(line)
        item = json.loads(line)
        match = re.match(r"([\w-]+)\s+SERVING\s+\S+\s+\(pid (\d+)\)", item.get("text", ""))
        if match:
            pids[match.group(1)] = int(match.group(2))
        if item.get("event") == "ready":
            return pids
    raise AssertionError(f"cogmesh up not ready after {STARTUP_S:g}s; output: {seen}")


def suite_env(tmp: Path) -> tuple[dict[str, str], list[int]]:
    ports = free_ports(len(SERVICES) + 1)
    env = dict(os.environ)
    env |= {f"COGMESH_{name.upper()}_ADDR": f"127.0.0.1:{port}" for name, port in zip(SERVICES, ports, strict=False)}
    env["COGMESH_RUNTIME_ADDR"] += f",127.0.0.1:{ports[-1]}"  # two workers, as on a two-core machine
    return env, ports


@contextlib.contextmanager
def cogmesh_up(tmp: Path, on_tty: bool) -> Iterator[Running]:
    """`cogmesh up --json` with its stdout into a pipe, or a pseudo-terminal, read by the test until ready.
    Whatever the test finds, no service process outlives it."""
    env, ports = suite_env(tmp)
    argv = [str(BIN / "cogmesh"), "up", "--json", "--log-dir", str(tmp / "logs")]
    if on_tty:
        controller, terminal = pty.openpty()
        process = subprocess.Popen(argv, stdout=terminal, env=env, cwd=ROOT)
        os.close(terminal)
        reader = os.fdopen(controller, "r", errors="replace")
        close = reader.close
    else:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, cwd=ROOT, text=True)
        assert process.stdout is not None
        reader = process.stdout
        close = process.stdout.close
    pids: dict[str, int] = {}
    try:
        pids = read_until_ready(lambda: reader.readline().strip())
        assert len(pids) == 9, pids
        yield Running(process, pids, ports, close)
    finally:
        with contextlib.suppress(OSError):
            close()
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


FAULTS = {
    # name: (stdout on a pseudo-terminal, signal to the supervisor once its reader is gone)
    "pipe-closed supervisor, Ctrl-C": (False, signal.SIGINT),
    "pipe-closed supervisor, SIGTERM": (False, signal.SIGTERM),
    "terminal closed (EIO and SIGHUP)": (True, signal.SIGHUP),
    "supervisor killed (SIGKILL)": (False, signal.SIGKILL),
}


@pytest.mark.timeout(STARTUP_S + 2 * STOP_S + 60)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_no_service_outlives_the_supervisor(fault: str, tmp_path: Path) -> None:
    on_tty, sig = FAULTS[fault]
    with cogmesh_up(tmp_path, on_tty) as up:
        up.output()  # the reader is gone: tee killed by Ctrl-C, or the terminal closed
        sent = time.monotonic()
        up.process.send_signal(sig)
        try:
            up.process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{fault}: the supervisor did not exit within {STOP_S:g}s")
        left_at_exit = sorted(name for name, pid in up.pids.items() if alive(pid))
        if sig != signal.SIGKILL:  # a supervisor that could run stops its services before it exits
            assert left_at_exit == [], f"{fault}: still running when the supervisor exited: {left_at_exit}"
        deadline = time.monotonic() + STOP_S
        while time.monotonic() < deadline:
            running = sorted(name for name, pid in up.pids.items() if alive(pid))
            held = [port for port in up.ports if not port_free(port)]
            if not running and not held:
                break
            time.sleep(0.1)
        assert not running, f"{fault}: services left running: {running}"
        assert not held, f"{fault}: ports still held: {held}"
        print(
            f"{fault}: {len(left_at_exit)} of {len(up.pids)} service processes running when the supervisor "
            f"exited (code {up.process.returncode}); all gone and every port free {time.monotonic() - sent:.1f}s "
            "after the signal"
        )
