"""The gateway's own appends to a turn's log: each has an id of its own, since sessions drops an
append whose id it has already seen (a resend)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from cogmesh.sessions.v1 import sessions_pb2
from gateway.settings import GatewaySettings
from gateway.turns import Turns


class FakeSessions:
    """AcquireTurnLease over a turn paused and answered meanwhile; AppendEvents dedupes by id as sessions does."""

    def __init__(self) -> None:
        self.stored: list[sessions_pb2.AppendEventsRequest] = []
        self.ids: set[str] = set()
        self.appended = asyncio.Event()

    async def AcquireTurnLease(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        return sessions_pb2.AcquireTurnLeaseResponse(lease_token=5, pending_interrupt_ids=["i1"], last_seq=0)

    async def ListCheckpoints(self, request: Any) -> Any:
        return sessions_pb2.ListCheckpointsResponse()  # answered meanwhile: nothing waits

    async def AppendEvents(self, request: Any) -> Any:
        if request.append_id not in self.ids:
            self.ids.add(request.append_id)
            self.stored.append(request)
        if len(self.stored) >= 2:
            self.appended.set()
        return sessions_pb2.AppendEventsResponse(last_seq=len(self.stored))


class NoRuntime:
    async def StartTurn(self, request: Any, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "down")


class FakeClients:
    def __init__(self) -> None:
        self.sessions, self.runtime = FakeSessions(), NoRuntime()


async def test_the_waiting_notice_is_not_taken_for_a_resend_of_the_opening() -> None:
    clients = FakeClients()
    turns = Turns(GatewaySettings(), clients)  # type: ignore[arg-type]
    try:
        await turns.start("acme", "s1", "hello", "")
        await asyncio.wait_for(clients.sessions.appended.wait(), 30)
    finally:
        await turns.close()
    accepted, waiting = clients.sessions.stored
    assert accepted.events[0].status.text == "accepted"
    assert waiting.events[0].native_notice.kind == "waiting_for_runtime"
