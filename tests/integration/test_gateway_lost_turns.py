"""Turns that lose their runtime or their session, through the gateway on Redis.

- No runtime answers when a turn starts (every replica away): the turn is accepted and
  journaled all the same, its caller is told it waits, and the first runtime replica that
  comes back takes it over once its lease lapses: the caller's stream goes on to the answer.
- DeleteSession while a turn runs: the turn's next append meets the session's tombstone and
  stops instead of writing the session anew; its log is the drop marker alone.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import redis

from cogmesh.common.v1 import events_pb2
from cogmesh.gateway.v1 import gateway_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.lib.redis_keys import SessionKeys
from tests.integration.conftest import SUITE_SETTINGS, TIMEOUT_S, new_session, payload, running_suite, status_details

LONG = "w " * 12_000  # about 4,000 streamed deltas: a turn that runs for a while


def settings(redis_url: str, redis_prefix: str) -> Any:
    return SUITE_SETTINGS.model_copy(
        update={
            "redis_url": redis_url,
            "redis_key_prefix": redis_prefix,
            "turn_lease_ttl_s": 2,
            "turn_lease_renew_s": 0.5,
            "takeover_poll_s": 0.2,
        }
    )


async def read_all(call: Any) -> list[events_pb2.RuntimeEvent]:
    events: list[events_pb2.RuntimeEvent] = []
    while (message := await asyncio.wait_for(call.read(), TIMEOUT_S)) is not grpc.aio.EOF:
        events.extend(message.events)
    return events


async def read_until(call: Any, events: list[events_pb2.RuntimeEvent], what: str) -> None:
    while not any(payload(e) == what for e in events):
        message = await asyncio.wait_for(call.read(), TIMEOUT_S)
        assert message is not grpc.aio.EOF, f"the stream ended before a {what} event: {events}"
        events.extend(message.events)


async def test_a_turn_no_runtime_took_runs_when_a_runtime_comes_back(redis_url: str, redis_prefix: str) -> None:
    async with running_suite(settings(redis_url, redis_prefix)) as (suite, stubs):
        gateway = stubs["gateway"]
        session_id = await new_session(gateway)
        await suite.servers["runtime"].stop(0)  # every runtime replica away

        call = gateway.SendMessage(
            gateway_pb2.SendMessageRequest(session_id=session_id, content="What is 6 * 7?"), timeout=TIMEOUT_S * 3
        )
        events: list[events_pb2.RuntimeEvent] = []
        await read_until(call, events, "native_notice")
        assert events[0].status.text == "accepted"
        notice = events[-1].native_notice
        assert notice.kind == "waiting_for_runtime" and "takes it over" in notice.text, notice

        await suite.restart("runtime")
        events += await read_all(call)  # the same stream goes on
        assert payload(events[-1]) == "final" and "42" in events[-1].final.text, events[-1]
        assert "taken over" in [e.status.text for e in events if payload(e) == "status"]
        assert [e.seq for e in events] == list(range(events[0].seq, events[0].seq + len(events)))
        assert {e.turn_id for e in events} == {events[0].turn_id}

        # Its messages were stored once, and the session takes the next turn at once.
        listed = await stubs["sessions"].ListMessages(
            sessions_pb2.ListMessagesRequest(tenant_id=SUITE_SETTINGS.tenant_id, session_id=session_id)
        )
        assert {m.turn_id for m in listed.messages} == {events[0].turn_id}
        assert [m.content for m in listed.messages].count("What is 6 * 7?") == 1
        again = await read_all(gateway.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content="hi")))
        assert payload(again[-1]) == "final", again[-1]


async def test_deleting_a_session_while_its_turn_runs_stops_the_turn_without_a_new_log(
    redis_url: str, redis_prefix: str
) -> None:
    async with running_suite(settings(redis_url, redis_prefix)) as (suite, stubs):
        gateway = stubs["gateway"]
        runtime = suite.servers["runtime"].app.mounts[0].servicer.runner
        session_id = await new_session(gateway)
        call = gateway.SendMessage(gateway_pb2.SendMessageRequest(session_id=session_id, content=LONG))
        got: list[events_pb2.RuntimeEvent] = []
        await read_until(call, got, "assistant_delta")
        assert (await gateway.DeleteSession(gateway_pb2.DeleteSessionRequest(session_id=session_id))).deleted

        # The caller's stream ends: DeleteSession cancels the turn and gives it a moment to log its
        # end (ERROR_KIND_CANCELLED, or final if it got there first) before the session goes; a
        # later event meets the tombstone.
        try:
            rest = await read_all(call)
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND
            info, _ = status_details(exc)
            assert info is not None and info.reason == "SESSION_NOT_FOUND"
        else:
            end = rest[-1]
            assert payload(end) == "final" or end.error.kind == events_pb2.ERROR_KIND_CANCELLED, end

        await asyncio.wait_for(runtime.idle(), TIMEOUT_S)  # the runtime's turn stopped
        keys = SessionKeys(redis_prefix, session_id)
        admin = redis.Redis.from_url(redis_url)
        try:
            assert admin.exists(keys.key("events:dropped")) == 1, "the session's tombstone"
            assert admin.exists(keys.key("s")) == 0, "the turn must not write the session anew"
            stream = admin.xrange(keys.key("events"))
            assert [fields for _, fields in stream] == [{b"dropped": b"1"}], "the drop marker alone"
            assert int(admin.ttl(keys.key("events"))) <= 600
        finally:
            admin.close()
