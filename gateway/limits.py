"""Per-tenant admission at the gateway: a token bucket for calls and a cap on open streams.

A refusal is RESOURCE_EXHAUSTED (RATE_LIMITED) with a RetryInfo delay, and both its
message and its ErrorInfo metadata name the setting that raises the limit
(`setting`, and `burst_setting` for the bucket's size), so an operator who meets it
in a load test knows what to change. Callers refused together are told to come back
one token apart rather than all at the same instant, so clients that wait out the
delay (the Python SDK and the Node client do) get through instead of colliding again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from services.kit.errors import RateLimited

# The environment variables of services.kit.config.Settings behind each limit.
RATE_SETTING = "COGMESH_TENANT_RATE_PER_S"
BURST_SETTING = "COGMESH_TENANT_BURST"
STREAMS_SETTING = "COGMESH_TENANT_MAX_STREAMS"
STREAM_RETRY_S = 1.0
MAX_SPREAD_S = 5.0  # how far out refused callers are spread, at most: beyond, they come back together


@dataclass
class TokenBucket:
    rate_per_s: float
    burst: int
    tokens: float
    updated: float
    # When the last caller refused was told to come back: the next refused one is sent a token later.
    promised: float = float("-inf")

    def take(self, now: float) -> float:
        """Take one token; returns 0, or the seconds to wait before trying again (nothing taken)."""
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate_per_s)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        spacing = 1 / self.rate_per_s
        first = (1 - self.tokens) * spacing  # until one token is back
        # Behind those refused before, one token apart (within MAX_SPREAD_S).
        queued = min(self.promised + spacing - now, MAX_SPREAD_S)
        wait = max(first, queued)
        self.promised = now + wait
        return wait


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
                f"tenant {tenant!r} exceeded {self.rate_per_s:g} requests/s (burst {self.burst}); "
                f"retry in {wait:.3f}s, or raise {RATE_SETTING} / {BURST_SETTING} on the gateway",
                retry_after_s=wait,
                metadata={
                    "tenant": tenant,
                    "limit": "requests_per_second",
                    "setting": RATE_SETTING,
                    "value": f"{self.rate_per_s:g}",
                    "burst_setting": BURST_SETTING,
                    "burst": str(self.burst),
                },
            )

    @contextmanager
    def stream(self, tenant: str) -> Iterator[None]:
        """Hold one of the tenant's concurrent stream slots for the block's duration."""
        open_now = self._streams.get(tenant, 0)
        if open_now >= self.max_streams:
            raise RateLimited(
                f"tenant {tenant!r} already has {open_now} open streams (limit {self.max_streams}); "
                f"close one or retry later, or raise {STREAMS_SETTING} on the gateway",
                retry_after_s=STREAM_RETRY_S,
                metadata={
                    "tenant": tenant,
                    "limit": "concurrent_streams",
                    "setting": STREAMS_SETTING,
                    "value": str(self.max_streams),
                },
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
