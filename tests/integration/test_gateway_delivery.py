"""Delivery through the gateway: a stalled subscriber is ended without slowing anyone,
cursors are checked before stop_when_idle, and the multitask strategies of SendMessage."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
import pytest_asyncio

from cogmesh.common.v1 import events_pb2, turns_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from gateway import delivery
from services.kit.errors import ResourceExhausted
from tests.integration.conftest import (
    SUITE_SETTINGS,
    TIMEOUT_S,
    new_session,
    payload,
    running_suite,
    send,
    status_details,
    subscribe,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

STALL_S = 1.0
# The built-in model waits 1 ms before each chunk: LONG's 4,000 deltas take seconds, so a second
# message always finds the first turn running (without it the runtime finishes LONG in milliseconds).
SETTINGS = SUITE_SETTINGS.model_copy(update={"subscriber_stall_s": STALL_S, "local_delay_ms": 1})
LONG = "w " * 12_000  # about 4,000 streamed deltas: a turn that runs for a while
# A client whose HTTP/2 receive window stays at 1 KiB: once it stops reading, the server cannot send.
TINY_WINDOW = [("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def gateway_address() -> AsyncIterator[str]:
    async with running_suite(SETTINGS) as (suite, _):
        yield suite.servers["gateway"].address


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def gateway(gateway_address: str) -> AsyncIterator[gateway_pb2_grpc.GatewayServiceStub]:
    async with grpc.aio.insecure_channel(gateway_address) as channel:
        yield gateway_pb2_grpc.GatewayServiceStub(channel)


@pytest.fixture
def cut_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, asyncio.Event]]:
    """Sessions whose stream the gateway ended for a stalled reader: `cut_off[session_id]` is set then.

    The suite runs in this process, so the test waits for the cut-off itself, not for a guess of its time.
    """
    ended: dict[str, asyncio.Event] = {}
    send = delivery.Outlet.send

    async def watched(self: delivery.Outlet, message: Any, events: Any = ()) -> None:
        try:
            await send(self, message, events)
        except ResourceExhausted:
            ended.setdefault(self.session_id, asyncio.Event()).set()
            raise

    monkeypatch.setattr(delivery.Outlet, "send", watched)
    yield ended


async def gave_up(cut_off: dict[str, asyncio.Event], session_id: str) -> None:
    await asyncio.wait_for(cut_off.setdefault(session_id, asyncio.Event()).wait(), STALL_S + TIMEOUT_S)


async def read_all(call: Any) -> list[events_pb2.RuntimeEvent]:
    events: list[events_pb2.RuntimeEvent] = []
    while (message := await asyncio.wait_for(call.read(), TIMEOUT_S)) is not grpc.aio.EOF:
        events.extend(message.events)
    return events


async def test_a_stalled_subscriber_is_ended_and_resumes_from_its_cursor(
    gateway_address: str, gateway: gateway_pb2_grpc.GatewayServiceStub, cut_off: dict[str, asyncio.Event]
) -> None:
    session_id = await new_session(gateway)
    healthy = subscribe(gateway, session_id)
    async with grpc.aio.insecure_channel(gateway_address, options=TINY_WINDOW) as stalled_channel:
        stalled = gateway_pb2_grpc.GatewayServiceStub(stalled_channel).Subscribe(
            gateway_pb2.SubscribeRequest(session_id=session_id)
        )
        assert (await asyncio.wait_for(stalled.read(), TIMEOUT_S)).heartbeat  # connected; now it stops reading
        await healthy.next()

        started = time.monotonic()
        turn = await send(gateway, session_id, LONG)  # the stalled reader must not hold the turn back
        took = time.monotonic() - started
        assert payload(turn[-1]) == "final" and len(turn) > 1000
        seen, _ = await healthy.events_until(lambda got: bool(got) and payload(got[-1]) == "final")
        assert seen == turn, "the healthy subscriber must get every event, in order"
        healthy.cancel()

        await gave_up(cut_off, session_id)
        got: list[events_pb2.RuntimeEvent] = []
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            while (message := await asyncio.wait_for(stalled.read(), TIMEOUT_S)) is not grpc.aio.EOF:
                got.extend(message.events)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, caught.value
    info, _ = status_details(caught.value)
    assert info is not None and info.reason == "SUBSCRIBER_TOO_SLOW"
    assert "stopped reading" in (caught.value.details() or "")
    resume = int(info.metadata["resume_after_seq"])
    assert len(got) < len(turn), "it must have been cut off before the end of the turn"
    assert [e.seq for e in got] == list(range(1, len(got) + 1))
    # The message in flight when the server gave up still reaches the client, before the status: the
    # cursor names the last seq the client got (it was one whole batch behind, 60 events, before).
    assert resume == (got[-1].seq if got else 0), "the cursor must be the last seq the client got"
    # Resuming from the cursor it was given misses nothing.
    rest = await read_all(
        gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=resume, stop_when_idle=True))
    )
    assert [e.seq for e in rest] == list(range(resume + 1, turn[-1].seq + 1))
    assert took < 30, f"the turn took {took:.1f}s with a stalled subscriber"


async def test_a_stalled_send_message_caller_does_not_stop_the_turn(
    gateway_address: str, gateway: gateway_pb2_grpc.GatewayServiceStub, cut_off: dict[str, asyncio.Event]
) -> None:
    session_id = await new_session(gateway)
    async with grpc.aio.insecure_channel(gateway_address, options=TINY_WINDOW) as channel:
        call = gateway_pb2_grpc.GatewayServiceStub(channel).SendMessage(
            gateway_pb2.SendMessageRequest(session_id=session_id, content=LONG)
        )
        first = await asyncio.wait_for(call.read(), TIMEOUT_S)
        turn_id = first.events[0].turn_id
        # Never read again: the turn still runs to its end, visible to everyone else.
        replay = await asyncio.wait_for(
            read_all(
                gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=0, stop_when_idle=True))
            ),
            TIMEOUT_S * 3,
        )
        assert payload(replay[-1]) == "final" and replay[-1].turn_id == turn_id
        await gave_up(cut_off, session_id)
        got = list(first.events)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            while (message := await asyncio.wait_for(call.read(), TIMEOUT_S)) is not grpc.aio.EOF:
                got.extend(message.events)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    info, _ = status_details(caught.value)
    assert info is not None and info.reason == "SUBSCRIBER_TOO_SLOW"
    assert int(info.metadata["resume_after_seq"]) == got[-1].seq


@pytest.mark.parametrize("stop_when_idle", [False, True])
async def test_a_cursor_ahead_of_the_log_is_invalid_even_when_idle(
    gateway: gateway_pb2_grpc.GatewayServiceStub, stop_when_idle: bool
) -> None:
    session_id = await new_session(gateway)
    turn = await send(gateway, session_id, "hello there")
    call = gateway.Subscribe(
        gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=turn[-1].seq + 5, stop_when_idle=stop_when_idle)
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await read_all(call)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info, violations = status_details(caught.value)
    assert info is not None and info.reason == "INVALID_ARGUMENT"
    assert [field for field, _ in violations] == ["after_seq"]
    assert f"seq {turn[-1].seq}" in violations[0][1]


async def test_stop_when_idle_at_the_end_returns_at_once(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    session_id = await new_session(gateway)
    turn = await send(gateway, session_id, "hello there")
    call = gateway.Subscribe(
        gateway_pb2.SubscribeRequest(session_id=session_id, after_seq=turn[-1].seq, stop_when_idle=True)
    )
    assert await read_all(call) == []


# --------------------------------------------------------------------------- multitask strategies


async def start_long_turn(gateway: gateway_pb2_grpc.GatewayServiceStub, session_id: str) -> tuple[Any, list[Any]]:
    """A long turn, read until it streams: it is running when this returns."""
    call = gateway.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content=LONG))
    events: list[events_pb2.RuntimeEvent] = []
    while not any(payload(e) == "assistant_delta" for e in events):
        events += (await asyncio.wait_for(call.read(), TIMEOUT_S)).events
    return call, events


async def test_enqueue_waits_for_the_running_turn_then_runs(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    session_id = await new_session(gateway)
    first_call, first = await start_long_turn(gateway, session_id)
    second_call = gateway.SendMessage(
        gateway_pb2.SendMessageRequest(
            session_id=session_id,
            content="What is 6 * 7?",
            multitask_strategy=turns_pb2.MULTITASK_STRATEGY_ENQUEUE,
        ),
        timeout=TIMEOUT_S * 3,
    )
    first += await read_all(first_call)
    second = await read_all(second_call)
    assert payload(first[-1]) == "final", "the running turn must not be disturbed"
    assert payload(second[-1]) == "final" and "42" in second[-1].final.text
    # The lease is freed just before a turn's final is appended (so whoever sees it may start the
    # next turn at once): the queued turn's "accepted" may precede that final, nothing else of it.
    assert second[0].seq > first[-2].seq, "the queued turn starts only after the running one ended"
    assert all(e.seq > first[-1].seq for e in second[1:])
    assert {e.turn_id for e in second}.isdisjoint({e.turn_id for e in first})


async def test_interrupt_cancels_the_running_turn_then_runs(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    session_id = await new_session(gateway)
    first_call, first = await start_long_turn(gateway, session_id)
    second = await asyncio.wait_for(
        read_all(
            gateway.SendMessage(
                gateway_pb2.SendMessageRequest(
                    session_id=session_id,
                    content="What is 6 * 7?",
                    multitask_strategy=turns_pb2.MULTITASK_STRATEGY_INTERRUPT,
                )
            )
        ),
        TIMEOUT_S * 3,
    )
    first += await read_all(first_call)
    assert payload(first[-1]) == "error" and first[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
    assert payload(second[-1]) == "final" and "42" in second[-1].final.text
    assert second[0].seq > first[-2].seq and all(e.seq > first[-1].seq for e in second[1:])


async def test_reject_is_the_default_while_a_turn_runs(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    session_id = await new_session(gateway)
    first_call, first = await start_long_turn(gateway, session_id)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await read_all(gateway.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content="hi")))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    info, _ = status_details(caught.value)
    assert info is not None and info.reason == "TURN_IN_PROGRESS"
    assert info.metadata["turn_id"] == first[0].turn_id
    first += await read_all(first_call)
    assert payload(first[-1]) == "final"


async def test_send_to_an_unknown_session_is_not_found(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await send(gateway, "0" * 32, "hello")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    info, _ = status_details(caught.value)
    assert info is not None and info.reason == "SESSION_NOT_FOUND"
