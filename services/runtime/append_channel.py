"""Every append of this replica's turns on one long-lived SessionsService.AppendEventsStream.

A unary AppendEvents per append costs a new HTTP/2 stream, its headers and every
interceptor on both sides; a paced turn makes a couple of dozen. Here each append is a
message on one stream, answered by call id. `AppendEvents` keeps the unary call's
contract (same arguments, raises grpc.aio.AioRpcError with the status the unary call
would have ended with), so a turn's log writer does not know which one it uses.

A stream that breaks (a sessions replica draining or restarting, a connection cut)
fails the calls in flight on it; each is sent again at once as a unary call (always
right, and it reaches any replica), and the next append opens a new stream. A resend
is safe: append_id makes a second copy a no-op. Against a sessions service that does
not take the stream (UNIMPLEMENTED) appends go unary for a while, then try again.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.rpc import status_pb2
from opentelemetry import trace

from cogmesh.sessions.v1 import sessions_pb2
from services.kit import tasks
from services.kit.logging import log

# How long appends go unary after sessions did not take the stream, before it is tried again.
UNARY_FOR_S = 60.0
# How long a write that found the stream ended waits for its reader to learn why (the call's status).
STATUS_WAIT_S = 5.0
_tracer = trace.get_tracer("cogmesh.runtime.appends")
_SPAN = "/cogmesh.sessions.v1.SessionsService/AppendEventsStream"
_SPAN_ATTRIBUTES = {
    "rpc.system": "grpc",
    "rpc.service": "cogmesh.sessions.v1.SessionsService",
    "rpc.method": "AppendEventsStream",
}


def rpc_error(code: grpc.StatusCode, details: str, status: bytes = b"") -> grpc.aio.AioRpcError:
    """The error a unary call would have raised (status: google.rpc.Status bytes, for rich details)."""
    trailing = grpc.aio.Metadata(("grpc-status-details-bin", status)) if status else grpc.aio.Metadata()
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details=details)


def _failed(status: bytes) -> grpc.aio.AioRpcError:
    decoded = status_pb2.Status.FromString(status)
    return rpc_error(grpc.StatusCode(_CODES[decoded.code]), decoded.message, status)


_CODES = {code.value[0]: code for code in grpc.StatusCode}


class _StreamBroke(Exception):
    """The stream a call went on ended before answering it (not the call's own failure)."""

    def __init__(self, error: grpc.aio.AioRpcError) -> None:
        super().__init__(error.details())
        self.error = error


@dataclass(eq=False)
class _Stream:
    call: Any  # grpc.aio.StreamStreamCall
    pending: dict[int, asyncio.Future[sessions_pb2.AppendEventsResponse]] = field(default_factory=dict)
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)  # one write at a time on a call
    reader: asyncio.Task[None] | None = None
    broken: grpc.aio.AioRpcError | None = None


class AppendChannel:
    def __init__(self, sessions: Any) -> None:
        self.sessions = sessions  # the SessionsService stub
        # A sessions client without the stream (a test's fake, a stand-in) gets unary calls.
        self._unary_until = float("-inf") if callable(getattr(sessions, "AppendEventsStream", None)) else float("inf")
        self._answered = 0  # calls answered on any stream so far
        self._stream: _Stream | None = None
        self._ids = itertools.count(1)
        self.streams_opened = 0

    async def AppendEvents(
        self,
        request: sessions_pb2.AppendEventsRequest,
        timeout: float | None = None,  # noqa: ASYNC109 - the stub's signature
        wait_for_ready: bool = False,
    ) -> sessions_pb2.AppendEventsResponse:
        started = time.monotonic()
        if not self.unary:
            try:
                # The stream belongs to no turn: each call is a span of the turn that makes it.
                with _tracer.start_as_current_span(_SPAN, kind=trace.SpanKind.CLIENT, attributes=_SPAN_ATTRIBUTES):
                    return await self._call(request, timeout)
            except _StreamBroke as broke:
                self._stream_failed(broke.error)
            # A unary call is always right: this append goes that way, the next one on a new stream.
        left = None if timeout is None else max(timeout - (time.monotonic() - started), 0.0)
        reply: sessions_pb2.AppendEventsResponse = await self.sessions.AppendEvents(
            request, timeout=left, wait_for_ready=wait_for_ready
        )
        return reply

    @property
    def unary(self) -> bool:
        """Appends go unary for now: the sessions service did not take the stream."""
        return time.monotonic() < self._unary_until

    def _stream_failed(self, error: grpc.aio.AioRpcError) -> None:
        # UNIMPLEMENTED: a sessions service of the previous version. grpc reports a stream that ends
        # while messages are being written as INTERNAL, which hides that UNIMPLEMENTED: a stream that
        # never answered and ended so counts as the same.
        never_answered = error.code() == grpc.StatusCode.INTERNAL and not self._answered
        if error.code() == grpc.StatusCode.UNIMPLEMENTED or never_answered:
            log.info("sessions did not take AppendEventsStream: appends go unary for now", code=error.code().name)
            self._unary_until = time.monotonic() + UNARY_FOR_S

    async def _call(
        self,
        request: sessions_pb2.AppendEventsRequest,
        timeout: float | None,  # noqa: ASYNC109 - a deadline per call on a shared stream
    ) -> sessions_pb2.AppendEventsResponse:
        stream = self._open()
        call_id = next(self._ids)
        answer: asyncio.Future[sessions_pb2.AppendEventsResponse] = asyncio.get_running_loop().create_future()
        stream.pending[call_id] = answer
        try:
            try:
                async with stream.writing:
                    if stream.broken is None:
                        await stream.call.write(sessions_pb2.AppendEventsStreamRequest(call_id=call_id, append=request))
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError, grpc.aio.UsageError) as exc:
                # The stream ended under the write; its reader says why (and fails `answer`). A write that
                # learnt no status waits for the reader's: UNIMPLEMENTED, say, which decides that appends go
                # unary (under load, many writers found the refused stream ended before its reader did).
                if isinstance(exc, grpc.aio.AioRpcError):
                    self._broke(stream, exc)
                else:
                    if stream.reader is not None:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(asyncio.shield(stream.reader), STATUS_WAIT_S)
                    self._broke(stream, None)
            if stream.broken is not None and not answer.done():
                raise _StreamBroke(stream.broken)
            try:
                return await asyncio.wait_for(answer, timeout)
            except TimeoutError:
                raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded") from None
        finally:
            stream.pending.pop(call_id, None)

    def _open(self) -> _Stream:
        stream = self._stream
        if stream is None or stream.broken is not None:
            # The stream serves every turn of this replica, so it belongs to none of their traces.
            fresh = contextvars.Context()
            stream = self._stream = _Stream(fresh.run(self.sessions.AppendEventsStream))
            stream.reader = asyncio.create_task(self._read(stream), name="append-stream", context=fresh)
            self.streams_opened += 1
        return stream

    async def _read(self, stream: _Stream) -> None:
        """Hand each answer to its call until the stream ends; then fail the calls still waiting."""
        error: grpc.aio.AioRpcError | None = None
        try:
            while (reply := await stream.call.read()) is not grpc.aio.EOF:
                answer = stream.pending.get(reply.call_id)
                if answer is None or answer.done():
                    continue  # its caller gave up (deadline): a resend will find the append applied
                self._answered += 1
                if reply.WhichOneof("result") == "appended":
                    answer.set_result(reply.appended)
                else:
                    answer.set_exception(_failed(reply.error))
        except grpc.aio.AioRpcError as exc:
            error = exc
        finally:
            self._broke(stream, error)

    def _broke(self, stream: _Stream, error: grpc.aio.AioRpcError | None) -> None:
        if stream.broken is None:
            stream.broken = error or rpc_error(grpc.StatusCode.UNAVAILABLE, "the append stream to sessions ended")
            if stream.broken.code() != grpc.StatusCode.CANCELLED:
                log.info(
                    "append stream to sessions ended", code=stream.broken.code().name, in_flight=len(stream.pending)
                )
        if self._stream is stream:
            self._stream = None
        for answer in stream.pending.values():
            if not answer.done():
                answer.set_exception(_StreamBroke(stream.broken))

    async def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is None:
            return
        stream.broken = stream.broken or rpc_error(grpc.StatusCode.CANCELLED, "the runtime is shutting down")
        stream.call.cancel()
        if stream.reader is not None:
            await tasks.stop([stream.reader], "closing the append stream")
