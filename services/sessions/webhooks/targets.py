"""Where a webhook may point: an http(s) URL whose host resolves only to public addresses.

A webhook makes the suite send requests to a URL its caller chose, so a URL that reaches
the suite's own network (a metadata service at 169.254.169.254, Redis on 10.x, a sidecar
on loopback) would be server-side request forgery. The rule: every address the host
resolves to must be globally routable; private, loopback, link-local, multicast, reserved
and unspecified ones are refused, unless COGMESH_WEBHOOK_ALLOW_PRIVATE_TARGETS is on
(development, or receivers inside the cluster). The check runs when the webhook is created
and again before each attempt, and the attempt connects to the address that was checked,
so a DNS answer that changes in between (rebinding) cannot steer it elsewhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

MAX_URL = 2048


class Refused(Exception):
    """The target is not allowed; the message names the host and the address."""


class Unresolved(Refused):
    """The host did not resolve: refused at creation, retried at delivery (DNS may be back)."""


@dataclass(frozen=True)
class Target:
    """A checked URL and the address to connect to ("" : let the HTTP client resolve it)."""

    url: str
    host: str
    port: int
    scheme: str
    address: str = ""

    def pinned_url(self) -> str:
        """The URL with its host replaced by the checked address (the Host header keeps the name)."""
        if not self.address:
            return self.url
        parts = urlsplit(self.url)
        ip = f"[{self.address}]" if ":" in self.address else self.address
        return parts._replace(netloc=f"{ip}:{self.port}").geturl()

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if self.port == default else f"{name}:{self.port}"


def parse(url: str) -> tuple[SplitResult | None, str]:
    """The URL's parts, or None and why it is not a webhook URL."""
    if not url:
        return None, "is required"
    if len(url) > MAX_URL:
        return None, f"must be at most {MAX_URL} characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return None, f"is not a valid URL: {exc}"
    if parts.scheme not in ("http", "https"):
        return None, f"must be an http or https URL, not {parts.scheme or 'one without a scheme'!r}"
    if not parts.hostname:
        return None, "has no host"
    if parts.username or parts.password:
        return None, "must not carry user info (put credentials in the receiver's check of the signature)"
    if parts.fragment:
        return None, "must not have a fragment"
    return parts, ""


def refusal(address: str) -> str:
    """Why an address is refused, or "" when it is public."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for what, flag in (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("private", ip.is_private),
        ("multicast", ip.is_multicast),
        ("reserved", ip.is_reserved),
        ("unspecified", ip.is_unspecified),
        ("not globally routable", not ip.is_global),
    ):
        if flag:
            return f"a {what} address" if what != "not globally routable" else what
    return ""


async def resolve(host: str, port: int) -> list[str]:
    if _is_ip(host):
        return [host]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise Unresolved(f"host {host!r} does not resolve: {exc.strerror}") from exc
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def check(url: str, allow_private: bool) -> Target:
    """The URL as a Target to connect to; Refused names why not (bad URL: ValueError)."""
    parts, problem = parse(url)
    if parts is None:
        raise ValueError(problem)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = Target(url, host, port, parts.scheme)
    if allow_private:
        return target
    addresses = await resolve(host, port)
    for address in addresses:
        why = refusal(address)
        if why:
            raise Refused(
                f"host {host!r} resolves to {address}, {why}; webhooks reach public addresses only "
                "(COGMESH_WEBHOOK_ALLOW_PRIVATE_TARGETS allows others)"
            )
    return Target(url, host, port, parts.scheme, addresses[0])


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
