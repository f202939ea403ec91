"""Real turns through the gateway: sessions, the event stream, replay, live tail, catalogue."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import pytest_asyncio
from google.protobuf import json_format

from cogmesh.common.v1 import events_pb2, messages_pb2, resources_pb2
from cogmesh.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from cogmesh.sessions.v1 import sessions_pb2
from services.lib.models.catalog import ModelCatalog
from tests.integration.conftest import (
    DOMAIN,
    SUITE_SETTINGS,
    TIMEOUT_S,
    is_terminal,
    new_session,
    payload,
    running_suite,
    send,
    status_details,
    subscribe,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

CALC_QUESTION = "What is 17 * 23?"
ECHO_MESSAGE = "Tell me something nice about the weather in Lisbon today"


@dataclass
class Turn:
    session_id: str
    events: list[events_pb2.RuntimeEvent]

    @property
    def final(self) -> events_pb2.FinalResult:
        assert payload(self.events[-1]) == "final", self.events[-1]
        return self.events[-1].final

    @property
    def turn_id(self) -> str:
        return self.events[0].turn_id


def kinds(events: list[events_pb2.RuntimeEvent]) -> list[str]:
    return [payload(e) for e in events]


def seqs(events: list[events_pb2.RuntimeEvent]) -> list[int]:
    return [e.seq for e in events]


def deltas(events: list[events_pb2.RuntimeEvent]) -> str:
    return "".join(e.assistant_delta.text for e in events if payload(e) == "assistant_delta")


async def get_session(gateway: gateway_pb2_grpc.GatewayServiceStub, session_id: str) -> resources_pb2.Session:
    reply = await gateway.GetSession(gateway_pb2.GetSessionRequest(session_id=session_id), timeout=TIMEOUT_S)
    return reply.session  # type: ignore[no-any-return]


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def calc_turn(gateway: gateway_pb2_grpc.GatewayServiceStub) -> Turn:
    """A fresh session with exactly one finished calculator turn (tests must not add turns to it)."""
    session_id = await new_session(gateway)
    return Turn(session_id, await send(gateway, session_id, CALC_QUESTION))


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def echo_turn(gateway: gateway_pb2_grpc.GatewayServiceStub) -> Turn:
    session_id = await new_session(gateway)
    return Turn(session_id, await send(gateway, session_id, ECHO_MESSAGE))


# --------------------------------------------------------------------------- sessions


async def test_create_session_with_default_agent(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    reply = await gateway.CreateSession(
        gateway_pb2.CreateSessionRequest(user_id="u-1", topic_id="t-1"), timeout=TIMEOUT_S
    )
    session = reply.session
    assert len(session.session_id) >= 16
    assert session.agent == "default"
    assert session.role_id == "assistant"
    assert session.tenant_id == SUITE_SETTINGS.tenant_id
    assert (session.user_id, session.topic_id) == ("u-1", "t-1")
    assert session.message_count == 0
    assert session.active_turn_id == ""
    assert session.create_time.seconds > 0
    assert session.update_time.ToNanoseconds() >= session.create_time.ToNanoseconds()

    fetched = await get_session(gateway, session.session_id)
    assert fetched == session


async def test_create_session_named_default_agent_equals_empty(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    reply = await gateway.CreateSession(gateway_pb2.CreateSessionRequest(agent="default"), timeout=TIMEOUT_S)
    assert reply.session.agent == "default"


async def test_create_session_unknown_agent_is_not_found(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gateway.CreateSession(gateway_pb2.CreateSessionRequest(agent="no-such-agent"), timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    info, violations = status_details(caught.value)
    assert info is not None
    assert info.reason == "AGENT_NOT_FOUND"
    assert info.domain == DOMAIN
    assert info.metadata["agent"] == "no-such-agent"
    assert violations == []
    assert "no-such-agent" in (caught.value.details() or "")


async def test_get_unknown_session_is_not_found(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await get_session(gateway, "0" * 32)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    info, _ = status_details(caught.value)
    assert info is not None
    assert (info.reason, info.domain) == ("SESSION_NOT_FOUND", DOMAIN)
    assert info.metadata["session_id"] == "0" * 32


# --------------------------------------------------------------------------- one calculator turn


async def test_calculator_turn_event_sequence(calc_turn: Turn) -> None:
    events = calc_turn.events
    names = kinds(events)
    n_deltas = names.count("assistant_delta")
    assert n_deltas >= 1
    assert names == [
        "status",  # the gateway's "accepted"
        "status",  # the runtime's "thinking"
        "usage",
        "tool_call_started",
        "tool_call_finished",
        *["assistant_delta"] * n_deltas,
        "usage",
        "final",
    ]
    accepted, status = events[0].status, events[1].status
    assert (accepted.state, accepted.text) == (events_pb2.TURN_STATE_QUEUED, "accepted")
    assert accepted.content == "What is 17 * 23?", "every watcher sees what the turn answers from its start"
    assert status.state == events_pb2.TURN_STATE_RUNNING and not status.content
    assert status.text != ""

    started, finished = events[3].tool_call_started, events[4].tool_call_finished
    assert started.name == "calculator"
    assert json_format.MessageToDict(started.arguments) == {"expression": "17 * 23"}
    assert started.correlation_id != ""
    assert finished.name == "calculator"
    assert finished.correlation_id == started.correlation_id
    assert finished.ok is True
    assert finished.result_summary == "391"
    assert finished.duration_ms >= 0

    for usage_event in (events[2], events[-2]):
        usage = usage_event.usage
        assert (usage.model, usage.provider) == ("cogmesh-local", "local")
        assert usage.input_tokens > 0
        assert usage.output_tokens > 0
        assert usage.cost_usd == 0.0

    final = calc_turn.final
    assert "391" in final.text
    assert deltas(events) == final.text
    assert final.model == "cogmesh-local"
    assert final.metrics.model_calls == 2
    assert final.metrics.tool_calls == 1
    assert final.metrics.input_tokens == events[2].usage.input_tokens + events[-2].usage.input_tokens
    assert final.metrics.output_tokens == events[2].usage.output_tokens + events[-2].usage.output_tokens


async def test_calculator_turn_seq_and_envelope(calc_turn: Turn) -> None:
    events = calc_turn.events
    assert seqs(events) == list(range(1, len(events) + 1)), "seq must start at 1 and grow by 1 with no gap"
    turn_id = calc_turn.turn_id
    assert len(turn_id) >= 16
    for event in events:
        assert event.session_id == calc_turn.session_id
        assert event.turn_id == turn_id
        assert event.HasField("create_time")
        assert event.create_time.seconds > 0
    stamps = [e.create_time.ToNanoseconds() for e in events]
    assert stamps == sorted(stamps), "event times must not go backwards"
    assert sum(1 for e in events if is_terminal(e)) == 1


async def test_calculator_turn_new_messages(calc_turn: Turn) -> None:
    final = calc_turn.final
    started = calc_turn.events[3].tool_call_started
    messages = list(final.new_messages)
    assert [m.role for m in messages] == [
        messages_pb2.ROLE_USER,
        messages_pb2.ROLE_ASSISTANT,
        messages_pb2.ROLE_TOOL,
        messages_pb2.ROLE_ASSISTANT,
    ]
    user, call, result, answer = messages
    assert user.content == CALC_QUESTION
    assert len(call.tool_calls) == 1
    assert call.tool_calls[0].name == "calculator"
    assert call.tool_calls[0].id == started.correlation_id
    assert json_format.MessageToDict(call.tool_calls[0].arguments) == {"expression": "17 * 23"}
    assert result.tool_call_id == started.correlation_id
    assert result.name == "calculator"
    assert result.content == "391"
    assert answer.content == final.text
    assert len(answer.tool_calls) == 0
    assert {m.turn_id for m in messages} == {calc_turn.turn_id}


async def test_calculator_turn_is_persisted_and_lease_released(
    gateway: gateway_pb2_grpc.GatewayServiceStub, sessions: Any, calc_turn: Turn
) -> None:
    session = await get_session(gateway, calc_turn.session_id)
    assert session.message_count == 4
    assert session.active_turn_id == ""

    stored = await sessions.ListMessages(
        sessions_pb2.ListMessagesRequest(tenant_id=SUITE_SETTINGS.tenant_id, session_id=calc_turn.session_id),
        timeout=TIMEOUT_S,
    )
    assert len(stored.messages) == 4
    assert stored.next_page_token == ""
    for kept, announced in zip(stored.messages, calc_turn.final.new_messages, strict=True):
        assert kept.create_time.seconds > 0, "the sessions service stamps stored messages"
        kept.ClearField("create_time")
        assert kept == announced


async def test_echo_turn_streams_deltas_that_add_up_to_final(echo_turn: Turn) -> None:
    events = echo_turn.events
    names = kinds(events)
    assert names[:2] == ["status", "status"]  # accepted, thinking
    assert names[-1] == "final"
    assert names[-2] == "usage"
    assert "tool_call_started" not in names
    assert names.count("assistant_delta") >= 3
    assert set(names[2:-2]) == {"assistant_delta"}
    assert deltas(events) == echo_turn.final.text
    assert ECHO_MESSAGE in echo_turn.final.text
    assert seqs(events) == list(range(1, len(events) + 1))
    assert [m.role for m in echo_turn.final.new_messages] == [messages_pb2.ROLE_USER, messages_pb2.ROLE_ASSISTANT]
    assert echo_turn.final.metrics.tool_calls == 0


async def test_second_turn_continues_seq_and_history(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    session_id = await new_session(gateway)
    first = await send(gateway, session_id, CALC_QUESTION)
    second = await send(gateway, session_id, "and now something else")
    assert seqs(first + second) == list(range(1, len(first) + len(second) + 1))
    assert first[0].turn_id != second[0].turn_id
    assert {e.turn_id for e in second} == {second[0].turn_id}
    assert payload(second[-1]) == "final"
    session = await get_session(gateway, session_id)
    assert session.message_count == 4 + 2
    assert session.active_turn_id == ""


async def test_content_at_the_size_limit_is_accepted(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    session_id = await new_session(gateway)
    content = "x" * 100_000
    events = await send(gateway, session_id, content)
    assert payload(events[-1]) == "final"
    assert content in events[-1].final.text
    assert events[-1].final.new_messages[0].content == content


async def test_long_reply_streams_and_replays_without_gaps(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    """About 33000 words echoed back: 11000+ events, batched on the wire, none lost."""
    session_id = await new_session(gateway)
    content = ("ab " * 33_334)[:100_000]
    events = await send(gateway, session_id, content)
    assert len(events) > 10_000
    assert seqs(events) == list(range(1, len(events) + 1))
    assert payload(events[-1]) == "final"
    assert deltas(events) == events[-1].final.text
    sub = subscribe(gateway, session_id)
    try:
        replayed, _ = await sub.events_until(lambda got: len(got) >= len(events))
        assert replayed == events
    finally:
        sub.cancel()


async def test_sessions_have_independent_logs(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    ids = [await new_session(gateway) for _ in range(4)]
    turns = await asyncio.gather(*(send(gateway, sid, CALC_QUESTION) for sid in ids))
    for session_id, events in zip(ids, turns, strict=True):
        assert {e.session_id for e in events} == {session_id}
        assert seqs(events) == list(range(1, len(events) + 1))
        assert "391" in events[-1].final.text


async def test_concurrent_sends_on_one_session_never_interleave(
    gateway: gateway_pb2_grpc.GatewayServiceStub,
) -> None:
    """Each concurrent SendMessage either runs a whole turn or is refused with TURN_IN_PROGRESS."""
    session_id = await new_session(gateway)

    async def attempt(i: int) -> list[events_pb2.RuntimeEvent] | None:
        try:
            return await send(gateway, session_id, f"concurrent message {i}")
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, err.details()
            info, _ = status_details(err)
            assert info is not None and info.reason == "TURN_IN_PROGRESS"
            return None

    outcomes = await asyncio.gather(*(attempt(i) for i in range(5)))
    turns = [events for events in outcomes if events is not None]
    assert len(turns) >= 1
    for events in turns:
        assert payload(events[-1]) == "final"
        assert len({e.turn_id for e in events}) == 1
        assert seqs(events) == list(range(events[0].seq, events[0].seq + len(events))), "a turn's events interleaved"
    everything = sorted(seqs([e for events in turns for e in events]))
    assert everything == list(range(1, len(everything) + 1))
    session = await get_session(gateway, session_id)
    assert session.message_count == 2 * len(turns)
    assert session.active_turn_id == ""


async def test_other_tenants_sessions_are_invisible(
    gateway: gateway_pb2_grpc.GatewayServiceStub, sessions: Any
) -> None:
    foreign = await sessions.CreateSession(
        sessions_pb2.CreateSessionRequest(tenant_id="another-tenant", agent="default"), timeout=TIMEOUT_S
    )
    foreign_id = foreign.session.session_id
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await get_session(gateway, foreign_id)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await send(gateway, foreign_id, "hello")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    listed = await gateway.ListSessions(gateway_pb2.ListSessionsRequest(page_size=1000), timeout=TIMEOUT_S)
    assert foreign_id not in {s.session_id for s in listed.sessions}
    assert {s.tenant_id for s in listed.sessions} == {SUITE_SETTINGS.tenant_id}
    deleted = await gateway.DeleteSession(gateway_pb2.DeleteSessionRequest(session_id=foreign_id), timeout=TIMEOUT_S)
    assert deleted.deleted is False
    still_there = await sessions.GetSession(
        sessions_pb2.GetSessionRequest(tenant_id="another-tenant", session_id=foreign_id), timeout=TIMEOUT_S
    )
    assert still_there.session.session_id == foreign_id


async def test_turn_finishes_when_the_caller_goes_away(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    session_id = await new_session(gateway)
    call = gateway.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content=CALC_QUESTION))
    first = await asyncio.wait_for(call.read(), TIMEOUT_S)
    assert payload(first.events[0]) == "status"
    call.cancel()

    async def idle() -> resources_pb2.Session:
        while True:
            session = await get_session(gateway, session_id)
            if not session.active_turn_id:
                return session
            await asyncio.sleep(0.02)

    session = await asyncio.wait_for(idle(), TIMEOUT_S)
    assert session.message_count == 4
    sub = subscribe(gateway, session_id)
    try:
        replayed, _ = await sub.events_until(lambda got: bool(got) and is_terminal(got[-1]))
        assert payload(replayed[-1]) == "final"
        assert "391" in replayed[-1].final.text
        assert seqs(replayed) == list(range(1, len(replayed) + 1))
    finally:
        sub.cancel()


async def test_model_override_by_alias(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    session_id = await new_session(gateway)
    events = await send(gateway, session_id, "hello", model="local")
    assert payload(events[-1]) == "final"
    assert events[-1].final.model == "cogmesh-local"


async def test_model_without_adapter_ends_turn_with_error(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    session_id = await new_session(gateway)
    events = await send(gateway, session_id, "hello", model="gpt-4o")
    assert kinds(events)[-1] == "error"
    error = events[-1].error
    assert "gpt-4o" in error.message
    assert error.retryable is False
    assert seqs(events) == list(range(1, len(events) + 1))
    session = await get_session(gateway, session_id)
    assert session.active_turn_id == ""
    assert session.message_count == 0


async def test_model_without_adapter_is_an_invalid_request(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    session_id = await new_session(gateway)
    events = await send(gateway, session_id, "hello", model="gpt-4o")
    assert events[-1].error.kind == events_pb2.ERROR_KIND_INVALID_REQUEST


async def test_send_message_while_lease_held_is_turn_in_progress(
    gateway: gateway_pb2_grpc.GatewayServiceStub, sessions: Any
) -> None:
    session_id = await new_session(gateway)
    tenant = SUITE_SETTINGS.tenant_id
    lease = await sessions.AcquireTurnLease(
        sessions_pb2.AcquireTurnLeaseRequest(tenant_id=tenant, session_id=session_id, turn_id="other-turn"),
        timeout=TIMEOUT_S,
    )
    assert (await get_session(gateway, session_id)).active_turn_id == "other-turn"

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await send(gateway, session_id, "hello")
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    info, _ = status_details(caught.value)
    assert info is not None
    assert (info.reason, info.domain) == ("TURN_IN_PROGRESS", DOMAIN)
    assert info.metadata["turn_id"] == "other-turn"

    released = await sessions.ReleaseTurnLease(
        sessions_pb2.ReleaseTurnLeaseRequest(tenant_id=tenant, session_id=session_id, lease_token=lease.lease_token),
        timeout=TIMEOUT_S,
    )
    assert released.released is True
    events = await send(gateway, session_id, "hello")
    assert payload(events[-1]) == "final"
    assert events[0].seq == 1, "the rejected turn must not have written to the event log"


async def test_cancel_turn_on_idle_session(gateway: gateway_pb2_grpc.GatewayServiceStub, calc_turn: Turn) -> None:
    reply = await gateway.CancelTurn(gateway_pb2.CancelTurnRequest(session_id=calc_turn.session_id), timeout=TIMEOUT_S)
    assert reply.cancelled is False
    assert reply.turn_id == ""
    # A finished turn's id is not running either.
    reply = await gateway.CancelTurn(
        gateway_pb2.CancelTurnRequest(session_id=calc_turn.session_id, turn_id=calc_turn.turn_id), timeout=TIMEOUT_S
    )
    assert (reply.cancelled, reply.turn_id) == (False, "")


# --------------------------------------------------------------------------- Subscribe


async def test_subscribe_from_zero_replays_the_log_then_heartbeats(
    gateway: gateway_pb2_grpc.GatewayServiceStub, calc_turn: Turn
) -> None:
    sub = subscribe(gateway, calc_turn.session_id, after_seq=0)
    try:
        replayed, heartbeats = await sub.events_until(lambda got: len(got) >= len(calc_turn.events))
        assert heartbeats == 0, "replay must come before any heartbeat"
        assert replayed == calc_turn.events, "replay must be the same events, seqs and payloads"
        message = await sub.next()
        assert message.heartbeat is True
        assert len(message.events) == 0
    finally:
        sub.cancel()


async def test_subscribe_after_cursor_replays_only_newer_events(
    gateway: gateway_pb2_grpc.GatewayServiceStub, calc_turn: Turn
) -> None:
    cursor = 3
    expected = [e for e in calc_turn.events if e.seq > cursor]
    sub = subscribe(gateway, calc_turn.session_id, after_seq=cursor)
    try:
        replayed, heartbeats = await sub.events_until(lambda got: len(got) >= len(expected))
        assert heartbeats == 0
        assert replayed == expected
        assert replayed[0].seq == cursor + 1
        assert (await sub.next()).heartbeat is True
    finally:
        sub.cancel()


async def test_subscribe_at_the_end_only_heartbeats(
    gateway: gateway_pb2_grpc.GatewayServiceStub, calc_turn: Turn
) -> None:
    sub = subscribe(gateway, calc_turn.session_id, after_seq=calc_turn.events[-1].seq)
    try:
        for _ in range(2):
            message = await sub.next()
            assert message.heartbeat is True
            assert len(message.events) == 0
    finally:
        sub.cancel()


async def test_subscribe_ahead_of_the_log_is_invalid(
    gateway: gateway_pb2_grpc.GatewayServiceStub, calc_turn: Turn
) -> None:
    sub = subscribe(gateway, calc_turn.session_id, after_seq=calc_turn.events[-1].seq + 1)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await sub.next()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info, violations = status_details(caught.value)
    assert info is not None and info.reason == "INVALID_ARGUMENT"
    assert [field for field, _ in violations] == ["after_seq"]


async def test_live_subscribers_see_the_same_turn_in_order(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    session_id = await new_session(gateway)
    subs = [subscribe(gateway, session_id, after_seq=0) for _ in range(5)]
    try:
        # A heartbeat proves each subscriber caught up with the (empty) log and is tailing live.
        for sub in subs:
            assert (await sub.next()).heartbeat is True
        sent = await send(gateway, session_id, CALC_QUESTION)
        assert payload(sent[-1]) == "final"

        async def until_terminal(sub: Any) -> list[events_pb2.RuntimeEvent]:
            got, _ = await sub.events_until(lambda evs: bool(evs) and is_terminal(evs[-1]))
            return got

        seen = await asyncio.gather(*(until_terminal(sub) for sub in subs))
        for got in seen:
            assert seqs(got) == list(range(1, len(sent) + 1)), "no gap, no duplicate"
            assert got == sent
        # After the turn, subscribers idle again: heartbeats, not repeats.
        for sub in subs:
            assert (await sub.next()).heartbeat is True
    finally:
        for sub in subs:
            sub.cancel()


async def test_subscriber_joining_mid_session_gets_replay_then_live(
    gateway: gateway_pb2_grpc.GatewayServiceStub,
) -> None:
    session_id = await new_session(gateway)
    first = await send(gateway, session_id, "first message")
    sub = subscribe(gateway, session_id, after_seq=0)
    try:
        replayed, _ = await sub.events_until(lambda got: len(got) >= len(first))
        assert replayed == first
        assert (await sub.next()).heartbeat is True
        second = await send(gateway, session_id, CALC_QUESTION)
        live, _ = await sub.events_until(lambda got: bool(got) and is_terminal(got[-1]))
        assert live == second
        assert seqs(replayed + live) == list(range(1, len(first) + len(second) + 1))
    finally:
        sub.cancel()


async def test_deleting_a_session_ends_its_subscriptions(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    session_id = await new_session(gateway)
    sub = subscribe(gateway, session_id)
    assert (await sub.next()).heartbeat is True
    reply = await gateway.DeleteSession(gateway_pb2.DeleteSessionRequest(session_id=session_id), timeout=TIMEOUT_S)
    assert reply.deleted is True
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        while True:
            assert (await sub.next()).heartbeat is True
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    info, _ = status_details(caught.value)
    assert info is not None and info.reason == "SESSION_NOT_FOUND"


async def test_cursor_older_than_retention_is_out_of_range() -> None:
    # Retention 12 trims the log back to 12 events once it holds more than 15; one turn's batch stays below 12.
    async with running_suite(SUITE_SETTINGS.model_copy(update={"event_retention": 12})) as (_, stubs):
        gateway = stubs["gateway"]
        session_id = await new_session(gateway)
        sent: list[events_pb2.RuntimeEvent] = []
        for i in range(3):
            sent += await send(gateway, session_id, f"message number {i}")
        last = sent[-1].seq
        assert last == len(sent) > 15

        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await subscribe(gateway, session_id, after_seq=0).next()
        assert caught.value.code() == grpc.StatusCode.OUT_OF_RANGE
        info, _ = status_details(caught.value)
        assert info is not None
        assert (info.reason, info.domain) == ("CURSOR_EXPIRED", DOMAIN)
        oldest = int(info.metadata["oldest_seq"])
        assert 12 <= last - oldest + 1 <= 15, "retention keeps between 12 and 15 events"

        sub = subscribe(gateway, session_id, after_seq=oldest - 1)
        try:
            replayed, _ = await sub.events_until(lambda got: len(got) >= last - oldest + 1)
            assert replayed == sent[oldest - 1 :]
            assert (await sub.next()).heartbeat is True
        finally:
            sub.cancel()


async def test_replay_of_retained_events_longer_than_max_lag() -> None:
    """max_lag cuts off live readers that cannot keep up, not a reader replaying retained history."""
    async with running_suite(SUITE_SETTINGS.model_copy(update={"subscriber_max_lag": 15})) as (_, stubs):
        gateway = stubs["gateway"]
        session_id = await new_session(gateway)
        sent: list[events_pb2.RuntimeEvent] = []
        for i in range(3):
            sent += await send(gateway, session_id, f"message number {i}")
        assert len(sent) > 15
        sub = subscribe(gateway, session_id, after_seq=0)
        try:
            replayed, _ = await sub.events_until(lambda got: len(got) >= len(sent))
            assert replayed == sent
        finally:
            sub.cancel()


# --------------------------------------------------------------------------- ListSessions, DeleteSession


async def test_list_sessions_pages_newest_first() -> None:
    async with running_suite() as (_, stubs):
        gateway = stubs["gateway"]
        created = [await new_session(gateway, topic_id=f"topic-{i}") for i in range(5)]
        pages: list[list[resources_pb2.Session]] = []
        token = ""
        while True:
            reply = await gateway.ListSessions(
                gateway_pb2.ListSessionsRequest(page_size=2, page_token=token), timeout=TIMEOUT_S
            )
            pages.append(list(reply.sessions))
            token = reply.next_page_token
            if not token:
                break
            assert len(pages) < 10, "pagination does not terminate"
        assert [len(p) for p in pages] == [2, 2, 1]
        listed = [s.session_id for page in pages for s in page]
        assert listed == list(reversed(created)), "newest first, no duplicates, none missing"
        stamps = [s.create_time.ToNanoseconds() for page in pages for s in page]
        assert stamps == sorted(stamps, reverse=True)

        everything = await gateway.ListSessions(gateway_pb2.ListSessionsRequest(), timeout=TIMEOUT_S)
        assert [s.session_id for s in everything.sessions] == listed
        assert everything.next_page_token == ""


async def test_list_sessions_bad_page_token(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await gateway.ListSessions(gateway_pb2.ListSessionsRequest(page_token="not-a-token"), timeout=TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info, violations = status_details(caught.value)
    assert info is not None
    assert (info.reason, info.domain) == ("INVALID_ARGUMENT", DOMAIN)
    assert [field for field, _ in violations] == ["page_token"]


async def test_delete_session(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    session_id = await new_session(gateway)
    await send(gateway, session_id, "hello")
    request = gateway_pb2.DeleteSessionRequest(session_id=session_id)
    assert (await gateway.DeleteSession(request, timeout=TIMEOUT_S)).deleted is True

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await get_session(gateway, session_id)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    info, _ = status_details(caught.value)
    assert info is not None
    assert (info.reason, info.domain) == ("SESSION_NOT_FOUND", DOMAIN)

    assert (await gateway.DeleteSession(request, timeout=TIMEOUT_S)).deleted is False

    listed = await gateway.ListSessions(gateway_pb2.ListSessionsRequest(page_size=1000), timeout=TIMEOUT_S)
    assert session_id not in {s.session_id for s in listed.sessions}

    for attempt in (send(gateway, session_id, "again"), subscribe(gateway, session_id).next()):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await attempt
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND


# --------------------------------------------------------------------------- catalogue


async def test_list_agents(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    reply = await gateway.ListAgents(gateway_pb2.ListAgentsRequest(), timeout=TIMEOUT_S)
    names = [a.name for a in reply.agents]
    assert names == sorted(names)
    default = {a.name: a for a in reply.agents}["default"]
    assert list(default.tools) == ["calculator"]
    assert default.mode == resources_pb2.AGENT_MODE_PRIMARY
    assert default.model == "local"
    assert default.description != ""


async def test_list_models(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    reply = await gateway.ListModels(gateway_pb2.ListModelsRequest(), timeout=TIMEOUT_S)
    ids = [m.id for m in reply.models]
    assert reply.default_model == "cogmesh-local"
    assert ids == sorted(ids)
    assert ids == [m.id for m in ModelCatalog.default().list_models()]
    assert {"cogmesh-local", "claude-sonnet-4-20250514", "gpt-4o", "gemini-2.5-pro", "deepseek-chat"} <= set(ids)
    local = {m.id: m for m in reply.models}["cogmesh-local"]
    assert local.provider == "local"
    assert set(local.aliases) == {"local", "cogmesh"}
    assert local.capabilities.tools is True
    assert local.context_window > 0


@pytest.mark.parametrize("provider", ["openai", "OpenAI", " openai "])
async def test_list_models_by_provider(gateway: gateway_pb2_grpc.GatewayServiceStub, provider: str) -> None:
    reply = await gateway.ListModels(gateway_pb2.ListModelsRequest(provider=provider), timeout=TIMEOUT_S)
    assert {m.provider for m in reply.models} == {"openai"}
    assert [m.id for m in reply.models] == ["gpt-4o", "gpt-4o-mini", "o3", "o3-mini"]
    assert reply.default_model == "cogmesh-local"


async def test_list_models_unknown_provider_is_empty(gateway: gateway_pb2_grpc.GatewayServiceStub) -> None:
    reply = await gateway.ListModels(gateway_pb2.ListModelsRequest(provider="nobody"), timeout=TIMEOUT_S)
    assert list(reply.models) == []


async def test_local_reply_tokens_streams_exactly_that_many_token_deltas() -> None:
    # COGMESH_LOCAL_REPLY_TOKENS: the benchmarks' "model streams N tokens" workload through the suite.
    async with running_suite(SUITE_SETTINGS.model_copy(update={"local_reply_tokens": 7})) as (_, stubs):
        gateway = stubs["gateway"]
        events = await send(gateway, await new_session(gateway), "tell me something")
        deltas = [e.assistant_delta.text for e in events if e.HasField("assistant_delta")]
        assert deltas == ["tok0", *(f" tok{i}" for i in range(1, 7))]
        assert events[-1].final.text == "tok0 tok1 tok2 tok3 tok4 tok5 tok6"
        # Arithmetic still goes to the calculator: only the plain echo is replaced.
        calc = await send(gateway, await new_session(gateway), "What is 17 * 23?")
        assert any(e.HasField("tool_call_started") for e in calc)
        assert "391" in calc[-1].final.text
