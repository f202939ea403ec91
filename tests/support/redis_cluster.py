"""A real Redis Cluster for tests: 3 primaries and 3 replicas on free loopback ports.

`RedisClusterServers().start()` starts six `redis-server --cluster-enabled yes`
processes in a temporary directory, joins them with `redis-cli --cluster create
... --cluster-replicas 1`, and returns once every node reports `cluster_state:ok`
and every replica is in sync. `url` is the form COGMESH_REDIS_URL takes for a
cluster (`redis+cluster://host:port,host:port,...`). Fault tests kill a primary
(`kill_primary_of`) and wait for its replica to take over (`wait_failover`).

The session fixture `redis_cluster_url` starts one cluster per test run, on first use.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.support.redis_server import RedisServer, free_port

REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
FORM_TIMEOUT_S = 60.0  # a busy two-core machine takes seconds to gossip six nodes into one cluster


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.05) -> float:
    """Poll `condition` until it holds; returns the seconds it took, fails naming `what` after `timeout_s`."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not after {timeout_s:g}s")
        time.sleep(every_s)
    return time.monotonic() - started


def _info(server: RedisServer, section: str) -> dict[str, str]:
    """CLUSTER INFO (section "cluster") or an INFO section of one node; empty when it does not answer."""
    client = redis.Redis(port=server.port, socket_timeout=1, socket_connect_timeout=1)
    try:
        raw = client.execute_command("CLUSTER INFO") if section == "cluster" else client.info(section)
        return {str(k): str(v) for k, v in raw.items()}
    except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
        return {}
    finally:
        client.close()


class RedisClusterServers:
    """Six redis-server processes in cluster mode: three primaries, one replica each."""

    def __init__(self, node_timeout_ms: int = 2000, appendfsync: str = "", nodes: int = 6, replicas: int = 1):
        self._tmp = tempfile.TemporaryDirectory(prefix="cogmesh-redis-cluster-")
        self.directory = Path(self._tmp.name)
        self.replicas = replicas
        extra = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        extra += ["--cluster-node-timeout", str(node_timeout_ms)]
        self.servers: list[RedisServer] = []
        for i in range(nodes):
            directory = self.directory / f"node{i}"
            directory.mkdir()
            # The bus port is picked too: the default (port + 10000) may be taken, or past 65535.
            bus = ["--cluster-port", str(free_port())]
            self.servers.append(
                RedisServer(
                    directory=directory,
                    appendonly=bool(appendfsync),
                    appendfsync=appendfsync or "always",
                    extra_args=extra + bus,
                )
            )

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{s.port}" for s in self.alive())

    def alive(self) -> list[RedisServer]:
        return [s for s in self.servers if s.process is not None and s.process.poll() is None]

    def start(self) -> RedisClusterServers:
        if not Path(REDIS_CLI).exists():
            pytest.skip(f"redis-cli not found at {REDIS_CLI}")
        for server in self.servers:
            server.start()
        addresses = [f"127.0.0.1:{s.port}" for s in self.servers]
        created = subprocess.run(
            [REDIS_CLI, "--cluster", "create", *addresses, "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            capture_output=True,
            timeout=FORM_TIMEOUT_S,
            check=False,
        )
        if created.returncode != 0:
            self.close()
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout.decode()[-2000:]}")
        try:
            self.wait_healthy()
        except TimeoutError:
            self.close()
            raise
        return self

    def healthy(self) -> bool:
        """Every live node sees the whole cluster OK, and every replica has synced with its primary."""
        for server in self.alive():
            cluster = _info(server, "cluster")
            if cluster.get("cluster_state") != "ok" or cluster.get("cluster_slots_ok") != "16384":
                return False
            replication = _info(server, "replication")
            if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
                return False
        return True

    def wait_healthy(self, timeout_s: float = FORM_TIMEOUT_S) -> float:
        return wait_until(self.healthy, timeout_s, "redis cluster healthy (cluster_state:ok, replicas in sync)")

    def role(self, server: RedisServer) -> str:
        return _info(server, "replication").get("role", "")

    def primaries(self) -> list[RedisServer]:
        return [s for s in self.alive() if self.role(s) == "master"]

    def primary_of(self, key: str) -> RedisServer:
        """The live server that currently serves `key`'s slot as primary."""
        for server in self.primaries():
            client = redis.Redis(port=server.port, socket_timeout=1)
            try:
                slot = int(client.execute_command("CLUSTER KEYSLOT", key))
                for start, end, primary, *_ in client.execute_command("CLUSTER SLOTS"):
                    if start <= slot <= end:
                        port = int(primary[1])
                        return next(s for s in self.servers if s.port == port)
            finally:
                client.close()
        raise LookupError(f"no live primary serves {key!r}")

    def wait_failover(self, killed: RedisServer, timeout_s: float = 30.0) -> float:
        """Wait until the cluster is whole again without `killed`: a replica took over its slots."""

        def recovered() -> bool:
            if not self.healthy():
                return False
            return all(_info(s, "cluster").get("cluster_state") == "ok" for s in self.alive())

        return wait_until(recovered, timeout_s, f"failover of the primary on port {killed.port}")

    def close(self) -> None:
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.close()
        self._tmp.cleanup()

    def __enter__(self) -> RedisClusterServers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """One 6-node cluster for the whole test run; tests share it under unique key prefixes."""
    with RedisClusterServers() as cluster:
        yield cluster.url
