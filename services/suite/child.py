"""One service process of `cogmesh up` that dies with its supervisor.

    python -m services.suite.child SUPERVISOR_PID MODULE [ARGS...]

runs `python -m MODULE ARGS...` in this process. The supervisor starts each service in a
session of its own, so that Ctrl-C reaches only the supervisor, which then stops them in
order; but a supervisor that dies (kill -9, a crash) stops nothing. So this process asks
to be sent SIGTERM when its parent dies: on Linux the kernel does it (PR_SET_PDEATHSIG);
elsewhere a thread watches the parent pid. SIGTERM, not SIGKILL: a service shuts down
cleanly on it (the runtime hands its turns over).
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 0.5


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_INTERVAL_S)
    os.kill(os.getpid(), signal.SIGTERM)


def die_with_parent(parent: int) -> None:
    """SIGTERM to this process once `parent` is no longer its parent; at once if it is already gone."""
    armed = False
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) == 0
    if os.getppid() != parent:  # died before the signal was armed: nobody would send it
        raise SystemExit(f"supervisor (pid {parent}) is gone; not starting")
    if not armed:
        threading.Thread(target=_watch_parent, args=(parent,), name="parent-watch", daemon=True).start()


def main() -> None:
    if len(sys.argv) < 3 or not sys.argv[1].isdigit():
        raise SystemExit("usage: python -m services.suite.child SUPERVISOR_PID MODULE [ARGS...]")
    die_with_parent(int(sys.argv[1]))
    module = sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
