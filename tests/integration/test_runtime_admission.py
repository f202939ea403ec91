"""Admission control over two runtime replicas (issue 32, item 6).

A replica whose lease renewals run late (here: its renewals are held back, as a saturated
store or loop holds them) refuses new turns, and the gateway gives them to the other one.
When every replica refuses, a REJECT turn is answered RESOURCE_EXHAUSTED with RetryInfo (its
end logged, the session free) and an ENQUEUE turn waits, keeping its lease, until one has
room. No turn is taken over meanwhile."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import timestamp_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.runtime.v1 import runtime_pb2, runtime_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from services.kit.server import RunningServer
from services.lib import journal_kinds
from services.suite.inprocess import Suite, start_suite
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session, payload, send

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Turns of 200 deltas 25 ms apart (5 s): still running while the test acts. Leases of 3 s renewed every
# 0.2 s: a replica refuses new turns once a renewal is (3 - 0.2) / 2 = 1.4 s late, well before its lease
# would lapse (2.8 s late).
SETTINGS = SUITE_SETTINGS.model_copy(
    update={
        "local_reply_tokens": 200,
        "local_delay_ms": 25.0,
        "turn_lease_ttl_s": 3,
        "turn_lease_renew_s": 0.2,
        "takeover_poll_s": 0.2,
    }
)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def suite() -> AsyncIterator[Suite]:
    started = await start_suite(SETTINGS, runtimes=2)
    try:
        yield started
    finally:
        await started.stop(0)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def gateway(suite: Suite) -> AsyncIterator[gateway_pb2_grpc.GatewayServiceStub]:
    async with grpc.aio.insecure_channel(suite.gateway_address) as channel:
        yield gateway_pb2_grpc.GatewayServiceStub(channel)


def runner_of(server: RunningServer) -> Any:
    return server.app.mounts[0].servicer.runner


def running(server: RunningServer) -> int:
    return len(runner_of(server)._running)


async def until(condition: Any) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        while not condition():  # noqa: ASYNC110 - the turns and renewals run on other tasks
            await asyncio.sleep(0.01)


class HeldRenewals:
    """A replica's sessions stub whose RenewTurnLeases waits until released: its renewals run late."""

    def __init__(self, sessions: Any) -> None:
        self._sessions = sessions
        self.released = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sessions, name)

    async def RenewTurnLeases(self, request: Any, **options: Any) -> Any:
        await self.released.wait()
        return await self._sessions.RenewTurnLeases(request, **options)


class Clients:
    """The replica's clients, but for its held renewals."""

    def __init__(self, clients: Any, sessions: HeldRenewals) -> None:
        self._clients, self.sessions = clients, sessions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._clients, name)


class Lagging:
    """Holds back the lease renewals of the given replicas until `release`."""

    def __init__(self, *servers: RunningServer) -> None:
        self.runners = [runner_of(server) for server in servers]
        self.held: list[HeldRenewals] = []
        for runner in self.runners:
            held = HeldRenewals(runner.clients.sessions)
            runner.clients = Clients(runner.clients, held)
            self.held.append(held)

    async def refusing(self) -> None:
        await until(lambda: all(r.admission.refusal(len(r._running)) is not None for r in self.runners))

    async def release(self) -> None:
        for held in self.held:
            held.released.set()
        for runner in self.runners:
            runner.clients = runner.clients._clients
        # On time again once the late renewals are out of the window.
        await until(lambda: all(r.admission.refusal(len(r._running)) is None for r in self.runners))


class Turn:
    """A SendMessage stream read in the background, until its turn ends."""

    def __init__(self, gateway: gateway_pb2_grpc.GatewayServiceStub, session_id: str) -> None:
        self.call = gateway.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content="go"))
        self.events: list[events_pb2.RuntimeEvent] = []
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> list[events_pb2.RuntimeEvent]:
        async for response in self.call:
            self.events.extend(response.events)
        return self.events

    async def end(self) -> list[events_pb2.RuntimeEvent]:
        return await asyncio.wait_for(self.task, TIMEOUT_S * 2)


def assert_whole(events: list[events_pb2.RuntimeEvent]) -> None:
    assert events[-1].HasField("final"), events[-1]
    statuses = [e.status.text for e in events if e.HasField("status")]
    assert "taken over" not in statuses and "native_notice" not in [payload(e) for e in events]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_a_replica_that_renews_late_gets_no_new_turns_the_other_takes_them(
    suite: Suite, gateway: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    replicas = suite.replicas("runtime")
    first = Turn(gateway, await new_session(gateway))
    await until(lambda: sum(running(r) for r in replicas) == 1)
    slow = next(r for r in replicas if running(r))
    other = next(r for r in replicas if r is not slow)
    refused_before = runner_of(slow).refused
    lagging = Lagging(slow)
    try:
        await lagging.refusing()
        # Round robin hands every other StartTurn to the slow replica first: it refuses, the other takes it.
        more = [Turn(gateway, await new_session(gateway)) for _ in range(4)]
        await until(lambda: running(other) == 4)
        assert running(slow) == 1, "the slow replica took no new turn"
        assert runner_of(slow).refused > refused_before, "it was asked, and refused"
    finally:
        await lagging.release()
    for turn in [first, *more]:
        assert_whole(await turn.end())
    assert runner_of(slow).taken_over == runner_of(other).taken_over == 0


def retry_delay(err: grpc.aio.AioRpcError) -> tuple[error_details_pb2.ErrorInfo, float]:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    assert status is not None
    info, delay = None, None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            delay = retry.retry_delay.ToNanoseconds() / 1e9
    assert info is not None and delay is not None, status
    return info, delay


async def log_of(gateway: gateway_pb2_grpc.GatewayServiceStub, session_id: str) -> list[events_pb2.RuntimeEvent]:
    """The session's log as it stands (Subscribe replays it, then waits: cut once it has what there is)."""
    events: list[events_pb2.RuntimeEvent] = []
    call = gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id))
    async with asyncio.timeout(TIMEOUT_S):
        async for response in call:
            events.extend(response.events)
            if any(payload(e) in ("final", "error") for e in events):
                break
    call.cancel()
    return events


async def test_every_replica_busy_rejects_with_retry_info_and_an_enqueued_turn_waits_for_room(
    suite: Suite, gateway: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    replicas = suite.replicas("runtime")
    busy = [Turn(gateway, await new_session(gateway)) for _ in range(2)]
    await until(lambda: all(running(r) == 1 for r in replicas))
    lagging = Lagging(*replicas)
    enqueued_session = await new_session(gateway)
    try:
        await lagging.refusing()

        # REJECT (the default): the caller is told to come back, and the turn's end is logged, retryable.
        rejected_session = await new_session(gateway)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await send(gateway, rejected_session, "go")
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        info, delay = retry_delay(refused.value)
        assert info.reason == "RATE_LIMITED" and info.metadata["refused_by"] == "2" and delay == 0.2
        assert "every runtime replica is too busy" in refused.value.details()
        logged = await log_of(gateway, rejected_session)
        assert [payload(e) for e in logged] == ["status", "error"]
        end = logged[-1].error
        assert end.kind == events_pb2.ERROR_KIND_RATE_LIMITED and end.retryable

        # ENQUEUE: the turn waits (saying so), its lease kept, and runs once a replica has room.
        turns = suite.servers["gateway"].app.mounts[0].servicer.turns
        turn_id, _ = await turns.start(
            "default",
            enqueued_session,
            "What is 6 * 7?",
            "",
            deadline_s=TIMEOUT_S * 3,
            strategy=sessions_pb2.MULTITASK_STRATEGY_ENQUEUE,
        )
        waiting = gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=enqueued_session))
        seen: list[events_pb2.RuntimeEvent] = []
        async with asyncio.timeout(TIMEOUT_S):
            while not any(e.native_notice.kind == "waiting_for_runtime" for e in seen):
                seen.extend((await waiting.read()).events)
        assert "every runtime replica is busy" in seen[-1].native_notice.text
    finally:
        await lagging.release()
    async with asyncio.timeout(TIMEOUT_S * 2):
        while not any(payload(e) in ("final", "error") for e in seen):
            seen.extend((await waiting.read()).events)
    waiting.cancel()
    assert seen[-1].HasField("final") and seen[-1].turn_id == turn_id and "42" in seen[-1].final.text, seen[-1]
    assert "taken over" not in [e.status.text for e in seen if e.HasField("status")]

    # The rejected session is free: its next turn runs.
    events = await send(gateway, rejected_session, "What is 6 * 7?")
    assert "42" in events[-1].final.text
    for turn in busy:
        assert_whole(await turn.end())
    assert all(runner_of(r).taken_over == 0 for r in replicas)


async def open_turn(suite: Suite, session_id: str, ttl_s: int) -> tuple[runtime_pb2.RunTurnRequest, Any]:
    """A turn opened as the gateway opens one (its `accepted` and request logged with the grant), but handed
    to no runtime: (its RunTurnRequest, the grant)."""
    request = runtime_pb2.RunTurnRequest(
        tenant_id="default", session_id=session_id, turn_id=uuid.uuid4().hex, content="go"
    )
    accepted = events_pb2.RuntimeEvent(
        turn_id=request.turn_id,
        status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_QUEUED, text="accepted", content="go"),
    )
    async with grpc.aio.insecure_channel(suite.servers["sessions"].address) as channel:
        grant = await sessions_pb2_grpc.SessionsServiceStub(channel).AcquireTurnLease(
            sessions_pb2.AcquireTurnLeaseRequest(
                tenant_id="default",
                session_id=session_id,
                turn_id=request.turn_id,
                ttl_seconds=ttl_s,
                events=[accepted],
                entries=[journal_kinds.entry(journal_kinds.REQUEST, request.SerializeToString())],
            ),
            timeout=TIMEOUT_S,
        )
    request.lease_token = grant.lease_token
    return request, grant


async def start_at(
    server: RunningServer, request: runtime_pb2.RunTurnRequest, lease_expires: float
) -> runtime_pb2.StartTurnResponse:
    expire = timestamp_pb2.Timestamp()
    expire.FromNanoseconds(int(lease_expires * 1e9))
    async with grpc.aio.insecure_channel(server.address) as channel:
        return await runtime_pb2_grpc.RuntimeServiceStub(channel).StartTurn(
            runtime_pb2.StartTurnRequest(turn=request, lease_expire_time=expire), timeout=TIMEOUT_S
        )


async def test_a_start_turn_read_after_its_lease_ran_out_leaves_the_turn_to_the_replica_that_claimed_it(
    suite: Suite, gateway: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    """Issue 32 item 6: a saturated replica read StartTurn after the lease lapsed and another replica had
    taken the turn over; it ran the turn too, until its first write was refused (the model called twice, seen
    at 1,000 turns at once). It now renews first, finds the claim, and leaves the turn alone."""
    replicas = suite.replicas("runtime")
    before = {id(r): runner_of(r).taken_over for r in replicas}
    session_id = await new_session(gateway)
    request, grant = await open_turn(suite, session_id, ttl_s=1)
    await until(lambda: any(runner_of(r).taken_over > before[id(r)] for r in replicas))  # its lease lapsed
    late = next(r for r in replicas if runner_of(r).taken_over == before[id(r)])
    reply = await start_at(late, request, grant.expire_time.ToNanoseconds() / 1e9)
    assert reply.holder == "", "it found the turn claimed, and said it does not run it"
    assert (session_id, request.turn_id) not in runner_of(late)._running
    events = await log_of(gateway, session_id)
    assert [payload(e) for e in events].count("final") == 1 and events[-1].HasField("final"), events[-1]


async def test_a_start_turn_read_late_whose_lease_still_holds_renews_it_naming_the_replica(
    suite: Suite, gateway: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    session_id = await new_session(gateway)
    request, _ = await open_turn(suite, session_id, ttl_s=60)
    replica = suite.replicas("runtime")[0]
    reply = await start_at(replica, request, time.time())  # as if read a whole TTL after the grant
    assert reply.holder == runner_of(replica).address
    running = runner_of(replica)._running[(session_id, request.turn_id)]
    assert running.log.named, "its renewal named this replica the holder before the turn started"
    events = await log_of(gateway, session_id)
    assert events[-1].HasField("final") and "taken over" not in [e.status.text for e in events if e.HasField("status")]
