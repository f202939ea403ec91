"""Where a service is: one server, a list of replicas, or a DNS name that resolves to all of them.

`COGMESH_<SERVICE>_ADDR` takes:

* `host:port`: one server, or a mesh's virtual address that balances each RPC itself;
* `ip:port,ip:port,...`: these replicas (IP addresses only: gRPC's `ipv4:`/`ipv6:` targets
  resolve no names; `cogmesh up` runs its runtime workers this way);
* `dns:///name:port`: every address the name resolves to (a Kubernetes headless Service,
  compose's replicas); gRPC resolves it again when a connection closes, which
  `max_connection_age_s` makes happen, so replicas that came up are found.

Internal clients spread their calls over all of them with gRPC's round_robin (clients.py).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

DNS_PREFIXES = ("dns:///", "dns:")


def _split(address: str) -> list[str]:
    return [part.strip() for part in address.split(",") if part.strip()]


def _host_port(entry: str) -> tuple[str, int]:
    host, sep, port = entry.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{entry!r} is not host:port")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
    return host, int(port)


def _ip_version(entry: str) -> int:
    host, _ = _host_port(entry)
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        ip = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        raise ValueError(
            f"{entry!r}: a list of replicas takes IP addresses (e.g. 127.0.0.1:50052,127.0.0.1:50062); "
            "for host names use one dns:///name:port that resolves to every replica"
        ) from None
    if ip.version == 6 and not bracketed:
        raise ValueError(f"{entry!r}: write an IPv6 address in brackets, e.g. [::1]:50052")
    return ip.version


def replicas(address: str) -> list[str]:
    """The entries of a list of replicas (IP addresses), or the one address as given; ValueError if malformed."""
    entries = _split(address)
    if not entries:
        raise ValueError("no address given")
    if len(entries) == 1:
        if not entries[0].startswith(DNS_PREFIXES) and ":" not in entries[0]:
            raise ValueError(f"{entries[0]!r} is not host:port")
        return entries
    versions = {_ip_version(entry) for entry in entries}
    if len(versions) > 1:
        raise ValueError(f"{address!r} mixes IPv4 and IPv6 addresses; list one family")
    return entries


def channel_target(address: str) -> str:
    """The gRPC target that reaches every replica `address` names."""
    entries = replicas(address)
    if len(entries) == 1:
        return entries[0]
    family = "ipv6" if entries[0].startswith("[") else "ipv4"
    return f"{family}:{','.join(entries)}"


def names_replicas(address: str) -> bool:
    """True when `address` stands for several servers (a list, or a DNS name with every replica's address)."""
    return len(replicas(address)) > 1 or address.strip().startswith(DNS_PREFIXES)


async def resolve(address: str) -> list[str]:
    """The `ip:port` of every replica `address` names now (a dns: name is looked up)."""
    entries = replicas(address)
    if len(entries) > 1 or not entries[0].startswith(DNS_PREFIXES):
        return entries
    name = entries[0].removeprefix("dns:")
    if name.startswith("//"):  # dns://[resolver]/name:port
        name = name[2:].partition("/")[2]
    host, port = _host_port(name)
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: list[str] = []
    for family, *_, sockaddr in infos:
        ip = str(sockaddr[0])
        entry = f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
        if entry not in found:
            found.append(entry)
    return found
