"""Ends turns whose gateway died: without it their subscribers would wait for an end event forever.

The gateway driving a turn marks it open in the event log and renews the mark with
the turn's lease. A replica that dies stops both. Every replica sweeps the log's
expired marks every few seconds; for each one whose lease has also gone (asked of
the sessions service, so a driver that is merely slow keeps its turn), it appends a
retryable error event. `reap` does that atomically and only while the mark is still
there, so with many replicas sweeping, exactly one event lands. The next turn of the
session may get there first: opening it ends a lapsed mark's turn the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import random

import grpc

from cogmesh.sessions.v1 import sessions_pb2
from gateway.event_log import EventLog, OpenTurn, lost_turn_event
from services.kit.clients import Clients
from services.kit.errors import CogmeshError
from services.kit.logging import log


class Reaper:
    def __init__(self, events: EventLog, clients: Clients, every_s: float):
        self.events, self.clients, self.every_s = events, clients, every_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="gateway-reaper")

    async def _run(self) -> None:
        while True:
            # Jitter: replicas started together do not sweep in lockstep.
            await asyncio.sleep(self.every_s * random.uniform(0.5, 1.5))
            try:
                await self.sweep()
            except (CogmeshError, grpc.aio.AioRpcError) as exc:  # Redis or sessions away: next sweep
                log.warning("reaper sweep failed", error=str(exc))

    async def sweep(self) -> list[OpenTurn]:
        """Reap every orphaned turn found now; returns those this replica ended."""
        reaped = []
        for turn in await self.events.expired_turns():
            if await self._lease_alive(turn):
                continue
            if await self.events.reap(turn, lost_turn_event(turn)):
                log.warning("ended a turn whose gateway was lost", session_id=turn.session_id, turn_id=turn.turn_id)
                reaped.append(turn)
        return reaped

    async def _lease_alive(self, turn: OpenTurn) -> bool:
        try:
            reply = await self.clients.sessions.GetTurnLease(
                sessions_pb2.GetTurnLeaseRequest(tenant_id=turn.tenant_id, session_id=turn.session_id)
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return False  # the session is gone: nobody holds anything
            raise
        holder: str = reply.lease.turn_id
        return holder.split(":resume:", 1)[0] == turn.turn_id

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
