"""Outlet: the cursor a stalled subscriber is given names every message handed to the transport."""

from __future__ import annotations

import asyncio

import pytest

from cogmesh.common.v1 import events_pb2
from gateway.delivery import Outlet
from services.kit.errors import ResourceExhausted


class Transport:
    """A stream context like grpc.aio's: `write` hands the message over at once, then waits for the reader."""

    def __init__(self, taken: int):
        self.taken, self.handed = taken, list[object]()
        self.reader_gone = asyncio.Event()

    async def write(self, message: object) -> None:
        self.handed.append(message)
        if len(self.handed) > self.taken:
            await self.reader_gone.wait()  # the reader stopped taking messages: never set


def events(first: int, last: int) -> list[events_pb2.RuntimeEvent]:
    return [events_pb2.RuntimeEvent(seq=seq) for seq in range(first, last + 1)]


async def test_the_cursor_of_a_stalled_reader_counts_the_message_in_flight() -> None:
    transport = Transport(taken=2)
    out = Outlet(transport, 0.05, "s", delivered=0)
    await out.send(b"first", events(1, 3))
    await out.send(b"second", events(4, 6))
    with pytest.raises(ResourceExhausted) as caught:
        await out.send(b"third", events(7, 66))  # 60 events the transport holds and sends before the status
    assert transport.handed == [b"first", b"second", b"third"]
    assert caught.value.metadata["resume_after_seq"] == "66"
    assert "resume after seq 66" in caught.value.message


async def test_a_heartbeat_in_flight_leaves_the_cursor_at_the_last_events() -> None:
    transport = Transport(taken=1)
    out = Outlet(transport, 0.05, "s", delivered=10)
    await out.send(b"events", events(11, 12))
    with pytest.raises(ResourceExhausted) as caught:
        await out.send(b"heartbeat")
    assert caught.value.metadata["resume_after_seq"] == "12"


async def test_a_stream_that_never_sent_events_resumes_from_its_own_cursor() -> None:
    out = Outlet(Transport(taken=0), 0.05, "s", delivered=7)
    with pytest.raises(ResourceExhausted) as caught:
        await out.send(b"heartbeat")
    assert caught.value.metadata["resume_after_seq"] == "7"
