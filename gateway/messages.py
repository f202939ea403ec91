"""SendMessage (and Converse's message frame): the public request as a turn, started under the
session's lease (gateway/turns.py), and its events streamed to the caller from the log until the
turn ends or pauses; the turn runs on its own, whoever reads it."""

from __future__ import annotations

import asyncio

from cogmesh.gateway.v1 import gateway_pb2
from gateway import contract
from gateway.delivery import Outlet
from gateway.streams import encoded, follow
from gateway.turns import TurnOptions, Turns
from services.lib.event_log import EventLogReader, ends_stream


def options(request: gateway_pb2.SendMessageRequest) -> TurnOptions:
    return TurnOptions(
        runtime=request.runtime,
        output_schema=request.output_schema if request.HasField("output_schema") else None,
        limits=request.limits if request.HasField("limits") else None,
        cost_budget=request.cost_budget if request.HasField("cost_budget") else None,
        client_tools=list(request.client_tools),
    )


class Messages:
    def __init__(self, turns: Turns, events: EventLogReader, heartbeat_s: float) -> None:
        self.turns, self.events, self.heartbeat_s = turns, events, heartbeat_s

    async def start(
        self, tenant: str, request: gateway_pb2.SendMessageRequest, deadline_s: float | None
    ) -> tuple[str, int]:
        """Start the turn; returns (turn_id, seq before its first event)."""
        # One hop to sessions: the lease answers NOT_FOUND for an unknown session and
        # carries the pending interrupts that make a paused session refuse a new turn.
        return await self.turns.start(
            tenant,
            request.session_id,
            request.content,
            request.model,
            deadline_s,
            strategy=contract.strategy(request.multitask_strategy),
            options=options(request),
        )

    async def stream(self, out: Outlet, request: gateway_pb2.SendMessageRequest, turn_id: str, start_seq: int) -> None:
        """The started turn's events to the caller; with cancel_on_disconnect, a caller gone before
        its end cancels it."""
        ended = False
        try:
            # The turn runs on its own; this stream only reads its events from the log.
            async for mine in follow(self.events, self.heartbeat_s, request.session_id, turn_id, start_seq):
                ended = any(ends_stream(e) for e in mine)
                await out.send(encoded(mine) or gateway_pb2.SendMessageResponse(events=mine), mine)
        finally:
            if request.cancel_on_disconnect and not ended:
                await asyncio.shield(self.turns.cancel(request.session_id, turn_id))
