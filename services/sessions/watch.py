"""SessionsService.WatchEvents: the event logs of many sessions followed over one stream (being built)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from cogmesh.sessions.v1 import sessions_pb2
from services.kit.errors import Unimplemented
from services.sessions.store import SessionStore


async def watch_events(
    store: SessionStore,
    requests: AsyncIterator[sessions_pb2.WatchEventsRequest],
    draining: asyncio.Event,
    status_of: Callable[[Any], Any],
) -> AsyncIterator[Any]:
    raise Unimplemented("WatchEvents is not implemented by this server")
    yield  # an async generator
