"""Per-tenant admission at the gateway: a token bucket for calls and a cap on open streams."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from services.kit.errors import RateLimited


@dataclass
class TokenBucket:
    rate_per_s: float
    burst: int
    tokens: float
    updated: float

    def take(self, now: float) -> float:
        """Take one token; returns 0, or the seconds until one is available (nothing taken)."""
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate_per_s)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate_per_s


class TenantLimits:
    def __init__(self, rate_per_s: float, burst: int, max_streams: int, clock: Callable[[], float] = time.monotonic):
        self.rate_per_s, self.burst, self.max_streams, self._clock = rate_per_s, burst, max_streams, clock
        self._buckets: dict[str, TokenBucket] = {}
        self._streams: dict[str, int] = {}

    def admit(self, tenant: str) -> None:
        now = self._clock()
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = TokenBucket(self.rate_per_s, self.burst, float(self.burst), now)
        wait = bucket.take(now)
        if wait:
            raise RateLimited(
                f"tenant {tenant!r} exceeded {self.rate_per_s:g} requests/s (burst {self.burst}); retry in {wait:.3f}s",
                retry_after_s=wait,
                metadata={"tenant": tenant, "limit": "requests_per_second"},
            )

    @contextmanager
    def stream(self, tenant: str) -> Iterator[None]:
        """Hold one of the tenant's concurrent stream slots for the block's duration."""
        open_now = self._streams.get(tenant, 0)
        if open_now >= self.max_streams:
            raise RateLimited(
                f"tenant {tenant!r} already has {open_now} open streams (limit {self.max_streams}); "
                "close one or retry later",
                retry_after_s=1.0,
                metadata={"tenant": tenant, "limit": "concurrent_streams"},
            )
        self._streams[tenant] = open_now + 1
        try:
            yield
        finally:
            left = self._streams[tenant] - 1
            if left:
                self._streams[tenant] = left
            else:
                del self._streams[tenant]
