"""Circuit breakers: stop calling what keeps failing, probe again after a cooldown.

CLOSED (normal) -> OPEN after `failure_threshold` consecutive failures -> HALF_OPEN
once `cooldown_seconds` passed (one probe call allowed) -> CLOSED on its success,
OPEN again on its failure.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable


class CircuitState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    def __init__(
        self,
        failure_threshold: int = 3,
        cooldown_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.failure_threshold = failure_threshold
        self.cooldown_seconds = cooldown_seconds
        self._clock = clock
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probe_at: float | None = None

    @property
    def state(self) -> CircuitState:
        if self._state is CircuitState.OPEN and self._clock() - self._opened_at >= self.cooldown_seconds:
            self._state = CircuitState.HALF_OPEN
            self._probe_at = None
        return self._state

    @property
    def failures(self) -> int:
        return self._failures

    def retry_in(self) -> float:
        """Seconds until an open breaker lets a probe through."""
        return max(0.0, self._opened_at + self.cooldown_seconds - self._clock())

    def allow_request(self) -> bool:
        state = self.state
        if state is CircuitState.CLOSED:
            return True
        if state is CircuitState.OPEN:
            return False
        # HALF_OPEN: one probe at a time. A probe whose outcome never arrives (its caller
        # died) stops blocking after another cooldown.
        now = self._clock()
        if self._probe_at is None or now - self._probe_at >= self.cooldown_seconds:
            self._probe_at = now
            return True
        return False

    def record_success(self) -> None:
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._probe_at = None

    def record_failure(self) -> None:
        if self.state is CircuitState.HALF_OPEN:
            self._open()
            return
        self._failures += 1
        if self._failures >= self.failure_threshold:
            self._open()

    def _open(self) -> None:
        self._state = CircuitState.OPEN
        self._opened_at = self._clock()
        self._probe_at = None


class CircuitBreakerRegistry:
    """One breaker per server (or tool) id, created on first use with shared settings."""

    def __init__(
        self,
        failure_threshold: int = 3,
        cooldown_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.failure_threshold = failure_threshold
        self.cooldown_seconds = cooldown_seconds
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}

    def items(self) -> list[tuple[str, CircuitBreaker]]:
        """Every breaker made so far, by server id (a copy: safe to read while calls go on)."""
        return list(self._breakers.items())

    def get(self, server_id: str) -> CircuitBreaker:
        breaker = self._breakers.get(server_id)
        if breaker is None:
            breaker = CircuitBreaker(self.failure_threshold, self.cooldown_seconds, self._clock)
            self._breakers[server_id] = breaker
        return breaker
