"""Converse: one stream for a whole conversation, frames in, the session's events (and acks) out.

The first frame opens a session (from a seq, or from now). Each later frame (a message, an
approval, an answer, a cancel) is acted on as its own RPC would be and acked, or rejected with
the status that RPC would have ended with, as a message: a refused frame does not end the stream.
So the kit does not check the frames against the protos' field rules (ConverseRequest's frames are
IGNORE_ALWAYS); each frame's request is checked here, with the stream's session filled in.
The stream ends when the client cancels it, or once the client has half-closed and every turn it
started or resumed here has ended or paused.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import grpc
from google.rpc import error_details_pb2

from cogmesh.common.v1 import errors_pb2
from cogmesh.gateway.v1 import gateway_pb2
from gateway import answers, interrupts, validation
from gateway.delivery import Outlet
from gateway.messages import Messages
from gateway.sessions import Sessions
from gateway.turns import Turns
from gateway.validation import Names
from services.kit.errors import CogmeshError, InvalidArgument, Violations
from services.kit.logging import bind_request, log
from services.kit.validation import check as check_rules
from services.kit.validation import violations as rule_violations
from services.lib.event_log import EventLogReader, ends_stream

OUTBOX_SIZE = 64  # responses (and wake-ups) a Converse stream holds for its writer
_CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


class _Conversation:
    """What one Converse stream tracks: its outbox, the turns it waits for, whether the client is done."""

    def __init__(self) -> None:
        self.outbox: asyncio.Queue[gateway_pb2.ConverseResponse | None] = asyncio.Queue(OUTBOX_SIZE)
        self.in_flight: set[str] = set()
        self.client_done = False
        self.failure: BaseException | None = None


class Conversations:
    def __init__(
        self,
        events: EventLogReader,
        heartbeat_s: float,
        turns: Turns,
        sessions: Sessions,
        names: Names,
        messages: Messages,
    ) -> None:
        self.events, self.heartbeat_s, self.turns = events, heartbeat_s, turns
        self.sessions, self.names, self.messages = sessions, names, messages

    async def converse(
        self,
        tenant: str,
        requests: AsyncIterator[gateway_pb2.ConverseRequest],
        outlet: Callable[[str, int], Outlet],
        time_remaining: Callable[[], float | None],
    ) -> None:
        """Serve one stream: `outlet(session_id, cursor)` writes to the caller, `time_remaining` is the
        call's deadline (each frame's turn gets what is left of it)."""
        frames = aiter(requests)
        try:
            first = await anext(frames)
        except StopAsyncIteration:
            return
        if first.WhichOneof("frame") != "open":
            raise InvalidArgument([("open", "the first frame must open a session (ConverseOpen)")])
        session_id = first.open.session_id
        check_rules(first.open, "open.")
        await self.sessions.visible(tenant, session_id)
        bind_request(session_id=session_id)
        opened = first.open
        after = opened.after_seq if opened.HasField("after_seq") else await self.events.last_seq(session_id)
        conversation = _Conversation()
        outbox = conversation.outbox

        async def read_frames() -> None:
            try:
                async for frame in frames:
                    await outbox.put(await self._frame(tenant, session_id, frame, conversation, time_remaining))
            finally:
                conversation.client_done = True
                await outbox.put(None)  # wake the writer: it may be time to end

        async def tail() -> None:
            try:
                async for batch in self.events.read(session_id, after, self.heartbeat_s):
                    if batch is None:
                        await outbox.put(gateway_pb2.ConverseResponse(heartbeat=True))
                        continue
                    # A full outbox holds the tail back, so a slow reader meets the log's lag cut-off
                    # instead of growing this queue without bound.
                    await outbox.put(gateway_pb2.ConverseResponse(events=gateway_pb2.EventBatch(events=batch)))
                    for event in batch:
                        if ends_stream(event):
                            conversation.in_flight.discard(event.turn_id)
                    await outbox.put(None)
            except BaseException as exc:  # noqa: BLE001 - the writer re-raises it (e.g. a cursor too old)
                conversation.failure = exc
                if not isinstance(exc, asyncio.CancelledError):
                    await outbox.put(None)

        tasks = [asyncio.create_task(read_frames()), asyncio.create_task(tail())]
        out = outlet(session_id, after)
        try:
            await out.send(
                gateway_pb2.ConverseResponse(ack=gateway_pb2.ConverseAck(frame_id=first.frame_id, after_seq=after))
            )
            while True:
                item = await outbox.get()
                if item is not None:
                    await out.send(item, item.events.events)
                    continue
                if conversation.failure is not None and not isinstance(conversation.failure, asyncio.CancelledError):
                    raise conversation.failure
                if conversation.client_done and not conversation.in_flight and outbox.empty():
                    return
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _frame(
        self,
        tenant: str,
        session_id: str,
        frame: gateway_pb2.ConverseRequest,
        conversation: _Conversation,
        time_remaining: Callable[[], float | None],
    ) -> gateway_pb2.ConverseResponse:
        """Act on one frame; its ack, or its rejection (a refused frame does not end the stream)."""
        kind = frame.WhichOneof("frame") or ""
        try:
            turn_id = await self._act(tenant, session_id, kind, frame, time_remaining())
        except CogmeshError as exc:
            return gateway_pb2.ConverseResponse(rejected=rejection(frame.frame_id, exc))
        except Exception as exc:  # noqa: BLE001 - one bad frame must not end the conversation
            log.error("converse frame failed", frame=kind, exc_info=exc)
            failure = CogmeshError(f"internal error handling a {kind} frame; see server logs")
            return gateway_pb2.ConverseResponse(rejected=rejection(frame.frame_id, failure))
        if turn_id and kind != "cancel":
            conversation.in_flight.add(turn_id)
        return gateway_pb2.ConverseResponse(ack=gateway_pb2.ConverseAck(frame_id=frame.frame_id, turn_id=turn_id))

    async def _act(
        self, tenant: str, session_id: str, kind: str, frame: gateway_pb2.ConverseRequest, deadline: float | None
    ) -> str:
        """Do what the frame asks, as its own RPC would (checks first); returns the turn it concerns."""
        problems = Violations()
        if kind in ("message", "approval", "answer", "cancel"):
            given = getattr(frame, kind).session_id
            problems.check(
                given in ("", session_id), f"{kind}.session_id", "must be empty or the session this stream opened"
            )
            # The frame's request as its own RPC would get it: the stream's session, the protos' rules.
            request = type(getattr(frame, kind))()
            request.CopyFrom(getattr(frame, kind))
            request.session_id = session_id
            problems.items += [(f"{kind}.{v.field}", v.description) for v in rule_violations(request)]
        if kind == "message":
            message = request
            validation.check_message(message, problems, "message.")
            problems.raise_if_any()
            await self.names.check(tenant, message, "message.")
            turn_id, _ = await self.messages.start(tenant, message, deadline)
            return turn_id
        if kind in ("approval", "answer"):
            if kind == "approval":
                given, decision = "approval", answers.resolve_approval(request, problems, "approval.")
            else:
                given, decision = answers.answer_interrupt(request, problems, "answer.")
            problems.raise_if_any()
            interrupt_id = getattr(frame, kind).interrupt_id
            answered = interrupts.answer(self.turns, tenant, session_id, interrupt_id, given, decision, deadline)
            turn_id, _ = await answered
            return turn_id
        if kind == "cancel":
            problems.raise_if_any()
            return await self.turns.cancel(session_id, frame.cancel.turn_id, tenant)
        problems.check(False, kind or "frame", "the stream is already open" if kind == "open" else "is required")
        problems.raise_if_any()
        return ""  # pragma: no cover - raise_if_any raised


def rejection(frame_id: str, error: CogmeshError) -> gateway_pb2.ConverseRejection:
    """The status a frame would have got as its own RPC (CogmeshError.to_status, as the kit's
    ErrorMappingInterceptor sends it), as a message on the stream."""
    status = error.to_status()
    rejected = gateway_pb2.ConverseRejection(
        frame_id=frame_id, code=_CODE_NAMES.get(status.code, "UNKNOWN"), message=status.message
    )
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            name = f"ERROR_REASON_{info.reason}"
            if name in errors_pb2.ErrorReason.keys():  # noqa: SIM118 - an enum wrapper, not a dict
                rejected.reason = errors_pb2.ErrorReason.Value(name)  # type: ignore[assignment]
            rejected.metadata.update(info.metadata)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            rejected.violations.extend(
                gateway_pb2.FieldViolation(field=v.field, description=v.description) for v in bad.field_violations
            )
    return rejected
