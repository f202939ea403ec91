"""Subscribe: a session's event log fanned out to every caller watching it, from the seq each asks,
and every such stream handed off at the end of a drain (ended UNAVAILABLE, SHUTTING_DOWN, with the
seq to resume after on another replica)."""

from __future__ import annotations

import asyncio
from typing import Any

from cogmesh.common.v1 import errors_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.sessions.v1 import sessions_pb2
from gateway.delivery import Outlet
from gateway.streams import encoded
from services.kit.clients import Clients, call
from services.kit.errors import InvalidArgument, Unavailable
from services.lib.event_log import EventLogReader

_HEARTBEAT = gateway_pb2.SubscribeResponse(heartbeat=True)


def shutting_down(out: Outlet) -> Unavailable:
    return Unavailable(
        f"this gateway is shutting down: resume after seq {out.delivered} on another replica",
        reason=errors_pb2.ERROR_REASON_SHUTTING_DOWN,
        metadata={"resume_after_seq": str(out.delivered), "session_id": out.session_id},
    )


class Subscriptions:
    """The open Subscribe streams of this gateway."""

    def __init__(self, clients: Clients, events: EventLogReader, heartbeat_s: float) -> None:
        self.clients, self.events, self.heartbeat_s = clients, events, heartbeat_s
        self._streams: set[asyncio.Task[Any]] = set()  # the tasks serving them
        self._handing_off = False

    async def serve(self, tenant: str, request: gateway_pb2.SubscribeRequest, out: Outlet) -> None:
        """Write the session's events after `request.after_seq` to `out` (a session the caller may see)."""
        session_id = request.session_id
        last = await self.events.last_seq(session_id)
        if request.after_seq > last:  # before stop_when_idle may end the stream: a bad cursor is an error
            raise InvalidArgument([("after_seq", f"is ahead of the session's last event (seq {last})")])
        if request.stop_when_idle and await self._idle(tenant, session_id, out.delivered):
            return
        if self._handing_off:  # arrived between the end of the drain and the stop
            raise shutting_down(out)
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        try:
            async for batch in self.events.read(session_id, request.after_seq, self.heartbeat_s):
                if batch is None:
                    await out.send(_HEARTBEAT)
                else:
                    await out.send(encoded(batch) or gateway_pb2.SubscribeResponse(events=batch), batch)
                if request.stop_when_idle and await self._idle(tenant, session_id, out.delivered):
                    return
        except asyncio.CancelledError:
            if not self._handing_off:
                raise
            task.uncancel()
            raise shutting_down(out) from None
        finally:
            self._streams.discard(task)

    def hand_off(self) -> None:
        """End every stream with UNAVAILABLE (reason SHUTTING_DOWN): their clients resume by seq on
        another replica at once, and the stop does not wait the whole grace period for streams that
        would never end by themselves."""
        self._handing_off = True
        for task in list(self._streams):
            task.cancel()

    async def _idle(self, tenant: str, session_id: str, cursor: int) -> bool:
        if cursor < await self.events.last_seq(session_id):
            return False
        reply = await call(
            "sessions",
            self.clients.sessions.GetSession,
            sessions_pb2.GetSessionRequest(tenant_id=tenant, session_id=session_id),
        )
        if reply.session.active_turn_id:
            return False  # a turn holds the lease: more is coming
        if cursor < await self.events.last_seq(session_id):
            return False  # a turn ended since the first look: its end and the lease's release are one write
        # Nothing runs: the log ends with a turn's end, or with a pause that waits for an answer.
        return await self.events.ends_with_turn_end(session_id) or bool(reply.state.pending_interrupt_ids)
