"""Fixtures every test folder may use: a real Redis (tests/support/redis_server.py)."""

from tests.support.redis_server import private_redis, redis_prefix, redis_url

__all__ = ["private_redis", "redis_prefix", "redis_url"]
