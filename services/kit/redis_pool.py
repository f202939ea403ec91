"""The one way every service opens Redis for commands: a bounded pool that queues a burst.

redis-py's default pool fails a call at once with "Too many connections" when all of
its connections are busy (100 since redis-py 8), which turned a burst of 1,000 turns
into UNAVAILABLE errors. This pool makes such a call wait for a free connection, up
to `POOL_WAIT_FACTOR` socket timeouts, so a burst queues while a Redis that is down
(refused at once) or hung (socket timeout) still fails every call in bounded time.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry

POOL_SIZE = 100  # connections per client; more calls at once wait for one
POOL_WAIT_FACTOR = 5  # a call waits up to this many socket timeouts for a free connection


def pooled_client(
    url: str, timeout_s: float, retry: Retry, pool_size: int = POOL_SIZE, **options: Any
) -> aioredis.Redis:
    """A client whose calls wait boundedly for a connection and fail within `timeout_s` once sent."""
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=pool_size,
        timeout=POOL_WAIT_FACTOR * timeout_s,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=retry,
        **options,
    )
    return aioredis.Redis.from_pool(pool)
