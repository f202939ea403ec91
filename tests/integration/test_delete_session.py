"""DeleteSession while the session's turn runs (issue 14, item 7): the turn is cancelled, the
session and its event log are gone, and nothing the turn does afterwards brings the log back."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from services.kit.errors import CogmeshError
from tests.integration.conftest import (
    SUITE_SETTINGS,
    TIMEOUT_S,
    new_session,
    running_suite,
    status_details,
    suite_with_hanging,
)

HUNG_CALL_S = 60.0  # the policy call the turn is stuck in would end only after this


def servicer(servers: dict[str, Any], name: str) -> Any:
    return servers[name].app.mounts[0].servicer


async def caller_outcome(call: Any) -> tuple[list[events_pb2.RuntimeEvent], grpc.StatusCode | None]:
    """The rest of the SendMessage stream of the deleted session's turn: its events and how it ended."""
    events: list[events_pb2.RuntimeEvent] = []
    try:
        while (response := await call.read()) is not grpc.aio.EOF:
            events.extend(response.events)
    except grpc.aio.AioRpcError as exc:
        return events, exc.code()
    return events, None


async def assert_gone(gateway: gateway_pb2_grpc.GatewayServiceStub, servers: dict[str, Any], session_id: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as fetched:
        await gateway.GetSession(gateway_pb2.GetSessionRequest(session_id=session_id), timeout=TIMEOUT_S)
    assert fetched.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as watched:
        call = gateway.Subscribe(gateway_pb2.SubscribeRequest(session_id=session_id), timeout=TIMEOUT_S)
        await call.read()
    assert watched.value.code() == grpc.StatusCode.NOT_FOUND
    info, _ = status_details(watched.value)
    assert info is not None and info.reason == "SESSION_NOT_FOUND"
    with pytest.raises(CogmeshError) as gone:  # the session's event log went with it, and did not come back
        await servicer(servers, "gateway").events.last_seq(session_id)
    assert gone.value.code == grpc.StatusCode.NOT_FOUND


async def test_deleting_a_session_cancels_its_turn_stuck_on_a_dependency() -> None:
    """The turn waits on a policy call that would take a minute: only a cancel ends it sooner."""
    settings = SUITE_SETTINGS.model_copy(update={"call_timeout_s": HUNG_CALL_S})
    async with (
        suite_with_hanging("policy", settings) as (servers, reached),
        grpc.aio.insecure_channel(servers["gateway"].address) as channel,
    ):
        gateway = gateway_pb2_grpc.GatewayServiceStub(channel)
        session_id = await new_session(gateway)
        call = gateway.SendMessage(
            gateway_pb2.SendMessageRequest(session_id=session_id, content="What is 1 + 1?"), timeout=HUNG_CALL_S
        )
        await asyncio.wait_for(reached.wait(), TIMEOUT_S)  # the runtime's turn now waits on policy
        runtime = servicer(servers, "runtime").runner
        assert runtime._running

        started = time.monotonic()
        reply = await gateway.DeleteSession(gateway_pb2.DeleteSessionRequest(session_id=session_id), timeout=TIMEOUT_S)
        assert reply.deleted

        await asyncio.wait_for(runtime.idle(), TIMEOUT_S)  # the runtime's turn ended
        assert time.monotonic() - started < TIMEOUT_S < HUNG_CALL_S  # cancelled, not timed out
        events, code = await asyncio.wait_for(caller_outcome(call), TIMEOUT_S)
        assert "final" not in [e.WhichOneof("payload") for e in events]
        assert code in (None, grpc.StatusCode.NOT_FOUND), code  # its cancelled end, or the log's deletion
        if code is None:
            assert events[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED, events[-1]
        await assert_gone(gateway, servers, session_id)


async def test_deleting_a_session_mid_stream_stops_the_turn_and_the_log_stays_gone() -> None:
    """A turn streaming tokens for minutes (the built-in model, slowed down) is deleted mid-stream."""
    settings = SUITE_SETTINGS.model_copy(update={"local_reply_tokens": 100_000, "local_delay_ms": 5})
    async with running_suite(settings) as (suite, stubs):
        gateway, servers = stubs["gateway"], suite.servers
        session_id = await new_session(gateway)
        call = gateway.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content="talk"))
        seen: list[events_pb2.RuntimeEvent] = []
        while sum(e.WhichOneof("payload") == "assistant_delta" for e in seen) < 20:
            seen.extend((await asyncio.wait_for(call.read(), TIMEOUT_S)).events)
        runtime = servicer(servers, "runtime").runner

        reply = await gateway.DeleteSession(gateway_pb2.DeleteSessionRequest(session_id=session_id), timeout=TIMEOUT_S)
        assert reply.deleted

        await asyncio.wait_for(runtime.idle(), TIMEOUT_S)  # the runtime's turn ended
        events, _ = await asyncio.wait_for(caller_outcome(call), TIMEOUT_S)
        assert "final" not in [e.WhichOneof("payload") for e in seen + events]
        await assert_gone(gateway, servers, session_id)
        assert (await gateway.DeleteSession(gateway_pb2.DeleteSessionRequest(session_id=session_id))).deleted is False

        # The suite is fine: another session takes a turn.
        other = await new_session(gateway)
        more = gateway.SendMessage(gateway_pb2.SendMessageRequest(session_id=other, content="hi"), timeout=TIMEOUT_S)
        assert (await asyncio.wait_for(more.read(), TIMEOUT_S)).events[0].status.text == "accepted"
        more.cancel()
