"""Turn lifecycle at the gateway: back-to-back turns, and turns that outlive their caller."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2
from tests.integration.conftest import running_suite, suite_with_hanging


async def test_the_next_turn_can_start_as_soon_as_final_arrives() -> None:
    async with running_suite() as (_, stubs):
        gw = stubs["gateway"]
        session = (await gw.CreateSession(gateway_pb2.CreateSessionRequest())).session
        for i in range(20):
            request = gateway_pb2.SendMessageRequest(session_id=session.session_id, content=f"What is {i} + 1?")
            last = [e async for r in gw.SendMessage(request, timeout=10) for e in r.events][-1]
            assert last.final.text.endswith(f"= {i + 1}.")
        assert (
            await gw.GetSession(gateway_pb2.GetSessionRequest(session_id=session.session_id))
        ).session.message_count == 80


async def test_dropping_the_stream_does_not_cancel_the_turn() -> None:
    async with running_suite() as (_, stubs):
        gw = stubs["gateway"]
        session = (await gw.CreateSession(gateway_pb2.CreateSessionRequest())).session
        call = gw.SendMessage(gateway_pb2.SendMessageRequest(session_id=session.session_id, content="w " * 3000))
        await call.read()
        call.cancel()  # the caller goes away after the first event
        replay = gw.Subscribe(gateway_pb2.SubscribeRequest(session_id=session.session_id, stop_when_idle=True))
        events = [e async for r in replay for e in r.events]
        assert events[-1].HasField("final")
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        await asyncio.sleep(0)


async def _wait_turn_end(gw: Any, session_id: str, turn_id: str = "") -> events_pb2.RuntimeEvent:
    replay = gw.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id))
    async for response in replay:
        for event in response.events:
            if event.WhichOneof("payload") in ("final", "error") and turn_id in ("", event.turn_id):
                replay.cancel()
                return event
    raise AssertionError("the turn never ended")


async def test_cancel_on_disconnect_cancels_the_turn() -> None:
    async with (
        suite_with_hanging("policy") as (servers, reached),
        grpc.aio.insecure_channel(servers["gateway"].address) as channel,
    ):
        gw = gateway_pb2_grpc.GatewayServiceStub(channel)
        session = (await gw.CreateSession(gateway_pb2.CreateSessionRequest())).session
        call = gw.SendMessage(
            gateway_pb2.SendMessageRequest(session_id=session.session_id, content="1 + 1", cancel_on_disconnect=True)
        )
        await asyncio.wait_for(reached.wait(), 5)  # the turn now waits on the policy check
        started = time.monotonic()
        call.cancel()
        last = await asyncio.wait_for(_wait_turn_end(gw, session.session_id), 5)
        assert last.error.kind == events_pb2.ERROR_KIND_CANCELLED
        assert time.monotonic() - started < 1.5  # well before the 2 s policy deadline


async def test_the_callers_deadline_bounds_the_turn() -> None:
    async with (
        suite_with_hanging("policy") as (servers, _),
        grpc.aio.insecure_channel(servers["gateway"].address) as channel,
    ):
        gw = gateway_pb2_grpc.GatewayServiceStub(channel)
        session = (await gw.CreateSession(gateway_pb2.CreateSessionRequest())).session
        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in gw.SendMessage(
                gateway_pb2.SendMessageRequest(session_id=session.session_id, content="1 + 1"), timeout=0.5
            ):
                pass
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        last = await asyncio.wait_for(_wait_turn_end(gw, session.session_id), 5)
        assert last.error.kind == events_pb2.ERROR_KIND_DEADLINE_EXCEEDED
        assert time.monotonic() - started < 1.5  # the runtime stopped at the caller's deadline, not the policy's


def _runner(servers: dict[str, Any]) -> Any:
    return servers["gateway"].app.mounts[0].servicer.turns


async def test_interrupt_cancels_the_running_turn_and_runs_the_new_one() -> None:
    async with (
        suite_with_hanging("policy") as (servers, reached),
        grpc.aio.insecure_channel(servers["gateway"].address) as channel,
    ):
        gw = gateway_pb2_grpc.GatewayServiceStub(channel)
        session = (await gw.CreateSession(gateway_pb2.CreateSessionRequest())).session
        first = gw.SendMessage(gateway_pb2.SendMessageRequest(session_id=session.session_id, content="1 + 1"))
        await asyncio.wait_for(reached.wait(), 5)  # the first turn now waits on the policy check
        runner = _runner(servers)
        turn_id, _ = await runner.start(
            "default", session.session_id, "hello", "", strategy=sessions_pb2.MULTITASK_STRATEGY_INTERRUPT
        )
        first_events = [e async for r in first for e in r.events]
        assert first_events[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
        last = await asyncio.wait_for(_wait_turn_end(gw, session.session_id, turn_id), 5)
        assert last.HasField("final") and "hello" in last.final.text


async def test_enqueue_waits_for_the_running_turn() -> None:
    async with (
        suite_with_hanging("policy") as (servers, reached),
        grpc.aio.insecure_channel(servers["gateway"].address) as channel,
    ):
        gw = gateway_pb2_grpc.GatewayServiceStub(channel)
        session = (await gw.CreateSession(gateway_pb2.CreateSessionRequest())).session
        first = gw.SendMessage(gateway_pb2.SendMessageRequest(session_id=session.session_id, content="1 + 1"))
        await asyncio.wait_for(reached.wait(), 5)
        runner = _runner(servers)
        with pytest.raises(Exception, match="busy with turn"):  # REJECT, the default
            await runner.start("default", session.session_id, "hello", "")
        turn_id, _ = await runner.start(
            "default", session.session_id, "hello", "", deadline_s=10, strategy=sessions_pb2.MULTITASK_STRATEGY_ENQUEUE
        )
        first_events = [e async for r in first for e in r.events]
        assert first_events[-1].error.kind == events_pb2.ERROR_KIND_UNAVAILABLE  # the policy deadline, as before
        last = await asyncio.wait_for(_wait_turn_end(gw, session.session_id, turn_id), 5)
        assert last.HasField("final")
