"""What a client of the suite does in the fault tests: sessions, turns, a watcher that
resumes from its cursor, and reading the session back."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from tests.reliability.cluster import Cluster

TENANT = "default"  # dev mode: every caller is this tenant
SLOW_TOOL = "mcp__slow__sleep"
Event = events_pb2.RuntimeEvent


def slow_request(session_id: str, seconds: float) -> gateway_pb2.SendMessageRequest:
    """A turn of the `slow` agent whose tool call sleeps `seconds` in the middle."""
    content = f'@{SLOW_TOOL} {{"seconds": {seconds}}}'
    return gateway_pb2.SendMessageRequest(session_id=session_id, content=content)


def calc_request(session_id: str) -> gateway_pb2.SendMessageRequest:
    """A short turn: one calculator call (checked by policy), four messages stored."""
    return gateway_pb2.SendMessageRequest(session_id=session_id, content="What is 6 * 7?")


def kind(event: Event) -> str:
    return event.WhichOneof("payload") or ""


def is_end(event: Event) -> bool:
    return kind(event) in ("final", "error")


@contextlib.asynccontextmanager
async def gateway(cluster: Cluster) -> AsyncIterator[gateway_pb2_grpc.GatewayServiceStub]:
    async with grpc.aio.insecure_channel(cluster.addresses["gateway"]) as channel:
        yield gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]


@contextlib.asynccontextmanager
async def sessions(cluster: Cluster) -> AsyncIterator[sessions_pb2_grpc.SessionsServiceStub]:
    async with grpc.aio.insecure_channel(cluster.addresses["sessions"]) as channel:
        yield sessions_pb2_grpc.SessionsServiceStub(channel)  # type: ignore[no-untyped-call]


async def new_session(cluster: Cluster, agent: str = "slow") -> str:
    async with gateway(cluster) as stub:
        reply = await stub.CreateSession(gateway_pb2.CreateSessionRequest(agent=agent), timeout=10)
    return str(reply.session.session_id)


async def run_turn(cluster: Cluster, request: gateway_pb2.SendMessageRequest, timeout_s: float = 30) -> list[Event]:
    """One turn, as a client that honours RetryInfo: a turn every runtime worker refused up front
    (RESOURCE_EXHAUSTED: admission control, while a fault made their lease renewals late) is sent
    again after the delay it names, within `timeout_s`; any other failure is the caller's."""
    deadline = time.monotonic() + timeout_s
    async with gateway(cluster) as stub:
        while True:
            call = stub.SendMessage(request, timeout=max(1.0, deadline - time.monotonic()))
            try:
                return [event async for response in call for event in response.events]
            except grpc.aio.AioRpcError as exc:
                delay = _retry_delay(exc)
                if delay is None or time.monotonic() + delay >= deadline:
                    raise
                await asyncio.sleep(delay)


def _retry_delay(exc: grpc.aio.AioRpcError) -> float | None:
    """The RetryInfo delay of a RESOURCE_EXHAUSTED refusal; None for any other error."""
    if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            return float(retry.retry_delay.ToNanoseconds()) / 1e9
    return None


async def retry_turn(
    cluster: Cluster, request: gateway_pb2.SendMessageRequest, attempts: int = 3, timeout_s: float = 30
) -> list[Event]:
    """What a client does with a retryable error event: send the message again, a second later.

    Just after a dependency restarts, the runtime's channel to it may still be backing off
    and fail a turn fast with UNAVAILABLE (see RELIABILITY.md, "findings").
    """
    for _ in range(attempts - 1):
        events = await run_turn(cluster, request, timeout_s)
        if not (kind(events[-1]) == "error" and events[-1].error.retryable):
            return events
        await asyncio.sleep(1.0)
    return await run_turn(cluster, request, timeout_s)


async def messages(cluster: Cluster, session_id: str) -> list[messages_pb2.Message]:
    """The session's stored messages, read from the sessions service itself."""
    async with sessions(cluster) as stub:
        reply = await stub.ListMessages(
            sessions_pb2.ListMessagesRequest(tenant_id=TENANT, session_id=session_id, page_size=1000), timeout=10
        )
    return list(reply.messages)


async def last_seq(cluster: Cluster, session_id: str) -> int:
    async with gateway(cluster) as stub:
        call = stub.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, stop_when_idle=True), timeout=10)
        seqs = [event.seq async for response in call for event in response.events]
    return seqs[-1] if seqs else 0


@dataclass
class Outcome:
    """How a caller's stream ended: its events, and the status if the RPC itself failed."""

    events: list[Event]
    code: grpc.StatusCode | None
    details: str
    seconds: float

    @property
    def end(self) -> Event | None:
        return self.events[-1] if self.events and is_end(self.events[-1]) else None


async def finish(call: Any, events: list[Event], started: float) -> Outcome:
    """Read the rest of a SendMessage stream; a failed RPC is an outcome, not an exception."""
    try:
        while (response := await call.read()) is not grpc.aio.EOF:
            events.extend(response.events)
    except grpc.aio.AioRpcError as exc:
        return Outcome(events, exc.code(), exc.details() or "", time.monotonic() - started)
    return Outcome(events, None, "", time.monotonic() - started)


@dataclass
class Watcher:
    """A second client subscribed to the session that reconnects from its cursor when cut off."""

    cluster: Cluster
    session_id: str
    cursor: int
    seen: list[Event] = field(default_factory=list)
    reconnects: int = 0
    errors: list[grpc.StatusCode] = field(default_factory=list)

    async def follow(self, until: str, timeout_s: float) -> None:
        """Read, reconnecting after each failure, until turn `until` has ended (final or error)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                async with gateway(self.cluster) as stub:
                    request = gateway_pb2.SubscribeRequest(session_id=self.session_id, after_seq=self.cursor)
                    call = stub.Subscribe(request, timeout=max(0.1, deadline - time.monotonic()))
                    async for response in call:
                        self.seen.extend(response.events)
                        if response.events:
                            self.cursor = response.events[-1].seq
                        if any(e.turn_id == until and is_end(e) for e in response.events):
                            return
            except grpc.aio.AioRpcError as exc:
                self.errors.append(exc.code())
                if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    return
                self.reconnects += 1
                await asyncio.sleep(0.2)  # the gateway may be restarting

    def check_contiguous(self, first_cursor: int) -> None:
        seqs = [e.seq for e in self.seen]
        assert seqs == list(range(first_cursor + 1, first_cursor + 1 + len(seqs))), (
            f"gap or duplicate in seqs after {self.reconnects} reconnect(s): {seqs}"
        )
