"""One circuit breaker per tool server: the shared breaker (services/lib/policy/resilience.py).

The runtime's part is the registry: breakers by server id, with the tool servers
file's defaults and a server's own settings where it has them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from services.lib.policy.resilience import CircuitBreaker, CircuitBreakerRegistry, CircuitState

__all__ = ["BreakerRegistry", "CircuitBreaker", "CircuitState"]


class BreakerRegistry(CircuitBreakerRegistry):
    """Get-or-create breakers by server id; `configure` gives one server its own settings."""

    def __init__(
        self, failure_threshold: int = 3, cooldown_s: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(failure_threshold, cooldown_s, clock)
        self._settings: dict[str, tuple[int, float]] = {}

    def configure(self, server_id: str, failure_threshold: int, cooldown_s: float) -> None:
        """Settings for one server that differ from the registry's defaults."""
        self._settings[server_id] = (failure_threshold, cooldown_s)
        self._breakers.pop(server_id, None)

    def _new(self, key: str) -> CircuitBreaker:
        threshold, cooldown = self._settings.get(key, (self.failure_threshold, self.cooldown_s))
        return CircuitBreaker(threshold, cooldown, self._clock)
