"""One circuit breaker per tool server (seed 000's CircuitBreaker semantics).

CLOSED: calls pass; a success resets the failure count, and `failure_threshold`
consecutive failures open the circuit. OPEN: calls are refused at once until
`cooldown_s` has passed, then the breaker is HALF_OPEN. HALF_OPEN: one probe call
passes (others are refused while it runs); its success closes the circuit, its
failure opens it again for another cooldown.
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
        self._probing = False

    @property
    def state(self) -> CircuitState:
        if self._state is CircuitState.OPEN and self._clock() - self._opened_at >= self.cooldown_s:
            self._state = CircuitState.HALF_OPEN
            self._probing = False
        return self._state

    @property
    def failures(self) -> int:
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
        if state is CircuitState.HALF_OPEN and not self._probing:
            self._probing = True
            return True
        return False

    def record_success(self) -> None:
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._probing = False

    def record_failure(self) -> None:
        self._failures += 1
        if self._state is CircuitState.HALF_OPEN or self._failures >= self.failure_threshold:
            self._state = CircuitState.OPEN
            self._opened_at = self._clock()
            self._probing = False


class BreakerRegistry:
    """Get-or-create breakers by server id, all with the same settings."""

    def __init__(
        self, failure_threshold: int = 3, cooldown_s: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}
        self._settings: dict[str, tuple[int, float]] = {}

    def configure(self, server_id: str, failure_threshold: int, cooldown_s: float) -> None:
        """Settings for one server that differ from the registry's defaults."""
        self._settings[server_id] = (failure_threshold, cooldown_s)
        self._breakers.pop(server_id, None)

    def get(self, server_id: str) -> CircuitBreaker:
        breaker = self._breakers.get(server_id)
        if breaker is None:
            threshold, cooldown = self._settings.get(server_id, (self.failure_threshold, self.cooldown_s))
            breaker = CircuitBreaker(threshold, cooldown, self._clock)
            self._breakers[server_id] = breaker
        return breaker
