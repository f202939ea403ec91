"""Writing sessions' event logs on Redis the way the sessions service does, for tests of their readers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cogmesh.common.v1 import events_pb2
from services.sessions.model import Acquired, Appended, NewEvents, NewSession, Strategy
from services.sessions.redis_store import RedisSessionStore

TENANT = "acme"


class LogWriter:
    """A session store whose sessions each have a turn holding the lease, to append under."""

    def __init__(self, url: str, prefix: str, **options: Any):
        self.store = RedisSessionStore.from_url(url, prefix, 0.0, 2.0, **options)
        self._tokens: dict[str, int] = {}

    async def session(self) -> str:
        """A new session with a turn ("t") holding its lease."""
        record, _ = await self.store.create(TENANT, NewSession("", "", "default"))
        granted = await self.store.try_acquire(TENANT, record.session_id, "t", 3600.0, Strategy.REJECT)
        assert isinstance(granted, Acquired)
        self._tokens[record.session_id] = granted.token
        return record.session_id

    async def append(self, sid: str, events: Sequence[events_pb2.RuntimeEvent], append_id: str = "") -> Appended:
        return await self.store.append_events(TENANT, sid, NewEvents("t", self._tokens[sid], events, (), append_id))

    async def close(self) -> None:
        await self.store.close()
