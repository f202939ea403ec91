"""Admission control: whether this runtime worker takes a new turn now.

A worker keeps the leases of the turns it runs alive by renewing them every
`turn_lease_renew_s`; a lease lapses when a renewal is later than its slack (the lease
TTL minus the renewal interval: 4 s with the defaults), and another worker then claims the
turn. On a saturated machine renewals run late because the worker's event loop is busy
(every turn's work is queued before the renewal's timer) or the sessions store answers
slowly. So the worker measures both where it matters, and refuses new turns (StartTurn
answers RESOURCE_EXHAUSTED with RetryInfo; the gateway tries another worker) while:

- its lease renewals run later than half that slack (`late_limit_s`: 2 s with the
  defaults), the renewal under way included (it may not have been sent yet); or
- its event loop lags by more than the same limit (a periodic timer's drift: a lag
  delays every renewal by at least as much); or
- it runs `max_turns` turns already (COGMESH_RUNTIME_MAX_TURNS; 0: no limit).

A refusal lasts until the worker keeps time again: until a renewal is answered on time
(a burst of new turns that made one renewal late costs one renewal interval of refusals,
not more), and until the loop's lag has stayed under the limit for one renewal interval. A
worker with no turns (no renewals, no probe) starts afresh. Nothing here reads a clock but
the one it is given, so the decisions are tested with a fake one.

The same measurements size the holder's grace: while the worker lags, it renews its
leases for longer (`grace_s`: twice the largest lag of the last two renewal intervals, at
most half the lease TTL), so a lease lapses, and can be claimed, only once the worker is
later than its slack and that grace together (docs/durability.md, "Late renewals").
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

LATE_SHARE = 0.5  # of a lease's slack: how late renewals (or the loop) may run before new turns are refused
GRACE_FACTOR = 2.0  # a lagging holder renews for its lease TTL plus this many times its recent lag...
GRACE_SHARE = 0.5  # ...up to this share of the TTL more


@dataclass(frozen=True)
class Refusal:
    """Why a new turn is refused now, and when to ask again."""

    cause: str  # lease_renewals_late | event_loop_lag | max_turns
    message: str
    retry_after_s: float
    measured_s: float = 0.0
    limit_s: float = 0.0


class Admission:
    """This worker's health where it matters to its leases, and the decision it makes from it."""

    def __init__(
        self,
        lease_ttl_s: float,
        renew_s: float,
        max_turns: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lease_ttl_s, self.renew_s, self.max_turns, self.clock = lease_ttl_s, renew_s, max_turns, clock
        self.late_limit_s = (lease_ttl_s - renew_s) * LATE_SHARE
        self.window_s = 2 * renew_s  # what the grace remembers
        self._due: float | None = None  # when the next renewal should be done; None while nothing is renewed
        self._last_late = 0.0  # how late the last renewal was answered
        self._late: deque[tuple[float, float]] = deque()  # (when, how late) of renewals done
        self._lag: deque[tuple[float, float]] = deque()  # (when, drift) of the loop probe

    # ------------------------------------------------------------------ measurements

    def renewal_due(self, at: float | None) -> None:
        """The next renewal is due at `at` (this clock); None: no turn to renew."""
        self._due = at

    def renewed(self, due: float, done: float) -> None:
        """A renewal due at `due` was answered at `done` (the next is not due until `renewal_due` says)."""
        self._due = None
        self._last_late = max(0.0, done - due)
        self._add(self._late, done, self._last_late)

    def loop_lag(self, lag_s: float) -> None:
        """The event loop ran a timer `lag_s` after it was due."""
        self._add(self._lag, self.clock(), max(0.0, lag_s))

    def forget(self) -> None:
        """No turn runs here: what was measured under load no longer says anything."""
        self._due = None
        self._last_late = 0.0
        self._late.clear()
        self._lag.clear()

    def _add(self, samples: deque[tuple[float, float]], when: float, value: float) -> None:
        samples.append((when, value))
        self._prune(samples, when)

    def _prune(self, samples: deque[tuple[float, float]], now: float) -> None:
        while samples and samples[0][0] < now - self.window_s:
            samples.popleft()

    @staticmethod
    def _since(samples: deque[tuple[float, float]], since: float) -> float:
        return max((value for when, value in samples if when >= since), default=0.0)

    # ------------------------------------------------------------------ what they say

    def renewal_lateness(self) -> float:
        """How late renewals run now: the last one's, or the one under way if it is later still."""
        pending = self.clock() - self._due if self._due is not None else 0.0
        return max(pending, self._last_late)

    def renewal_overdue(self) -> bool:
        """The renewal under way should be done by now (renew before taking anything new)."""
        return self._due is not None and self.clock() >= self._due

    def lag(self) -> float:
        """The event loop's largest lag over the last renewal interval."""
        now = self.clock()
        self._prune(self._lag, now)
        return self._since(self._lag, now - self.renew_s)

    def grace_s(self) -> int:
        """Whole seconds a renewal adds to the lease TTL while this worker lags (ttl_seconds is whole): from
        the largest lag of the last two renewal intervals, so the grace outlasts the refusals."""
        now = self.clock()
        self._prune(self._late, now)
        self._prune(self._lag, now)
        lag = max(self.renewal_lateness(), self._since(self._late, -math.inf), self._since(self._lag, -math.inf))
        if lag <= 0:
            return 0
        return math.ceil(min(GRACE_FACTOR * lag, GRACE_SHARE * self.lease_ttl_s))

    def refusal(self, running: int) -> Refusal | None:
        """Why a new turn is refused now (None: take it), this worker running `running` turns."""
        retry = self.renew_s  # the next renewal measures again
        if running == 0:
            # No lease to keep, so no renewal to come that would lift a refusal: what renewals measured
            # before (a sessions outage, a burst) must not keep an idle worker from taking a turn.
            return None
        if self.max_turns and running >= self.max_turns:
            return Refusal(
                "max_turns",
                f"this runtime worker runs {running} turns, its limit (COGMESH_RUNTIME_MAX_TURNS={self.max_turns})",
                retry,
                float(running),
                float(self.max_turns),
            )
        late = self.renewal_lateness()
        if late > self.late_limit_s:
            return Refusal(
                "lease_renewals_late",
                f"this runtime worker renews its turns' leases {late:.2f}s late (limit {self.late_limit_s:.2f}s): "
                "it takes no new turn until it keeps time",
                retry,
                late,
                self.late_limit_s,
            )
        lag = self.lag()
        if lag > self.late_limit_s:
            return Refusal(
                "event_loop_lag",
                f"this runtime worker's event loop lags {lag:.2f}s (limit {self.late_limit_s:.2f}s): "
                "it takes no new turn until it keeps time",
                retry,
                lag,
                self.late_limit_s,
            )
        return None

    def claim_limit(self, running: int, most: int) -> int:
        """How many orphaned turns this worker may claim now, at most `most` (0: none). A claim is new work,
        but it may be this worker's own turn coming back, and renewals late for the store's sake are every
        worker's: so only the worker's own loop lag and its turn limit hold claims back."""
        if self.lag() > self.late_limit_s:
            return 0
        if self.max_turns:
            return max(0, min(most, self.max_turns - running))
        return most
