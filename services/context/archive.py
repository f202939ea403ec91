"""Archive of tool results that compaction moved out of the live transcript.

Each result is kept per (tenant, session) under an execution id that the
marker in the transcript quotes, so the model can read the original back
through the get_tool_response tool. Two stores: ``MemoryToolArchive``
(embedded default, bounded) and ``RedisToolArchive`` (shared by replicas and
kept across restarts when ``COGMESH_REDIS_URL`` is set).

Putting the same result twice returns the same id (compaction may be retried);
a different result under an id already taken gets the id with a ``.2``,
``.3``... suffix, because tool-call ids are only unique within a turn.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Protocol

from services.kit.redis_pool import REDIS_ERRORS, Client
from services.kit.redis_url import check_prefix
from services.lib.redis_keys import SessionKeys

MARKER_PREFIX = "SUMMARIZED executionId:"
_MAX_SUFFIX = 1000


@dataclass(frozen=True)
class ArchivedResult:
    execution_id: str
    tool_name: str
    tool_call_id: str
    content: str


def marker(execution_id: str, tool_name: str) -> str:
    """The text that stands in for an archived result in the transcript."""
    return (
        f"{MARKER_PREFIX}'{execution_id}' (the {tool_name or 'tool'} result was archived; "
        f"call get_tool_response with this executionId to read it)"
    )


def is_marker(content: str) -> bool:
    return content.startswith(MARKER_PREFIX)


class ToolArchive(Protocol):
    async def put(
        self, tenant: str, session: str, preferred_id: str, tool_name: str, tool_call_id: str, content: str
    ) -> str:
        """Store a result; returns the execution id it is kept under."""
        ...

    async def get(self, tenant: str, session: str, execution_id: str) -> ArchivedResult | None: ...


def _candidates(preferred_id: str) -> list[str]:
    return [preferred_id, *(f"{preferred_id}.{n}" for n in range(2, _MAX_SUFFIX))]


class ArchiveFull(RuntimeError):
    """Every suffix of an execution id is taken (a runaway caller)."""


class ArchiveUnavailable(RuntimeError):
    """The archive's backing store cannot be reached."""


class MemoryToolArchive:
    """In-process archive; keeps the most recently used ``max_sessions`` sessions."""

    def __init__(self, max_sessions: int = 10_000) -> None:
        self._sessions: OrderedDict[tuple[str, str], dict[str, ArchivedResult]] = OrderedDict()
        self._max_sessions = max_sessions

    async def put(
        self, tenant: str, session: str, preferred_id: str, tool_name: str, tool_call_id: str, content: str
    ) -> str:
        key = (tenant, session)
        results = self._sessions.setdefault(key, {})
        self._sessions.move_to_end(key)
        while len(self._sessions) > self._max_sessions:
            self._sessions.popitem(last=False)
        for candidate in _candidates(preferred_id):
            existing = results.get(candidate)
            if existing is None:
                results[candidate] = ArchivedResult(candidate, tool_name, tool_call_id, content)
                return candidate
            if existing.content == content and existing.tool_call_id == tool_call_id:
                return candidate
        raise ArchiveFull(f"no free execution id for {preferred_id!r}")

    async def get(self, tenant: str, session: str, execution_id: str) -> ArchivedResult | None:
        results = self._sessions.get((tenant, session))
        return None if results is None else results.get(execution_id)


class RedisToolArchive:
    """One Redis hash per session and tenant, ``<prefix>{<session>}:archive:<tenant>``, expiring after ``ttl_s``.

    The key is in its session's cluster slot, with the session's other keys (services/lib/redis_keys.py).
    """

    def __init__(self, client: Client, prefix: str = "cogmesh:", ttl_s: int = 30 * 86_400) -> None:
        self._redis = client
        self._prefix = check_prefix(prefix)
        self._ttl_s = ttl_s

    def _key(self, tenant: str, session: str) -> str:
        return SessionKeys(self._prefix, session).key(f"archive:{tenant}")

    async def put(
        self, tenant: str, session: str, preferred_id: str, tool_name: str, tool_call_id: str, content: str
    ) -> str:
        try:
            return await self._put(tenant, session, preferred_id, tool_name, tool_call_id, content)
        except REDIS_ERRORS as exc:
            raise ArchiveUnavailable(f"tool archive (Redis) unavailable: {exc}") from exc

    async def _put(
        self, tenant: str, session: str, preferred_id: str, tool_name: str, tool_call_id: str, content: str
    ) -> str:
        key = self._key(tenant, session)
        for candidate in _candidates(preferred_id):
            record = ArchivedResult(candidate, tool_name, tool_call_id, content)
            # HSETNX makes claiming an id atomic across replicas.
            if await self._redis.hsetnx(key, candidate, json.dumps(asdict(record))):
                await self._redis.expire(key, self._ttl_s)
                return candidate
            existing = await self._load(key, candidate)
            if existing is not None and existing.content == content and existing.tool_call_id == tool_call_id:
                return candidate
        raise ArchiveFull(f"no free execution id for {preferred_id!r}")

    async def get(self, tenant: str, session: str, execution_id: str) -> ArchivedResult | None:
        try:
            return await self._load(self._key(tenant, session), execution_id)
        except REDIS_ERRORS as exc:
            raise ArchiveUnavailable(f"tool archive (Redis) unavailable: {exc}") from exc

    async def _load(self, key: str, execution_id: str) -> ArchivedResult | None:
        raw = await self._redis.hget(key, execution_id)
        if raw is None:
            return None
        return ArchivedResult(**json.loads(raw))
