"""Sliding-window call limits, in memory or shared by every replica through Redis.

`reserve(key, limit, window_s, max_wait_s)` either takes a slot now, reserves the
earliest slot within `max_wait_s` (the caller waits for it), or refuses. Reserving
a future slot, instead of sleeping and retrying, keeps the limit exact under
concurrency: any `window_s` interval holds at most `limit` calls.
"""

from __future__ import annotations

import bisect
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from services.kit import lua
from services.kit.redis_pool import POOL_SIZE, pooled_client


@dataclass(frozen=True, slots=True)
class Reservation:
    granted: bool
    # Seconds until the reserved slot (0 = now); for a refusal, until the earliest slot.
    wait_s: float


class WindowStore(Protocol):
    async def reserve(self, key: str, limit: int, window_s: float, max_wait_s: float) -> Reservation: ...


def _slot(calls: list[float], now: float, limit: int, window_s: float) -> float:
    """Earliest time >= now at which one more call keeps every window within `limit`.

    `calls` are sorted and all newer than now - window_s (reservations may lie in the
    future). With fewer than `limit` calls any time works. Otherwise the new call
    must come after the limit-th newest call has left the window, and not before
    the newest one so that later windows cannot hold more than `limit` either.
    """
    if len(calls) < limit:
        return now
    return max(now, calls[-limit] + window_s, calls[-1])


class MemoryWindowStore:
    """One process's windows; enough for a single replica."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._calls: dict[str, list[float]] = {}

    async def reserve(self, key: str, limit: int, window_s: float, max_wait_s: float) -> Reservation:
        now = self._clock()
        calls = self._calls.setdefault(key, [])
        # Calls at or before now - window have left the window (it is half-open).
        del calls[: bisect.bisect_right(calls, now - window_s)]
        at = _slot(calls, now, limit, window_s)
        wait = at - now
        if wait > max_wait_s:
            return Reservation(False, wait)
        bisect.insort(calls, at)
        return Reservation(True, wait)


# The script: services/lib/policy/lua/reserve.lua (its opening comments say what its KEYS and ARGV hold).
_LUA = lua.load("services.lib.policy")
_RESERVE_LUA = _LUA["reserve"]


def redis_client(url: str, timeout_s: float, pool_size: int = POOL_SIZE) -> Any:
    """A client for rate windows: a down Redis must fail a check fast (one quick retry), not stall it."""
    return pooled_client(url, timeout_s, pool_size=pool_size)


class RedisWindowStore:
    """Windows in Redis sorted sets, updated atomically by one Lua script per call."""

    def __init__(self, redis: Any, prefix: str):
        self._redis = redis
        self._prefix = prefix
        self._script = redis.register_script(_RESERVE_LUA)

    async def reserve(self, key: str, limit: int, window_s: float, max_wait_s: float) -> Reservation:
        granted, wait_ms = await self._script(
            keys=[self._prefix + key],
            args=[limit, max(1, round(window_s * 1000)), round(min(max_wait_s, 1e9) * 1000), uuid.uuid4().hex],
        )
        return Reservation(bool(int(granted)), int(wait_ms) / 1000)
