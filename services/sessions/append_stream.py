"""SessionsService.AppendEventsStream: every append of a runtime replica's turns on one long-lived stream.

Each call is AppendEvents as the unary RPC answers it (the same checks, fencing and
idempotent append_id), applied as soon as it arrives, concurrently with the others:
turns are independent, and each turn waits for an answer before its next append, so a
turn's order holds without ordering the stream. Answers go back tagged with the call's
id as they complete. A call that fails ends only itself: its status travels in the
answer, the stream goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from google.protobuf.message import Message

from cogmesh.sessions.v1 import sessions_pb2
from services.kit.errors import CogmeshError, Unavailable
from services.kit.logging import log

# Calls applied at once per stream; past it the stream is not read until one is answered
# (HTTP/2 flow control then holds the caller back).
MAX_IN_FLIGHT = 256

Append = Callable[[sessions_pb2.AppendEventsRequest], Awaitable[Message]]


def _failed(call_id: int, error: CogmeshError) -> sessions_pb2.AppendEventsStreamResponse:
    return sessions_pb2.AppendEventsStreamResponse(call_id=call_id, error=error.to_status().SerializeToString())


async def serve_appends(
    requests: AsyncIterator[sessions_pb2.AppendEventsStreamRequest], append: Append, draining: asyncio.Event
) -> AsyncIterator[sessions_pb2.AppendEventsStreamResponse]:
    """Answer each call of `requests` with `append`'s result; end UNAVAILABLE once `draining` is set."""
    answers: asyncio.Queue[sessions_pb2.AppendEventsStreamResponse | None] = asyncio.Queue()
    room = asyncio.Semaphore(MAX_IN_FLIGHT)
    running: set[asyncio.Task[None]] = set()
    ended: list[BaseException] = []  # why reading stopped before the caller closed its side

    async def one(call: sessions_pb2.AppendEventsStreamRequest) -> None:
        try:
            reply = await append(call.append)
            assert isinstance(reply, sessions_pb2.AppendEventsResponse)
            answers.put_nowait(sessions_pb2.AppendEventsStreamResponse(call_id=call.call_id, appended=reply))
        except CogmeshError as exc:
            answers.put_nowait(_failed(call.call_id, exc))
        except Exception as exc:  # noqa: BLE001 - one call's bug must not end every turn's stream
            log.error("unhandled error", method="AppendEventsStream", exc_info=exc)
            answers.put_nowait(_failed(call.call_id, CogmeshError("internal error in AppendEvents; see server logs")))
        finally:
            room.release()

    async def read() -> None:
        async for call in requests:
            await room.acquire()
            task = asyncio.create_task(one(call))
            running.add(task)
            task.add_done_callback(running.discard)

    async def pump() -> None:
        """Read until the caller closes its side or the drain begins, then answer every call taken."""
        reader = asyncio.create_task(read())
        drain = asyncio.create_task(draining.wait())
        try:
            await asyncio.wait({reader, drain}, return_when=asyncio.FIRST_COMPLETED)
            if not reader.done():
                reader.cancel()
                ended.append(Unavailable("this sessions replica is shutting down: send the rest on a new stream"))
            elif reader.exception() is not None:
                ended.append(reader.exception())  # type: ignore[arg-type]
            while running:
                await asyncio.gather(*running, return_exceptions=True)
        finally:
            drain.cancel()
            reader.cancel()
            answers.put_nowait(None)

    pumping = asyncio.create_task(pump())
    try:
        while (answer := await answers.get()) is not None:
            yield answer
        if ended:
            raise ended[0]
    finally:
        pumping.cancel()
        for task in list(running):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumping
