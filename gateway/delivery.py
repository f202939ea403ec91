"""Writing one caller's stream with a bounded buffer, so a stalled reader is ended, not waited on.

grpc.aio holds at most one message in flight per stream, and HTTP/2 flow control
bounds what the transport buffers: that pair is each subscriber's bounded buffer.
A handler that `yield`s to a reader who stopped reading blocks inside the write
forever. `Outlet` writes with `context.write` under a stall timeout instead: if the
reader takes no message for `stall_s`, the stream ends with RESOURCE_EXHAUSTED
(reason SUBSCRIBER_TOO_SLOW) and `resume_after_seq`, so it re-subscribes from there.
Turns and other subscribers never wait on it: they only append to and read from the
event log.

`resume_after_seq` is the last seq of the last message handed to the transport,
including the one whose write timed out. `context.write` hands its message to gRPC
core before it first waits, and giving up on the wait does not take the message
back: core sends a stream's messages in order and the status after them, so a
client that reads this status has read every message up to that seq, and resuming
from it loses nothing and repeats nothing. (Counting only writes that completed left
the cursor one whole message behind: the 60 events of the batch in flight.) A client
whose connection dies instead never sees this status; it resumes from the last seq it
read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from cogmesh.common.v1 import errors_pb2, events_pb2
from services.kit.errors import ResourceExhausted
from services.kit.metrics import record_written


class Outlet:
    """One stream's writer: `send` each message; a stalled reader gets RESOURCE_EXHAUSTED."""

    def __init__(self, context: Any, stall_s: float, session_id: str, delivered: int = 0):
        self.context, self.stall_s, self.session_id = context, stall_s, session_id
        self.delivered = delivered  # the last seq whose message was handed to the transport

    async def send(self, message: Any, events: Sequence[events_pb2.RuntimeEvent] = ()) -> None:
        """Write `message` (a response, or its pre-encoded bytes) carrying `events`."""
        write = self.context.write(message)
        try:
            async with asyncio.timeout(self.stall_s):
                await write  # gRPC core holds the message from its first step on: see the module's doc
        except TimeoutError:
            if events:
                self.delivered = events[-1].seq
            raise ResourceExhausted(
                f"subscriber stopped reading: no message taken for {self.stall_s:g}s; "
                f"resume after seq {self.delivered}",
                reason=errors_pb2.ERROR_REASON_SUBSCRIBER_TOO_SLOW,
                metadata={
                    "resume_after_seq": str(self.delivered),
                    "session_id": self.session_id,
                    "stalled_seconds": f"{self.stall_s:g}",
                },
            ) from None
        record_written(events)
        if events:
            self.delivered = events[-1].seq
