"""Reading a session's event log for one caller: a turn's events until it ends or pauses, each
batch written as the log encoded it when it can be."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from google.protobuf.message import Message

from cogmesh.common.v1 import events_pb2
from gateway.delivery import Outlet
from services.lib.event_log import Batch, EventLogReader, ends_stream


def encoded(events: list[events_pb2.RuntimeEvent]) -> bytes:
    """The events' response as encoded once by the log (events are field 1 of every event
    response), or b"" when this list has no such encoding (a filtered or replayed batch)."""
    return events.wire if isinstance(events, Batch) else b""


async def aclose(iterator: AsyncIterator[Any]) -> None:
    """Close an async generator left before its end (a log reader holds a reader slot)."""
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


async def follow(
    events: EventLogReader, heartbeat_s: float, session_id: str, turn_id: str, start_seq: int
) -> AsyncIterator[list[events_pb2.RuntimeEvent]]:
    """The turn's events from the log until it ends or pauses."""
    # The lease grant told where the log ends: the turn's events come after it, nothing to ask.
    async for batch in events.read(session_id, start_seq, heartbeat_s, log_end=start_seq):
        if batch is None:
            continue  # HTTP/2 keepalive covers idle streams
        mine = batch if all(e.turn_id == turn_id for e in batch) else [e for e in batch if e.turn_id == turn_id]
        if mine:
            yield mine
        if any(ends_stream(e) for e in mine):
            return


async def relay(
    out: Outlet, batches: AsyncIterator[list[events_pb2.RuntimeEvent]], response: Callable[..., Message]
) -> None:
    """Write each batch to the caller as `response(events=...)`, or as the log's own bytes of it."""
    async for mine in batches:
        await out.send(encoded(mine) or response(events=mine), mine)
