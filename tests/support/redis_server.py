"""Real Redis for tests, shared by every test that needs one.

Fixtures (registered for the whole suite by tests/conftest.py):

- `redis_url` (session): a reachable Redis: $COGMESH_TEST_REDIS_URL, else the one on
  127.0.0.1:6379, else a private `redis-server` started for the test session.
- `redis_prefix`: a unique key prefix for one test; its keys are deleted afterwards
  (never FLUSHALL/FLUSHDB: the Redis may be shared with other test runs).
- `private_redis`: a `RedisServer` of the test's own, on a free port, for fault tests
  that kill, pause or restart it.

`RedisServer` can also be used directly (e.g. `RedisServer(appendonly=True)` for data
that must survive `kill()` + `start()`). `admin_client(url)` is a synchronous client of
any COGMESH_REDIS_URL form; Sentinel and cluster setups are in redis_sentinel.py and
redis_cluster.py, and redis_topologies.py runs a test once per form (`any_redis`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import redis
from redis.cluster import ClusterNode
from redis.sentinel import Sentinel

from services.kit.redis_url import parse_redis_url
from tests.support.ports import free_port

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
DEFAULT_URL = "redis://127.0.0.1:6379/0"
START_TIMEOUT_S = 10.0


def ping(url: str, timeout_s: float = 0.5) -> bool:
    """True when a Redis answers PING at url."""
    client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False
    finally:
        client.close()


class RedisServer:
    """A redis-server process of our own: start, stop, kill, pause and restart it."""

    def __init__(
        self,
        port: int | None = None,
        directory: Path | None = None,
        appendonly: bool = False,
        extra_args: Sequence[str] = (),
        appendfsync: str = "always",
    ):
        self.port = port or free_port()
        self.extra_args = list(extra_args)  # e.g. cluster or replica settings
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="cogmesh-redis-")
            directory = Path(self._tmp.name)
        self.directory = directory
        self.appendonly, self.appendfsync = appendonly, appendfsync
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def start(self) -> RedisServer:
        if not Path(REDIS_SERVER).exists():
            pytest.skip(f"redis-server not found at {REDIS_SERVER}")
        args = [
            REDIS_SERVER,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.directory),
            "--save", "",
            "--daemonize", "no",
            "--loglevel", "warning",
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
        if self.appendonly:
            # With "always", every acknowledged write is on disk: a kill -9 loses nothing that was confirmed.
            args += ["--appendonly", "yes", "--appendfsync", self.appendfsync]
        else:
            args += ["--appendonly", "no"]
        args += self.extra_args
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ping(self.url, 0.2):
            if self.process.poll() is not None:
                log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {log}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server did not answer on port {self.port} within {START_TIMEOUT_S}s")
            time.sleep(0.02)
        return self

    def _signal(self, sig: signal.Signals) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def stop(self) -> None:
        """Graceful shutdown (SIGTERM)."""
        if self.process is not None and self.process.poll() is None:
            self._signal(signal.SIGCONT)  # a paused server cannot handle SIGTERM
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """Crash it (SIGKILL): connections drop, nothing is flushed."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def pause(self) -> None:
        """Freeze it (SIGSTOP): connections stay open but nothing answers, as with a hung server."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def restart(self, crash: bool = False) -> RedisServer:
        """Stop (or kill) and start again on the same port and directory."""
        if crash:
            self.kill()
        else:
            self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def unique_prefix(name: str = "test") -> str:
    """A fresh key prefix; the name is reduced to characters that mean nothing to SCAN's MATCH."""
    return f"cogmesh-test:{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}:{uuid.uuid4().hex[:12]}:"


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def admin_client(url: str) -> Any:
    """A synchronous client of any COGMESH_REDIS_URL form (standalone, Sentinel, cluster), for test setup and checks."""
    target = parse_redis_url(url)
    if target.kind == "cluster":
        nodes = [ClusterNode(host, port) for host, port in target.nodes]
        return redis.RedisCluster(startup_nodes=nodes, socket_timeout=5)
    if target.kind == "sentinel":
        return Sentinel(list(target.nodes), socket_timeout=5).master_for(target.service, socket_timeout=5)
    return redis.Redis.from_url(url, socket_timeout=5)


def delete_prefix(url: str, prefix: str) -> int:
    """Delete every key under prefix (SCAN + DEL, on every primary of a cluster: safe on a shared Redis)."""
    client = admin_client(url)
    deleted = 0
    try:
        batch: list[bytes] = []
        for key in client.scan_iter(match=f"{_glob_escape(prefix)}*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += int(client.delete(*batch))
                batch.clear()
        if batch:
            deleted += int(client.delete(*batch))
    except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.RedisClusterException):
        pass  # the server is gone (a fault test): nothing left to clean
    finally:
        client.close()
    return deleted


@contextlib.contextmanager
def reachable_redis(configured: str = "", default: str = DEFAULT_URL) -> Iterator[str]:
    """The configured Redis (which must answer), else `default` if it answers, else a private one."""
    if configured:
        if not ping(configured):
            pytest.fail(f"COGMESH_TEST_REDIS_URL={configured} does not answer")
        yield configured
    elif ping(default):
        yield default
    else:
        with RedisServer() as server:
            yield server.url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with reachable_redis(os.environ.get("COGMESH_TEST_REDIS_URL", "")) as url:
        yield url


@pytest.fixture
def redis_prefix(redis_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    prefix = unique_prefix(request.node.name[:40])
    yield prefix
    delete_prefix(redis_url, prefix)


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        with contextlib.suppress(Exception):
            server.close()


def redis_host_port(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    return parsed.hostname or "127.0.0.1", parsed.port or 6379
