"""Who listens on a TCP port: so `cogmesh up` can refuse ports another process holds, naming it,
and count as its service only a process it started itself.

Listening sockets come from /proc/net/tcp{,6} and their owners from /proc/<pid>/fd (Linux). Elsewhere,
or for another user's processes, the owner is unknown and the functions say so (None).
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

PROC = Path("/proc")
LISTEN = "0A"  # TCP state in /proc/net/tcp


def split_address(address: str) -> tuple[str, int]:
    """host:port, or [v6]:port, as (host, port)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def bindable(address: str) -> bool:
    """Whether a server could listen on `address` now (SO_REUSEADDR, as gRPC and uvicorn bind)."""
    host, port = split_address(address)
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return True  # not ours to judge: the service names the bad address itself
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(sockaddr)
            except OSError:
                return False
    return True


def _listening_inodes(port: int) -> set[str] | None:
    inodes: set[str] = set()
    found = False
    for table in ("tcp", "tcp6"):
        try:
            lines = (PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        found = True
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rpartition(":")[2], 16) == port:
                inodes.add(fields[9])
    return inodes if found else None


def _holds(pid: int, sockets: set[str]) -> bool | None:
    try:
        fds = os.listdir(PROC / str(pid) / "fd")
    except OSError:
        return None  # gone, or another user's
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(PROC / str(pid) / "fd" / fd) in sockets:
                return True
    return False


def listens(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds a socket listening on `port` (False if it is gone or not ours to
    inspect); None when this cannot be told at all (no /proc)."""
    inodes = _listening_inodes(port)
    if inodes is None:
        return None
    return bool(_holds(pid, {f"socket:[{inode}]" for inode in inodes}))


def describe(pid: int) -> str:
    try:
        argv = (PROC / str(pid) / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return f"pid {pid}"
    command = " ".join(part.decode(errors="replace") for part in argv)
    return f"pid {pid} ({command[:160]})" if command else f"pid {pid}"


def holder(port: int) -> str:
    """The process listening on `port`, as "pid N (its command line)", or what is known of it."""
    inodes = _listening_inodes(port)
    if inodes is None:
        return "another process"
    if not inodes:
        return "another socket (none listening: a connection in use)"
    sockets = {f"socket:[{inode}]" for inode in inodes}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and _holds(int(entry.name), sockets):
            return describe(int(entry.name))
    return "a process this user cannot inspect"
