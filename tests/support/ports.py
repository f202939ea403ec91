"""Free loopback ports for the servers a test starts (and may restart on the same address).

A port from bind(("127.0.0.1", 0)) lies in the kernel's ephemeral range, which every port-0
server and every outgoing connection on the machine also draws from: between the pick and the
server's bind, or while a killed server is restarted on it, another process may take it, and a
call meant for one service reaches another (a loaded run saw "Method not found!" from a foreign
server on the policy service's port). These picks come from below the ephemeral range, where
nothing is handed out behind a test's back, and each is checked bindable when picked.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOW = 20000


def _ceiling() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768), or 0 when unknown."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free right now, below the ephemeral range when there is room."""
    ceiling = _ceiling()
    held: list[socket.socket] = []
    try:
        while len(held) < n:
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", random.randrange(LOW, ceiling) if ceiling > LOW + 1000 else 0))
            except OSError:  # taken: pick again
                sock.close()
                continue
            held.append(sock)  # held until all are picked, so the ports are distinct
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def free_port() -> int:
    return free_ports(1)[0]
