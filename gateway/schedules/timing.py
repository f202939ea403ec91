"""When a schedule's ticks fall: a cron expression in a time zone, an interval, or one time.

Cron expressions are read by croniter (five fields, or six with seconds last); times are
seconds since the epoch, computed in milliseconds so a tick compares exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter  # type: ignore[import-untyped]

from cogmesh.gateway.v1 import schedules_pb2 as api
from services.kit.errors import Violations

MIN_INTERVAL_S = 10  # ticks closer than this would be a busy loop, not a schedule (an interval's rule says it too)
GAPS_CHECKED = 20  # a cron expression's first gaps are checked against MIN_INTERVAL_S


class Timing(Protocol):
    def next_after(self, t: float) -> float | None:
        """The first tick strictly after t; None when there is none (a one-time schedule's time passed)."""
        ...

    def latest(self, t: float) -> float | None:
        """The last tick at or before t; None when there was none."""
        ...


def _ms(t: float) -> int:
    return math.floor(t * 1000 + 0.5)


@dataclass(frozen=True)
class Cron:
    expression: str
    zone: tzinfo

    def next_after(self, t: float) -> float | None:
        return float(croniter(self.expression, datetime.fromtimestamp(t, self.zone)).get_next(float))

    def latest(self, t: float) -> float | None:
        # From just after t: croniter's previous tick is strictly before its start.
        start = datetime.fromtimestamp((_ms(t) + 1) / 1000, self.zone)
        return float(croniter(self.expression, start).get_prev(float))


@dataclass(frozen=True)
class Interval:
    anchor: float  # the schedule's creation: ticks at anchor + k * seconds, k >= 1
    seconds: int

    def next_after(self, t: float) -> float | None:
        k = max(1, math.floor((t - self.anchor) / self.seconds) + 1)
        return self.anchor + k * self.seconds

    def latest(self, t: float) -> float | None:
        k = math.floor((t - self.anchor) / self.seconds)
        return self.anchor + k * self.seconds if k >= 1 else None


@dataclass(frozen=True)
class Once:
    at: float

    def next_after(self, t: float) -> float | None:
        return self.at if self.at > t else None

    def latest(self, t: float) -> float | None:
        return self.at if self.at <= t else None


def zone(name: str) -> tzinfo:
    return ZoneInfo(name) if name else UTC


def of(spec: api.ScheduleSpec, anchor: float) -> Timing:
    """The timing of a checked spec (see `check`)."""
    kind = spec.WhichOneof("timing")
    if kind == "cron":
        return Cron(spec.cron.expression, zone(spec.cron.time_zone))
    if kind == "interval_seconds":
        return Interval(anchor, spec.interval_seconds)
    return Once(spec.at.ToNanoseconds() / 1e9)


def check(spec: api.ScheduleSpec, now: float, problems: Violations, prefix: str = "spec.") -> None:
    """Field violations of a spec's timing beyond its rules (schedules.proto: one of them is set, an interval
    is 10 s to 366 days), each naming its field."""
    kind = spec.WhichOneof("timing")
    if kind == "cron":
        _check_cron(spec.cron, now, problems, f"{prefix}cron.")
    elif kind == "at":
        problems.check(spec.at.ToNanoseconds() / 1e9 > now, f"{prefix}at", "must be in the future")


def _check_cron(cron: api.Cron, now: float, problems: Violations, prefix: str) -> None:
    try:
        where = zone(cron.time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        problems.check(False, f"{prefix}time_zone", f"unknown time zone {cron.time_zone!r} (an IANA name, e.g. UTC)")
        where = UTC
    fields = cron.expression.split()
    if len(fields) not in (5, 6) or not croniter.is_valid(cron.expression):
        problems.check(
            False,
            f"{prefix}expression",
            f"{cron.expression!r} is not a cron expression (five fields: minute hour day month weekday; "
            "or six, with seconds last)",
        )
        return
    ticks = croniter(cron.expression, datetime.fromtimestamp(now, where))
    previous = ticks.get_next(float)
    for _ in range(GAPS_CHECKED):
        tick = ticks.get_next(float)
        if tick - previous < MIN_INTERVAL_S:
            problems.check(False, f"{prefix}expression", f"ticks must be at least {MIN_INTERVAL_S} s apart")
            return
        previous = tick
