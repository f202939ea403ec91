"""Fixtures every test folder may use: a real Redis of each form (tests/support/redis_*.py)."""

from tests.support.redis_cluster import redis_cluster_url
from tests.support.redis_sentinel import redis_sentinel_url
from tests.support.redis_server import private_redis, redis_prefix, redis_url
from tests.support.redis_topologies import any_redis

__all__ = ["any_redis", "private_redis", "redis_cluster_url", "redis_prefix", "redis_sentinel_url", "redis_url"]
