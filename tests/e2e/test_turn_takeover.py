"""Processes killed mid-turn (SIGKILL: no goodbye) while the suite shares one Redis: the turn goes on.

- A gateway dies: it only read the turn's log; the runtime keeps driving the turn and a
  watcher on the other gateway sees it to its end, every seq once.
- The runtime running the turn dies: its lease lapses, the other runtime claims the turn,
  replays its journal and finishes it; the client's stream on the gateway never breaks.
- The runtime running the turn is stopped (SIGTERM, as a deploy or a node drain does): it
  hands the turn over at once, and the other runtime finishes it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import grpc
import pytest

from cogmesh.client.results import voided
from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2, sessions_pb2_grpc
from tests.support.replica_processes import ReplicaProcesses

LONG = "w " * 9_000  # about 3,000 streamed deltas, 1 ms apart: still streaming when a process dies
LEASE_TTL_S = 2  # short leases: a takeover takes seconds, not the production 6
TENANT = "default"  # dev mode's tenant


@pytest.fixture(scope="module")
def suite(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicaProcesses]:
    running = ReplicaProcesses.on(
        redis_url,
        f"cogmesh-takeover-{os.getpid()}:",
        tmp_path_factory.mktemp("takeover-logs"),
        local_delay_ms="1",
        turn_lease_ttl_s=str(LEASE_TTL_S),
        turn_lease_renew_s="0.5",
        takeover_poll_s="0.2",
        log_level="info",  # a hand-over shows in the runtime's log
    )
    try:
        running.start_all()
        yield running
    finally:
        running.stop()


def payload(event: events_pb2.RuntimeEvent) -> str:
    return event.WhichOneof("payload") or ""


async def read_until_end(
    call: grpc.aio.StreamStreamCall | grpc.aio.UnaryStreamCall, events: list, timeout_s: float
) -> None:  # type: ignore[type-arg]
    """Add the stream's events to `events` until the turn's final or error."""
    async with asyncio.timeout(timeout_s):
        while not events or payload(events[-1]) not in ("final", "error"):
            message = await call.read()
            assert message is not grpc.aio.EOF, "the stream ended before the turn did"
            events += message.events


async def start_long_turn(gateway: gateway_pb2_grpc.GatewayServiceStub) -> tuple[str, grpc.aio.UnaryStreamCall, list]:  # type: ignore[type-arg]
    session_id = (await gateway.CreateSession(gateway_pb2.CreateSessionRequest(), timeout=10)).session.session_id
    call = gateway.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content=LONG))
    events: list[events_pb2.RuntimeEvent] = []
    async with asyncio.timeout(60):
        while sum(payload(e) == "assistant_delta" for e in events) < 20:  # streaming now
            events += (await call.read()).events
    return session_id, call, events


def assert_whole_turn(events: list[events_pb2.RuntimeEvent], first_seq: int = 1) -> None:
    """Every seq once, in order, and one end: the final answer."""
    assert [e.seq for e in events] == list(range(first_seq, first_seq + len(events))), "a seq missing or repeated"
    ends = [payload(e) for e in events if payload(e) in ("final", "error")]
    assert ends == ["final"], ends
    answer = events[-1].final.text
    assert answer.startswith(f'You said: "{LONG.strip()}".'), "the whole answer, though its turn changed hands"


async def test_a_dead_gateways_turn_goes_on_and_a_watcher_elsewhere_sees_it_end(suite: ReplicaProcesses) -> None:
    async with (
        grpc.aio.insecure_channel(suite.addresses["gateway_a"]) as ca,
        grpc.aio.insecure_channel(suite.addresses["gateway_b"]) as cb,
    ):
        a, b = gateway_pb2_grpc.GatewayServiceStub(ca), gateway_pb2_grpc.GatewayServiceStub(cb)  # type: ignore[no-untyped-call]
        session_id, call, events = await start_long_turn(a)
        suite.kill("gateway_a")
        watcher = b.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=events[-1].seq))
        await read_until_end(watcher, events, 120)
        watcher.cancel()
        call.cancel()
        assert_whole_turn(events)

        # The session takes the next turn at once: nothing of the dead gateway's is left to wait out.
        retried = [
            e
            async for r in b.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content="6 * 7?"))
            for e in r.events
        ]
        assert payload(retried[-1]) == "final" and retried[0].seq == events[-1].seq + 1
    suite.start("gateway_a")


async def holder_recorded(
    sessions: sessions_pb2_grpc.SessionsServiceStub, ask: sessions_pb2.GetTurnLeaseRequest
) -> sessions_pb2.TurnLease:
    """The lease once its holder is recorded, with the runtime's first renewal (a condition, not a delay)."""
    async with asyncio.timeout(30):
        while True:
            lease = (await sessions.GetTurnLease(ask)).lease
            if lease.holder:
                return lease
            await asyncio.sleep(0.05)


async def test_a_dead_runtimes_turn_is_taken_over_and_its_stream_never_breaks(suite: ReplicaProcesses) -> None:
    async with (
        grpc.aio.insecure_channel(suite.addresses["gateway_a"]) as ca,
        grpc.aio.insecure_channel(suite.addresses["sessions"]) as cs,
    ):
        gateway = gateway_pb2_grpc.GatewayServiceStub(ca)  # type: ignore[no-untyped-call]
        sessions = sessions_pb2_grpc.SessionsServiceStub(cs)  # type: ignore[no-untyped-call]
        session_id, call, events = await start_long_turn(gateway)
        ask = sessions_pb2.GetTurnLeaseRequest(tenant_id=TENANT, session_id=session_id)
        lease = await holder_recorded(sessions, ask)
        holders = {suite.addresses[name]: name for name in ("runtime_a", "runtime_b")}
        assert lease.holder in holders, f"{lease.holder} runs the turn, not one of {holders}"
        holder = holders[lease.holder]
        killed_at = time.monotonic()
        suite.kill(holder)

        await read_until_end(call, events, 120)  # the same stream the turn started on
        took = time.monotonic() - killed_at
        assert_whole_turn(events)
        texts = [e.status.text for e in events if payload(e) == "status"]
        assert "taken over" in texts, texts
        notices = [e.native_notice for e in events if payload(e) == "native_notice"]
        assert any(n.kind == "step_retried" for n in notices), "the redone step's deltas are voided"
        void = voided(events)
        streamed = "".join(
            e.assistant_delta.text for e in events if payload(e) == "assistant_delta" and e.seq not in void
        )
        assert streamed == events[-1].final.text, "what counts of the stream adds up to the answer once"
        print(f"killed {holder}: the turn ended {took:.1f} s later (lease {LEASE_TTL_S} s)")
        after = await sessions.GetTurnLease(sessions_pb2.GetTurnLeaseRequest(tenant_id=TENANT, session_id=session_id))
        assert not after.HasField("lease"), "the lease was released with the turn's end"
    suite.start(holder)


async def test_a_runtime_stopped_gracefully_hands_its_turn_over(suite: ReplicaProcesses) -> None:
    async with (
        grpc.aio.insecure_channel(suite.addresses["gateway_b"]) as cb,
        grpc.aio.insecure_channel(suite.addresses["sessions"]) as cs,
    ):
        gateway = gateway_pb2_grpc.GatewayServiceStub(cb)  # type: ignore[no-untyped-call]
        sessions = sessions_pb2_grpc.SessionsServiceStub(cs)  # type: ignore[no-untyped-call]
        session_id, call, events = await start_long_turn(gateway)
        lease = await holder_recorded(
            sessions, sessions_pb2.GetTurnLeaseRequest(tenant_id=TENANT, session_id=session_id)
        )
        holders = {suite.addresses[name]: name for name in ("runtime_a", "runtime_b")}
        holder = holders[lease.holder]
        stopped_at = time.monotonic()
        code = await asyncio.to_thread(suite.terminate, holder)
        assert code == 0, f"{holder} exited with {code} on SIGTERM"
        assert "turns handed over" in suite.log(holder), "it handed its turn over on the way out"

        await read_until_end(call, events, 120)
        assert_whole_turn(events)
        assert "taken over" in [e.status.text for e in events if payload(e) == "status"]
        void = voided(events)
        streamed = "".join(
            e.assistant_delta.text for e in events if payload(e) == "assistant_delta" and e.seq not in void
        )
        assert streamed == events[-1].final.text
        print(f"stopped {holder}: the turn ended {time.monotonic() - stopped_at:.1f} s later")
    suite.start(holder)
