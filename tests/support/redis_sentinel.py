"""A real Redis Sentinel setup for tests: a primary, its replica and one Sentinel, on free loopback ports.

`url` is the form COGMESH_REDIS_URL takes for Sentinel
(`redis+sentinel://host:port/<service>`). The session fixture `redis_sentinel_url`
starts one per test run, on first use.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.redis_cluster import wait_until
from tests.support.redis_server import REDIS_SERVER, RedisServer, free_port, ping

SERVICE = "cogmesh"
START_TIMEOUT_S = 30.0


class RedisSentinelServers:
    def __init__(self, down_after_ms: int = 2000):
        self._tmp = tempfile.TemporaryDirectory(prefix="cogmesh-redis-sentinel-")
        self.directory = Path(self._tmp.name)
        (self.directory / "primary").mkdir()
        (self.directory / "replica").mkdir()
        self.primary = RedisServer(directory=self.directory / "primary")
        self.replica = RedisServer(
            directory=self.directory / "replica", extra_args=["--replicaof", "127.0.0.1", str(self.primary.port)]
        )
        self.port = free_port()
        self.down_after_ms = down_after_ms
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.port}/{SERVICE}"

    def _master(self) -> tuple[str, int] | None:
        client = redis.Redis(port=self.port, socket_timeout=1, socket_connect_timeout=1)
        try:
            found = client.execute_command("SENTINEL GET-MASTER-ADDR-BY-NAME", SERVICE)
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
            return None
        finally:
            client.close()
        return (found[0].decode(), int(found[1])) if found else None

    def _replica_synced(self) -> bool:
        client = redis.Redis(port=self.replica.port, socket_timeout=1)
        try:
            return str(client.info("replication").get("master_link_status")) == "up"
        except (redis.ConnectionError, redis.TimeoutError):
            return False
        finally:
            client.close()

    def start(self) -> RedisSentinelServers:
        self.primary.start()
        self.replica.start()
        config = self.directory / "sentinel.conf"  # Sentinel rewrites its file: one of its own
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.directory}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}\n"
            f"sentinel failover-timeout {SERVICE} 10000\n"
            f"logfile {self.directory / 'sentinel.log'}\n"
        )
        self.process = subprocess.Popen(
            [REDIS_SERVER, str(config), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_until(lambda: ping(f"redis://127.0.0.1:{self.port}/0"), START_TIMEOUT_S, "sentinel answers")
            wait_until(lambda: self._master() is not None, START_TIMEOUT_S, "sentinel knows the primary")
            wait_until(self._replica_synced, START_TIMEOUT_S, "replica in sync")
        except TimeoutError:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for server in (self.replica, self.primary):
            with contextlib.suppress(Exception):
                server.close()
        self._tmp.cleanup()

    def __enter__(self) -> RedisSentinelServers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(scope="session")
def redis_sentinel_url() -> Iterator[str]:
    """One Sentinel setup for the whole test run; tests share it under unique key prefixes."""
    with RedisSentinelServers() as sentinel:
        yield sentinel.url
