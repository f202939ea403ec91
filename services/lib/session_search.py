"""Session search: labels, a session's status, and the filter ListSessions applies (no gRPC).

Labels are the application's tags on a session (`{"team": "billing", "env": "prod"}`),
set at creation and changed later (UpdateSession), unlike its scope. The gateway and the
sessions service check them with the same rules, so they live here, as does the one
definition of a session's status and of what matches a filter: every store (memory,
Redis) filters with `matches`, so they answer alike.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cogmesh.common.v1 import resources_pb2
from services.kit.errors import Violations

# A session's labels: the requests' rules (protos: `labels`, `label_filter`) bound a map to 64 entries,
# keys to LABEL_KEY, values to 256 characters without control characters (they show up in logs,
# consoles and CLI tables). An update's "labels.<key>" paths and the count after an update are
# checked here.
MAX_LABELS = 64
LABEL_KEY = re.compile(r"[a-z0-9][a-z0-9_.\-/]{0,62}")

# A session's status (cogmesh.common.v1.SessionStatus), as the stores name it.
IDLE, RUNNING, PAUSED, FAILED = "idle", "running", "paused", "failed"
STATUSES = (IDLE, RUNNING, PAUSED, FAILED)

_STATUS_NAMES = {
    resources_pb2.SESSION_STATUS_IDLE: IDLE,
    resources_pb2.SESSION_STATUS_RUNNING: RUNNING,
    resources_pb2.SESSION_STATUS_PAUSED: PAUSED,
    resources_pb2.SESSION_STATUS_FAILED: FAILED,
}
STATUS_PROTOS = {name: number for number, name in _STATUS_NAMES.items()}

# How the last turn that stopped ended (SessionRecord.outcome), set as its end or pause is logged.
COMPLETED, CANCELLED = "completed", "cancelled"


def too_many_labels(session_id: str, count: int) -> str:
    return f"session {session_id!r} would have {count} labels after the update; at most {MAX_LABELS} are allowed"


def status(running: bool, pending: bool, outcome: str) -> str:
    """A session's status: a turn holding its lease runs; else a turn waiting for an answer pauses it (an
    undecided checkpoint, or a pause logged last and not yet resumed); else its last turn's end says
    whether it failed (a cancelled turn did not)."""
    if running:
        return RUNNING
    if pending or outcome == PAUSED:
        return PAUSED
    return FAILED if outcome == FAILED else IDLE


@dataclass(frozen=True)
class Facts:
    """What a filter looks at in a session."""

    agent: str
    labels: Mapping[str, str]
    created_at: float
    updated_at: float
    status: str
    scope: Mapping[str, str] = field(default_factory=dict)
    forked_from: str = ""  # the session it was forked from ("" when it was created)
    agent_version: int = 0  # of a tenant's stored agent; 0: a built-in


@dataclass(frozen=True)
class SessionFilter:
    """ListSessions' filters beyond scope; every one set must hold. Times are seconds since the epoch,
    None when unbounded: [created_after, created_before) and [active_after, active_before)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    statuses: Collection[str] = ()
    agent: str = ""
    created_after: float | None = None
    created_before: float | None = None
    active_after: float | None = None
    active_before: float | None = None
    forked_from: str = ""
    agent_version: int = 0  # 0: any

    def __bool__(self) -> bool:
        return bool(self.labels or self.statuses or self.agent or self.forked_from or self.agent_version) or any(
            t is not None for t in (self.created_after, self.created_before, self.active_after, self.active_before)
        )

    @property
    def needs_status(self) -> bool:
        return bool(self.statuses)


def _within(value: float, after: float | None, before: float | None) -> bool:
    return (after is None or value >= after) and (before is None or value < before)


def matches(facts: Facts, where: SessionFilter) -> bool:
    return (
        (not where.agent or facts.agent == where.agent)
        and (not where.forked_from or facts.forked_from == where.forked_from)
        and (not where.agent_version or facts.agent_version == where.agent_version)
        and all(facts.labels.get(k) == v for k, v in where.labels.items())
        and _within(facts.created_at, where.created_after, where.created_before)
        and _within(facts.updated_at, where.active_after, where.active_before)
        and (not where.statuses or facts.status in where.statuses)
    )


# What google.protobuf.Timestamp allows: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
_MIN_SECONDS, _MAX_SECONDS = -62_135_596_800, 253_402_300_799


def _seconds(request: Any, name: str, problems: Violations) -> float | None:
    if not request.HasField(name):
        return None
    stamp = getattr(request, name)
    valid = _MIN_SECONDS <= stamp.seconds <= _MAX_SECONDS and 0 <= stamp.nanos < 1_000_000_000
    problems.check(valid, name, "must be a time between the years 1 and 9999 (nanos 0..999,999,999)")
    return stamp.seconds + stamp.nanos / 1e9 if valid else None


def filter_of(request: Any, problems: Violations) -> SessionFilter:
    """The filter of a ListSessionsRequest (the gateway's or the sessions service's: the same fields and
    rules, the field rules checked already); an empty or impossible time range is INVALID_ARGUMENT."""
    where = SessionFilter(
        labels=dict(request.label_filter),
        statuses=frozenset(name for number in request.statuses if (name := _STATUS_NAMES.get(number))),
        agent=request.agent,
        created_after=_seconds(request, "created_after", problems),
        created_before=_seconds(request, "created_before", problems),
        active_after=_seconds(request, "active_after", problems),
        active_before=_seconds(request, "active_before", problems),
        forked_from=request.forked_from,
        agent_version=request.agent_version,
    )
    for after, before in (("created_after", "created_before"), ("active_after", "active_before")):
        low, high = getattr(where, after), getattr(where, before)
        problems.check(low is None or high is None or low < high, before, f"must be later than {after}")
    return where


@dataclass(frozen=True)
class LabelUpdate:
    """What an UpdateSession's label paths ask: every label replaced, or some keys set (a value) or removed."""

    replace: dict[str, str] | None = None
    changes: dict[str, str | None] = field(default_factory=dict)


def label_update(paths: Sequence[str], labels: Mapping[str, str], problems: Violations) -> LabelUpdate | None:
    """The label paths of an update mask ("labels", "labels.<key>"); None when it names none."""
    whole = "labels" in paths
    keys = [p.removeprefix("labels.") for p in paths if p.startswith("labels.")]
    if not whole and not keys:
        return None
    problems.check(not (whole and keys), "update_mask", "names both 'labels' and 'labels.<key>' paths: use one form")
    for key in keys:
        problems.check(bool(LABEL_KEY.fullmatch(key)), "update_mask", f"path 'labels.{key}' names no valid label key")
    if whole:
        return LabelUpdate(replace=dict(labels))
    named = set(keys)
    for key in labels:
        where = f"labels[{json.dumps(key, ensure_ascii=False)}]"  # as the field rules spell a map entry
        problems.check(key in named, where, "is not named by a 'labels.<key>' path of update_mask")
    return LabelUpdate(changes={key: labels.get(key) for key in keys})
