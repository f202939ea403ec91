"""Circuit breakers: stop calling what keeps failing, probe again after a cooldown.

The one breaker of the suite: the policy's CircuitBreaker interceptor counts tools with
it, the runtime counts tool servers with it (services/runtime/tools/breaker.py), and
/metrics reads `state.value` (services/kit/metrics.py CIRCUIT_STATES).

CLOSED: calls pass; a success resets the failure count, and `failure_threshold`
consecutive failures open the circuit. OPEN: calls are refused at once until
`cooldown_s` has passed, then the breaker is HALF_OPEN. HALF_OPEN: one probe call
passes (others are refused while it runs); its success closes the circuit, its
failure opens it again for another cooldown. A probe whose outcome never arrives (its
caller died) stops blocking after another cooldown.
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
        self, failure_threshold: int = 3, cooldown_s: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, got {failure_threshold}")
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probe_at: float | None = None

    @property
    def state(self) -> CircuitState:
        if self._state is CircuitState.OPEN and self._clock() - self._opened_at >= self.cooldown_s:
            self._state = CircuitState.HALF_OPEN
            self._probe_at = None
        return self._state

    @property
    def failures(self) -> int:
        """Consecutive failures so far (reset by a success)."""
        return self._failures

    def retry_in_s(self) -> float:
        """Seconds until an open circuit lets a probe through (0 when not open)."""
        if self.state is not CircuitState.OPEN:
            return 0.0
        return max(0.0, self.cooldown_s - (self._clock() - self._opened_at))

    def allow_request(self) -> bool:
        state = self.state
        if state is CircuitState.CLOSED:
            return True
        if state is CircuitState.OPEN:
            return False
        now = self._clock()
        if self._probe_at is None or now - self._probe_at >= self.cooldown_s:
            self._probe_at = now
            return True
        return False

    def record_success(self) -> None:
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._probe_at = None

    def record_failure(self) -> None:
        self._failures += 1
        if self.state is CircuitState.HALF_OPEN or self._failures >= self.failure_threshold:
            self._state = CircuitState.OPEN
            self._opened_at = self._clock()
            self._probe_at = None


class CircuitBreakerRegistry:
    """One breaker per key (a tool, a tool server), made on first use with the registry's settings."""

    def __init__(
        self, failure_threshold: int = 3, cooldown_s: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}

    def items(self) -> list[tuple[str, CircuitBreaker]]:
        """Every breaker made so far, by key (a copy: safe to read while calls go on)."""
        return list(self._breakers.items())

    def get(self, key: str) -> CircuitBreaker:
        breaker = self._breakers.get(key)
        if breaker is None:
            breaker = self._breakers[key] = self._new(key)
        return breaker

    def _new(self, key: str) -> CircuitBreaker:
        return CircuitBreaker(self.failure_threshold, self.cooldown_s, self._clock)
