"""A service the gateway depends on is down or hangs: calls end fast, with the right status, and no lease leaks."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from tests.integration.conftest import (
    DOMAIN,
    SUITE_SETTINGS,
    TIMEOUT_S,
    new_session,
    payload,
    running_suite,
    send,
    status_details,
    subscribe,
    suite_with_hanging,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

CALL_TIMEOUT_S = SUITE_SETTINGS.call_timeout_s
CALC_QUESTION = "What is 17 * 23?"


async def get_session(gateway: gateway_pb2_grpc.GatewayServiceStub, session_id: str) -> Any:
    reply = await gateway.GetSession(gateway_pb2.GetSessionRequest(session_id=session_id), timeout=TIMEOUT_S)
    return reply.session


def assert_unavailable_turn(events: list[events_pb2.RuntimeEvent], dependency: str, first_seq: int) -> None:
    """The turn ended with one retryable UNAVAILABLE error event that names the dependency, seqs unbroken."""
    assert events, "the turn produced no event at all"
    assert [e.seq for e in events] == list(range(first_seq, first_seq + len(events)))
    assert [payload(e) for e in events].count("error") == 1
    assert payload(events[-1]) == "error"
    assert "final" not in [payload(e) for e in events]
    error = events[-1].error
    assert error.kind == events_pb2.ERROR_KIND_UNAVAILABLE
    assert error.retryable is True
    assert dependency in error.message
    assert len({e.turn_id for e in events}) == 1


async def test_runtime_down_the_turn_waits_and_runs_once_a_runtime_is_back() -> None:
    """An accepted turn is durable: with no runtime to take it, it says so and waits; the runtime back, it runs."""
    settings = SUITE_SETTINGS.model_copy(
        update={"turn_lease_ttl_s": 2, "turn_lease_renew_s": 0.5, "takeover_poll_s": 0.2}
    )
    async with running_suite(settings) as (suite, stubs):
        gateway = stubs["gateway"]
        session_id = await new_session(gateway)
        warm = await send(gateway, session_id, "hello")  # channels to every service are connected
        assert payload(warm[-1]) == "final"

        await suite.servers["runtime"].stop(0)
        sub = subscribe(gateway, session_id, after_seq=warm[-1].seq)
        try:
            turn = gateway.SendMessage(
                gateway_pb2.SendMessageRequest(session_id=session_id, content=CALC_QUESTION), timeout=TIMEOUT_S * 3
            )
            waiting, _ = await sub.events_until(lambda got: "native_notice" in [payload(e) for e in got])
            assert [payload(e) for e in waiting] == ["status", "native_notice"]
            assert waiting[1].native_notice.kind == "waiting_for_runtime"
            assert "UNAVAILABLE" in waiting[1].native_notice.text

            await suite.restart("runtime")
            events = [e async for r in turn for e in r.events]
        finally:
            sub.cancel()
        assert payload(events[-1]) == "final" and events[-1].final.text == "17 * 23 = 391."
        assert [e.seq for e in events] == list(range(warm[-1].seq + 1, events[-1].seq + 1)), "no seq missing"
        assert "taken over" in [e.status.text for e in events if e.HasField("status")]
        session = await get_session(gateway, session_id)
        assert session.active_turn_id == "" and session.message_count == 2 + 4


@pytest.mark.parametrize("dependency", ["models", "policy", "context"])
async def test_a_control_plane_down_leaves_turns_deciding_from_its_last_snapshot(dependency: str) -> None:
    # The runtime holds the catalogue and the policy as snapshots and builds the prompt itself: with
    # their service gone, a turn still resolves its model, gets its prompt and has its tool calls
    # decided (and the calculator allowed) locally.
    async with running_suite() as (suite, stubs):
        gateway = stubs["gateway"]
        session_id = await new_session(gateway)
        assert payload((await send(gateway, session_id, CALC_QUESTION))[-1]) == "final"

        await suite.servers[dependency].stop(0)

        events = await send(gateway, session_id, CALC_QUESTION)
        assert payload(events[-1]) == "final" and events[-1].final.text == "17 * 23 = 391."
        assert "tool_call_finished" in [payload(e) for e in events]


async def test_sessions_down_gateway_answers_unavailable() -> None:
    async with running_suite() as (suite, stubs):
        gateway = stubs["gateway"]
        session_id = await new_session(gateway)
        await suite.servers["sessions"].stop(0)

        attempts = {
            "CreateSession": lambda: gateway.CreateSession(gateway_pb2.CreateSessionRequest(), timeout=TIMEOUT_S),
            "GetSession": lambda: gateway.GetSession(
                gateway_pb2.GetSessionRequest(session_id=session_id), timeout=TIMEOUT_S
            ),
            "ListSessions": lambda: gateway.ListSessions(gateway_pb2.ListSessionsRequest(), timeout=TIMEOUT_S),
            "DeleteSession": lambda: gateway.DeleteSession(
                gateway_pb2.DeleteSessionRequest(session_id=session_id), timeout=TIMEOUT_S
            ),
            "SendMessage": lambda: send(gateway, session_id, "hello"),
            "Subscribe": lambda: subscribe(gateway, session_id).next(),
            "CancelTurn": lambda: gateway.CancelTurn(
                gateway_pb2.CancelTurnRequest(session_id=session_id), timeout=TIMEOUT_S
            ),
        }
        for rpc, attempt in attempts.items():
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await attempt()
            assert time.monotonic() - started < CALL_TIMEOUT_S + 1, rpc
            err = caught.value
            assert err.code() == grpc.StatusCode.UNAVAILABLE, (rpc, err.details())
            info, violations = status_details(err)
            assert info is not None, rpc
            assert (info.reason, info.domain) == ("DEPENDENCY_UNAVAILABLE", DOMAIN), rpc
            assert info.metadata["dependency"] == "sessions", rpc
            assert info.metadata["retryable"] == "true", rpc
            assert violations == []

        # What does not need the sessions service still works.
        agents = await gateway.ListAgents(gateway_pb2.ListAgentsRequest(), timeout=TIMEOUT_S)
        assert "default" in [a.name for a in agents.agents]
        catalogue = await gateway.ListModels(gateway_pb2.ListModelsRequest(), timeout=TIMEOUT_S)
        assert catalogue.default_model == "cogmesh-local"


# --------------------------------------------------------------------------- a dependency that hangs


async def test_hanging_dependency_is_cut_by_the_deadline() -> None:
    call_timeout = 1.0
    settings = SUITE_SETTINGS.model_copy(update={"call_timeout_s": call_timeout})
    async with (
        suite_with_hanging("models", settings) as (servers, _),
        grpc.aio.insecure_channel(servers["gateway"].address) as channel,
    ):
        gateway = gateway_pb2_grpc.GatewayServiceStub(channel)

        # A unary gateway call that needs models: UNAVAILABLE once the internal deadline passes.
        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await gateway.ListModels(gateway_pb2.ListModelsRequest(), timeout=TIMEOUT_S)
        elapsed = time.monotonic() - started
        assert call_timeout * 0.9 <= elapsed < call_timeout + 2
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        info, _ = status_details(caught.value)
        assert info is not None
        assert (info.reason, info.metadata["dependency"]) == ("DEPENDENCY_UNAVAILABLE", "models")

        # A turn: the runtime's ResolveModel deadline ends it with a retryable error event.
        session_id = await new_session(gateway)
        started = time.monotonic()
        events = await send(gateway, session_id, "hello")
        elapsed = time.monotonic() - started
        assert call_timeout * 0.9 <= elapsed < call_timeout + 2
        assert_unavailable_turn(events, "models service unavailable", first_seq=1)

        session = await get_session(gateway, session_id)
        assert session.active_turn_id == ""
        assert session.message_count == 0


# --------------------------------------------------------------------------- cancelling a turn stuck on a dependency


async def _turn_blocked_on_policy(gateway: Any) -> tuple[str, asyncio.Task[list[events_pb2.RuntimeEvent]]]:
    session_id = await new_session(gateway)
    turn = asyncio.create_task(send(gateway, session_id, CALC_QUESTION))
    return session_id, turn


async def test_running_turn_blocks_others_and_can_be_cancelled() -> None:
    async with (
        suite_with_hanging("policy") as (servers, reached),
        grpc.aio.insecure_channel(servers["gateway"].address) as channel,
    ):
        gateway = gateway_pb2_grpc.GatewayServiceStub(channel)
        session_id, turn = await _turn_blocked_on_policy(gateway)
        await asyncio.wait_for(reached.wait(), TIMEOUT_S)  # the turn now waits on CheckToolCall

        running = (await get_session(gateway, session_id)).active_turn_id
        assert running != ""

        # A second turn on the busy session is refused, naming the running turn.
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await send(gateway, session_id, "me too")
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        info, _ = status_details(caught.value)
        assert info is not None
        assert (info.reason, info.metadata["turn_id"]) == ("TURN_IN_PROGRESS", running)

        other = await gateway.CancelTurn(
            gateway_pb2.CancelTurnRequest(session_id=session_id, turn_id="not-this-one"), timeout=TIMEOUT_S
        )
        assert (other.cancelled, other.turn_id) == (False, "")
        reply = await gateway.CancelTurn(gateway_pb2.CancelTurnRequest(session_id=session_id), timeout=TIMEOUT_S)
        assert (reply.cancelled, reply.turn_id) == (True, running)

        events = await asyncio.wait_for(turn, TIMEOUT_S)
        assert {e.turn_id for e in events} == {running}
        assert payload(events[-1]) == "error"
        assert "final" not in [payload(e) for e in events]
        assert "tool_call_started" not in [payload(e) for e in events], "no tool runs without a policy verdict"

        session = await get_session(gateway, session_id)
        assert session.active_turn_id == ""
        # Cancelled while the turn's first policy call (BeginTurn) hung: nothing had been produced to keep.
        assert session.message_count == 0


async def test_cancel_interrupts_a_turn_waiting_on_a_dependency() -> None:
    async with (
        suite_with_hanging("policy") as (servers, reached),
        grpc.aio.insecure_channel(servers["gateway"].address) as channel,
    ):
        gateway = gateway_pb2_grpc.GatewayServiceStub(channel)
        session_id, turn = await _turn_blocked_on_policy(gateway)
        await asyncio.wait_for(reached.wait(), TIMEOUT_S)
        reply = await gateway.CancelTurn(gateway_pb2.CancelTurnRequest(session_id=session_id), timeout=TIMEOUT_S)
        assert reply.cancelled is True
        started = time.monotonic()
        events = await asyncio.wait_for(turn, TIMEOUT_S)
        assert events[-1].error.kind == events_pb2.ERROR_KIND_CANCELLED
        assert events[-1].error.retryable is False
        assert time.monotonic() - started < CALL_TIMEOUT_S / 2, "cancellation waited for the dependency deadline"
