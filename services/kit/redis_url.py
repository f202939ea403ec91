"""The forms COGMESH_REDIS_URL takes, read into a `RedisTarget` (services/kit/redis_pool.py connects to it).

- `redis://[user:password@]host:port/db` (or `rediss://`, `unix://`): one Redis, as redis-py reads it;
- `redis+sentinel://[user:password@]host:port[,host:port...]/service[/db]`: the primary that the
  Sentinels name `service`; the user/password are the primary's (`?sentinel_password=` for the
  Sentinels' own);
- `redis+cluster://[user:password@]host:port[,host:port...]`: a Redis Cluster, found from any of
  the listed nodes (redis.asyncio.RedisCluster: MOVED/ASK and failover are followed by the library).

`rediss+sentinel://` and `rediss+cluster://` use TLS. Query options (`?health_check_interval=15`,
...) are redis-py's, for every form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, urlencode

SCHEMES = (
    "redis://",
    "rediss://",
    "unix://",
    "redis+sentinel://",
    "rediss+sentinel://",
    "redis+cluster://",
    "rediss+cluster://",
)


@dataclass(frozen=True)
class RedisTarget:
    """What a COGMESH_REDIS_URL names: its form, its nodes, and a redis:// URL of its options."""

    kind: Literal["standalone", "sentinel", "cluster"]
    options_url: str  # credentials, TLS and query options, on the first node's address
    nodes: tuple[tuple[str, int], ...] = ()
    service: str = ""  # the Sentinel's name of the primary
    sentinel_password: str = ""

    def node_url(self, host: str, port: int) -> str:
        """The options URL pointed at one node (a cluster's or a Sentinel's)."""
        scheme, rest = self.options_url.split("://", 1)
        authority, _, tail = rest.partition("/")
        userinfo = authority.rpartition("@")[0]
        return f"{scheme}://{userinfo + '@' if userinfo else ''}{_join(host, port)}/{tail}"


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _split_host(text: str, url: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise ValueError(f"Redis URL {redact(url)}: {text!r} is not host:port")
    return host, int(port)


def parse_redis_url(url: str) -> RedisTarget:
    """Read a COGMESH_REDIS_URL; ValueError names what is wrong with it."""
    if not url.startswith(SCHEMES):
        raise ValueError(f"Redis URL {redact(url)} must start with one of {', '.join(SCHEMES)}")
    scheme, rest = url.split("://", 1)
    if "+" not in scheme:
        return RedisTarget("standalone", url)
    base, kind = scheme.split("+", 1)
    rest, _, query = rest.partition("?")
    authority, _, path = rest.partition("/")
    userinfo, _, hosts = authority.rpartition("@")
    nodes = tuple(_split_host(h, url) for h in hosts.split(",") if h)
    if not nodes:
        raise ValueError(f"Redis URL {redact(url)} names no host:port")
    options = dict(parse_qsl(query))
    sentinel_password = options.pop("sentinel_password", "")
    service, db = "", ""
    if kind == "sentinel":
        service, _, db = path.strip("/").partition("/")
        if not service:
            raise ValueError(f"Redis URL {redact(url)} must name the Sentinel service: redis+sentinel://host:port/name")
    elif path.strip("/") not in ("", "0"):
        raise ValueError(f"Redis URL {redact(url)}: a cluster has database 0 only")
    first = _join(*nodes[0])
    options_url = f"{base}://{userinfo + '@' if userinfo else ''}{first}/{db or 0}"
    if options:
        options_url += "?" + urlencode(options)
    return RedisTarget(kind, options_url, nodes, service, sentinel_password)  # type: ignore[arg-type]


def redact(url: str) -> str:
    """The URL without its password, for logs and errors."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    return scheme + sep + rest


def check_prefix(prefix: str) -> str:
    """A key prefix may not hold braces: they would move every key's hash tag."""
    if "{" in prefix or "}" in prefix:
        raise ValueError(f"redis key prefix {prefix!r} must not contain '{{' or '}}' (they pick Redis Cluster slots)")
    return prefix
