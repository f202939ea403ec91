"""The three forms of COGMESH_REDIS_URL, as fixtures: a test that takes `any_redis` runs once per form.

- standalone: the shared Redis of `redis_url` (tests/support/redis_server.py);
- sentinel: a primary, its replica and a Sentinel (tests/support/redis_sentinel.py);
- cluster: six nodes, three primaries with a replica each (tests/support/redis_cluster.py).

Sentinel and cluster start once per test run, the first time a test needs them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.redis_server import delete_prefix, unique_prefix

REDIS_TOPOLOGIES = ("standalone", "sentinel", "cluster")
_URL_FIXTURES = {"standalone": "redis_url", "sentinel": "redis_sentinel_url", "cluster": "redis_cluster_url"}


@dataclass(frozen=True)
class RedisUnderTest:
    topology: str
    url: str
    prefix: str  # unique to the test; its keys are deleted afterwards


def topology_url(request: pytest.FixtureRequest, topology: str) -> str:
    """The URL of a Redis of that form (starting it on first use)."""
    url: str = request.getfixturevalue(_URL_FIXTURES[topology])
    return url


@contextlib.contextmanager
def redis_for(request: pytest.FixtureRequest, topology: str) -> Iterator[RedisUnderTest]:
    """A Redis of that form and a key prefix of the test's own, cleaned up afterwards."""
    url = topology_url(request, topology)
    prefix = unique_prefix(request.node.name[:40])
    try:
        yield RedisUnderTest(topology, url, prefix)
    finally:
        delete_prefix(url, prefix)


@pytest.fixture(params=REDIS_TOPOLOGIES)
def any_redis(request: pytest.FixtureRequest) -> Iterator[RedisUnderTest]:
    with redis_for(request, request.param) as redis:
        yield redis
