"""One cluster of real service processes shared by the reliability tests.

Redis is a private `redis-server` with `appendonly yes` + `appendfsync always`, so a
test may kill and restart it. Four links go through TCP proxies (pass-through until a
test injects a fault): gateway -> sessions, gateway -> runtime, runtime -> sessions
and runtime -> policy. The `slow` agent has an MCP tool that sleeps, which gives a
turn a middle to kill things in.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.lib.agents import DEFAULT_AGENTS_DIR
from tests.reliability.cluster import ROOT, Cluster, base_env
from tests.support.redis_server import RedisServer
from tests.support.tcp_proxy import ProxyHost, TcpProxy

FULL = os.environ.get("COGMESH_RELIABILITY_FULL", "") not in ("", "0", "false")
SLOW_AGENT = """
name: slow
prompts_dir: default
model: local
tools: [calculator, mcp__slow__sleep, mcp__slow__blob]
default_role: assistant
"""
TOOLS = f"""
servers:
  slow:
    transport: stdio
    command: {sys.executable}
    args: [-m, tests.fakes.mcp_server, stdio]
    cwd: {ROOT}
    connect_timeout_s: 60
"""
PROXIED = [("gateway", "sessions"), ("gateway", "runtime"), ("runtime", "sessions"), ("runtime", "policy")]
SETTLE_S = 1.5  # longer than the kit's max reconnect backoff (1 s)
CALL_TIMEOUT_S = 3.0  # COGMESH_CALL_TIMEOUT_S of every service: how soon a hung dependency shows


@dataclass
class Suite:
    cluster: Cluster
    redis: RedisServer
    proxies: dict[tuple[str, str], TcpProxy]
    host: ProxyHost

    def proxy(self, caller: str, dependency: str) -> TcpProxy:
        return self.proxies[(caller, dependency)]


def slow_agent_env(tmp: Path, redis: RedisServer, prefix: str, **settings: str) -> dict[str, str]:
    """The environment of a fault-test cluster on `redis` whose agents include `slow`."""
    agents = tmp / "agents"
    shutil.copytree(DEFAULT_AGENTS_DIR, agents)
    (agents / "slow.yaml").write_text(SLOW_AGENT)
    (tmp / "tools.yaml").write_text(TOOLS)
    return base_env(redis.url, prefix, agents_dir=str(agents), tool_servers_file=str(tmp / "tools.yaml"), **settings)


@pytest.fixture(scope="session")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suite]:
    tmp = tmp_path_factory.mktemp("reliability")
    redis = RedisServer(directory=tmp, appendonly=True).start()
    host = ProxyHost()
    env = slow_agent_env(tmp, redis, "cogmesh-reliability:", call_timeout_s=str(CALL_TIMEOUT_S))
    cluster = Cluster(env, tmp)
    try:
        proxies = {}
        for caller, dependency in PROXIED:
            proxies[(caller, dependency)] = host.add(cluster.addresses[dependency])
            cluster.routes[(caller, dependency)] = proxies[(caller, dependency)].address
        cluster.start_all()
        yield Suite(cluster, redis, proxies, host)
    finally:
        cluster.stop()
        host.close()
        redis.close()


@pytest.fixture
def healthy(suite: Suite) -> Iterator[Suite]:
    """The suite, whole again after the test whatever it broke."""
    yield suite
    suite.host.heal_all()
    suite.redis.resume()  # a no-op unless a test paused it
    if suite.redis.process is None or suite.redis.process.poll() is not None:
        suite.redis.start()
    restarted = [name for name in suite.cluster.processes if not suite.cluster.alive(name)]
    suite.cluster.ensure_all()
    if restarted:
        time.sleep(SETTLE_S)  # let the other services' channels finish backing off (finding 3)
