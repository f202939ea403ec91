"""Several runtime replicas behind one gateway: turns spread over them (round_robin, per call),
a cancel reaches whichever replica runs the turn, and a draining replica gets no new turns
while its own turns finish."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_asyncio

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.kit.server import RunningServer
from services.suite.inprocess import Suite, start_suite
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session, send

pytestmark = pytest.mark.asyncio(loop_scope="module")

# Turns of 200 deltas, 25 ms apart: long enough to be running on their replica while the test acts.
SLOW = SUITE_SETTINGS.model_copy(update={"local_reply_tokens": 200, "local_delay_ms": 25.0})


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def suite() -> AsyncIterator[Suite]:
    started = await start_suite(SLOW, runtimes=2)
    try:
        yield started
    finally:
        await started.stop(0)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def gateway(suite: Suite) -> AsyncIterator[gateway_pb2_grpc.GatewayServiceStub]:
    async with grpc.aio.insecure_channel(suite.gateway_address) as channel:
        yield gateway_pb2_grpc.GatewayServiceStub(channel)


def turns_on(server: RunningServer) -> set[tuple[str, str]]:
    """(session_id, turn_id) of the turns the runtime replica is running now."""
    servicer: Any = server.app.mounts[0].servicer
    return set(servicer.runner._running)


def running(server: RunningServer) -> int:
    return len(turns_on(server))


async def until(condition: Any) -> None:
    async with asyncio.timeout(TIMEOUT_S):
        while not condition():  # noqa: ASYNC110 - the turns start on other tasks
            await asyncio.sleep(0.01)


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
        return await asyncio.wait_for(self.task, TIMEOUT_S)


async def test_the_gateway_is_told_every_runtime_replica(suite: Suite) -> None:
    replicas = suite.replicas("runtime")
    assert len(replicas) == 2
    gateway: Any = suite.servers["gateway"].app.mounts[0].servicer
    assert gateway.settings.runtime_addr == ",".join(r.address for r in replicas)


async def test_turns_spread_over_the_replicas_and_each_can_be_cancelled(
    suite: Suite, gateway: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    replicas = suite.replicas("runtime")
    turns = [Turn(gateway, await new_session(gateway)) for _ in range(4)]
    await until(lambda: sum(running(r) for r in replicas) == 4)
    assert all(running(r) >= 1 for r in replicas), [running(r) for r in replicas]  # round_robin, not pick_first

    # A cancel goes to every replica: only the one running the turn has it. One replica's turns
    # are cancelled one after the other, so round_robin alone would send one cancel astray.
    for session_id, turn_id in sorted(turns_on(replicas[0])) + sorted(turns_on(replicas[1])):
        reply = await gateway.CancelTurn(gateway_pb2.CancelTurnRequest(session_id=session_id))
        assert reply.cancelled and reply.turn_id == turn_id
    for turn in turns:
        events = await turn.end()
        assert events[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
        assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_a_draining_replica_finishes_its_turn_and_gets_no_new_ones(
    suite: Suite, gateway: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    first, second = suite.replicas("runtime")
    old = [Turn(gateway, await new_session(gateway)) for _ in range(2)]
    await until(lambda: running(first) == 1 and running(second) == 1)

    second.drain_s = 60.0  # NOT_SERVING for the rest of the test: calls in flight go on, new ones go elsewhere
    draining = asyncio.create_task(second.stop(grace=TIMEOUT_S))
    try:
        # A whole turn later the gateway's health watch has seen the change...
        events = await send(gateway, await new_session(gateway), "What is 6 * 7?")
        assert "42" in events[-1].final.text
        # ...and round_robin gives every new turn to the replica that serves.
        new = [Turn(gateway, await new_session(gateway)) for _ in range(3)]
        await until(lambda: running(first) + running(second) == 5)
        assert (running(first), running(second)) == (4, 1)
        for turn in old + new:  # every turn runs to its end, the draining replica's included
            events = await turn.end()
            assert events[-1].HasField("final"), events[-1]
        assert running(second) == 0
    finally:
        second.drain_s = 0.0
        draining.cancel()
        await asyncio.gather(draining, return_exceptions=True)


async def test_a_stopped_replica_hands_its_turn_to_the_other_in_memory_mode(
    suite: Suite, gateway: gateway_pb2_grpc.GatewayServiceStub
) -> None:
    """No Redis: the sessions service's own store keeps the journal and the leases, so a runtime
    replica stopped mid-turn (a deploy) hands the turn over and the other replica finishes it."""
    turn = Turn(gateway, await new_session(gateway))
    await until(lambda: sum(running(r) for r in suite.replicas("runtime")) == 1)
    name = next(n for n, server in suite.servers.items() if server in suite.replicas("runtime") and running(server))
    try:
        await suite.servers[name].stop(grace=0)
        events = await turn.end()
        assert events[-1].HasField("final"), events[-1]
        assert "taken over" in [e.status.text for e in events if e.HasField("status")]
        seqs = [e.seq for e in events]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    finally:
        await suite.restart(name)
