"""Time travel over the sessions service's gRPC API, on the memory store and on Redis (standalone, Cluster).

ListTurns (with steps read from the turns' journals), ListMessages through a turn, ForkSession (checked
message by message against the original, which stays untouched), RewindSession (its event, its refusal
while a turn runs), and a ROLLBACK turn that drops the turn it interrupted before it reads its start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from cogmesh.common.v1 import events_pb2, messages_pb2, resources_pb2, turns_pb2
from cogmesh.runtime.v1 import runtime_pb2
from cogmesh.sessions.v1 import sessions_pb2 as S
from cogmesh.sessions.v1 import sessions_pb2_grpc
from services.kit.server import start
from services.lib import journal_kinds
from services.sessions import main as sessions_main
from services.sessions.settings import SessionsSettings
from tests.integration.conftest import DOMAIN, status_details
from tests.support.redis_topologies import redis_for

TENANT = "acme"
TIMEOUT_S = 10.0
Stub = sessions_pb2_grpc.SessionsServiceStub


@pytest.fixture(params=["memory", "standalone", "cluster"])
async def stub(request: pytest.FixtureRequest) -> AsyncIterator[Stub]:
    with contextlib.ExitStack() as stack:
        settings = SessionsSettings()
        if request.param != "memory":
            redis = stack.enter_context(redis_for(request, request.param))
            settings = SessionsSettings(redis_url=redis.url, redis_key_prefix=redis.prefix)
        server = await start(sessions_main.build, settings, "127.0.0.1:0")
        channel = grpc.aio.insecure_channel(server.address)
        try:
            yield sessions_pb2_grpc.SessionsServiceStub(channel)
        finally:
            await channel.close()
            await server.stop(0)


async def expect_error(call: Any, code: grpc.StatusCode) -> tuple[Any, list[tuple[str, str]]]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    assert caught.value.code() == code, f"{caught.value.code()}: {caught.value.details()}"
    info, violations = status_details(caught.value)
    assert info is not None and info.domain == DOMAIN
    return info, violations


async def new_session(stub: Stub, **fields: Any) -> str:
    request = S.CreateSessionRequest(tenant_id=TENANT, agent="default", **fields)
    return (await stub.CreateSession(request, timeout=TIMEOUT_S)).session.session_id


def entry(kind: int, state: dict[str, Any] | bytes, position: int = 0) -> S.JournalEntry:
    payload = state if isinstance(state, bytes) else json.dumps(state).encode()
    return journal_kinds.entry(kind, payload, position=position)  # type: ignore[arg-type]


def message(turn_id: str, text: str, role: int = messages_pb2.ROLE_ASSISTANT) -> messages_pb2.Message:
    return messages_pb2.Message(role=role, content=text, turn_id=turn_id)  # type: ignore[arg-type]


async def begin(stub: Stub, sid: str, turn_id: str, text: str, **fields: Any) -> S.AcquireTurnLeaseResponse:
    """Take the lease as the gateway does: the turn's acceptance and its request logged with the grant."""
    request = runtime_pb2.RunTurnRequest(session_id=sid, turn_id=turn_id, content=text).SerializeToString()
    queued = events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_QUEUED, text="accepted")
    return await stub.AcquireTurnLease(
        S.AcquireTurnLeaseRequest(
            tenant_id=TENANT,
            session_id=sid,
            turn_id=turn_id,
            events=[events_pb2.RuntimeEvent(status=queued)],
            entries=[entry(journal_kinds.REQUEST, request, position=1)],
            **fields,
        ),
        timeout=TIMEOUT_S,
    )


async def finish(
    stub: Stub, sid: str, turn_id: str, token: int, user: str, *replies: str, failed: bool = False
) -> None:
    """What the runtime writes for a turn: a model step that called a tool, the tool's run, the end with the
    turn's messages."""
    model_state = {"agent": "coach", "model": "local/echo", "step_text": "let me check", "calls": [{"name": "calc"}]}
    steps = [
        entry(journal_kinds.START, {"agent": "coach", "model": "local/echo"}),
        entry(journal_kinds.MODEL, model_state),
        entry(journal_kinds.DECIDE, {"items": [{"name": "calc", "state": "run"}]}),
        entry(journal_kinds.TOOL, {"items": [{"name": "calc", "state": "done", "ok": True}]}),
        entry(journal_kinds.STEP, b"\xff not json"),  # a state this version cannot read: an empty summary
    ]
    delta = events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text="..."))
    await stub.AppendEvents(
        S.AppendEventsRequest(
            tenant_id=TENANT, session_id=sid, turn_id=turn_id, lease_token=token, events=[delta], entries=steps
        ),
        timeout=TIMEOUT_S,
    )
    if failed:
        end = events_pb2.RuntimeEvent(error=events_pb2.TurnError(kind=events_pb2.ERROR_KIND_INTERNAL, message="x"))
    else:
        end = events_pb2.RuntimeEvent(final=events_pb2.FinalResult(text=replies[-1] if replies else ""))
    messages = [message(turn_id, user, messages_pb2.ROLE_USER), *(message(turn_id, r) for r in replies)]
    await stub.AppendEvents(
        S.AppendEventsRequest(
            tenant_id=TENANT,
            session_id=sid,
            turn_id=turn_id,
            lease_token=token,
            events=[end],
            messages=messages,
            release_lease=True,
        ),
        timeout=TIMEOUT_S,
    )


async def run_turn(stub: Stub, sid: str, turn_id: str, user: str, *replies: str, failed: bool = False) -> None:
    granted = await begin(stub, sid, turn_id, user)
    await finish(stub, sid, turn_id, granted.lease_token, user, *replies, failed=failed)


async def conversation(stub: Stub, sid: str, **fields: Any) -> list[messages_pb2.Message]:
    out: list[messages_pb2.Message] = []
    token = ""
    while True:
        page = await stub.ListMessages(
            S.ListMessagesRequest(tenant_id=TENANT, session_id=sid, page_size=2, page_token=token, **fields),
            timeout=TIMEOUT_S,
        )
        out += page.messages
        token = page.next_page_token
        if not token:
            return out


async def log_of(stub: Stub, sid: str, after: int = 0) -> list[events_pb2.RuntimeEvent]:
    request = S.ReadEventsRequest(tenant_id=TENANT, session_id=sid, after_seq=after)
    return [e async for response in stub.ReadEvents(request, timeout=TIMEOUT_S) for e in response.events]


async def three_turns(stub: Stub) -> str:
    sid = await new_session(stub, role_id="coach", active_skill_ids=["calc"])
    await run_turn(stub, sid, "t1", "hi", "hello")
    await run_turn(stub, sid, "t2", "what is 2+2?", "calling calc", "4")
    await run_turn(stub, sid, "t3", "and 3+3?", failed=True)
    return sid


# --------------------------------------------------------------------------- ListTurns, ListMessages


async def test_list_turns_pages_oldest_first_with_their_steps_ranges_and_outcomes(stub: Stub) -> None:
    sid = await three_turns(stub)
    ask = S.ListTurnsRequest(tenant_id=TENANT, session_id=sid, page_size=2, include_steps=True)
    first = await stub.ListTurns(ask, timeout=TIMEOUT_S)
    assert [t.turn_id for t in first.turns] == ["t1", "t2"] and first.next_page_token
    ask.page_token = first.next_page_token
    second = await stub.ListTurns(ask, timeout=TIMEOUT_S)
    assert [t.turn_id for t in second.turns] == ["t3"] and not second.next_page_token
    turns = [*first.turns, *second.turns]
    assert [t.index for t in turns] == [1, 2, 3]
    assert [t.user_message for t in turns] == ["hi", "what is 2+2?", "and 3+3?"]
    assert [t.message_count for t in turns] == [2, 3, 1]
    assert [t.outcome for t in turns] == [
        turns_pb2.TURN_OUTCOME_COMPLETED,
        turns_pb2.TURN_OUTCOME_COMPLETED,
        turns_pb2.TURN_OUTCOME_FAILED,
    ]
    # Each turn logged its acceptance, a delta and its end: contiguous ranges, as the log holds them.
    assert [(t.first_seq, t.last_seq) for t in turns] == [(1, 3), (4, 6), (7, 9)]
    log = await log_of(stub, sid)
    for turn in turns:
        assert {e.turn_id for e in log[turn.first_seq - 1 : turn.last_seq]} == {turn.turn_id}
    assert all(t.agent == "coach" and t.end_time.ToNanoseconds() >= t.start_time.ToNanoseconds() > 0 for t in turns)
    steps = turns[1].steps
    assert [s.kind for s in steps] == [
        turns_pb2.TURN_STEP_KIND_REQUEST,
        turns_pb2.TURN_STEP_KIND_START,
        turns_pb2.TURN_STEP_KIND_MODEL_CALL,
        turns_pb2.TURN_STEP_KIND_DECISION,
        turns_pb2.TURN_STEP_KIND_TOOL_CALL,
        turns_pb2.TURN_STEP_KIND_STEP_END,
        turns_pb2.TURN_STEP_KIND_MODEL_CALL,  # the answer's, from the final event (the journal needs none)
    ]
    summaries = [s.summary for s in steps]
    assert summaries[0] == "asked: what is 2+2?" and "local/echo" in summaries[1]
    assert "calc" in summaries[2] and "calc -> run" in summaries[3] and summaries[4] == "ran calc ok"
    assert summaries[5] == ""  # unreadable: no summary, no error
    assert summaries[6].endswith("the answer") and steps[6].seq == turns[1].last_seq
    assert all(turns[1].first_seq <= s.seq <= turns[1].last_seq for s in steps)
    plain = await stub.ListTurns(S.ListTurnsRequest(tenant_id=TENANT, session_id=sid), timeout=TIMEOUT_S)
    assert len(plain.turns) == 3 and all(not t.steps for t in plain.turns)


async def test_a_running_turn_is_listed_last_and_bad_requests_name_their_field(stub: Stub) -> None:
    sid = await new_session(stub)
    await run_turn(stub, sid, "t1", "hi", "hello")
    await begin(stub, sid, "t2", "next")
    turns = (await stub.ListTurns(S.ListTurnsRequest(tenant_id=TENANT, session_id=sid), timeout=TIMEOUT_S)).turns
    assert [(t.turn_id, t.outcome) for t in turns] == [
        ("t1", turns_pb2.TURN_OUTCOME_COMPLETED),
        ("t2", turns_pb2.TURN_OUTCOME_RUNNING),
    ]
    assert (turns[1].first_seq, turns[1].last_seq) == (4, 4)
    for request, field in (
        (S.ListTurnsRequest(tenant_id=TENANT, session_id=sid, page_size=201), "page_size"),
        (S.ListTurnsRequest(tenant_id=TENANT, session_id="x" * 300), "session_id"),
        (S.ListTurnsRequest(tenant_id=TENANT, session_id=sid, page_token="nope"), "page_token"),
    ):
        _, violations = await expect_error(stub.ListTurns(request, timeout=TIMEOUT_S), grpc.StatusCode.INVALID_ARGUMENT)
        assert field in [f for f, _ in violations]
    info, _ = await expect_error(
        stub.ListTurns(S.ListTurnsRequest(tenant_id="globex", session_id=sid), timeout=TIMEOUT_S),
        grpc.StatusCode.NOT_FOUND,
    )
    assert info.reason == "SESSION_NOT_FOUND"


async def test_list_messages_through_a_turn(stub: Stub) -> None:
    sid = await three_turns(stub)
    everything = await conversation(stub, sid)
    assert [m.turn_id for m in everything] == ["t1", "t1", "t2", "t2", "t2", "t3"]
    assert await conversation(stub, sid, through_turn_id="t2") == everything[:5]
    assert await conversation(stub, sid, through_turn_id="t1") == everything[:2]
    info, _ = await expect_error(
        stub.ListMessages(
            S.ListMessagesRequest(tenant_id=TENANT, session_id=sid, through_turn_id="t9"), timeout=TIMEOUT_S
        ),
        grpc.StatusCode.NOT_FOUND,
    )
    assert info.reason == "TURN_NOT_FOUND" and info.metadata["turn_id"] == "t9"


# --------------------------------------------------------------------------- ForkSession


async def test_a_fork_copies_the_conversation_up_to_a_turn_and_leaves_the_original_untouched(stub: Stub) -> None:
    sid = await three_turns(stub)
    lease = await stub.AcquireTurnLease(
        S.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=sid, turn_id="summarize"), timeout=TIMEOUT_S
    )
    summarize = S.UpdateSummaryRequest(
        tenant_id=TENANT, session_id=sid, text="greeted", covered_message_count=2, lease_token=lease.lease_token
    )
    await stub.UpdateSummary(summarize, timeout=TIMEOUT_S)
    release = S.ReleaseTurnLeaseRequest(tenant_id=TENANT, session_id=sid, lease_token=lease.lease_token)
    await stub.ReleaseTurnLease(release, timeout=TIMEOUT_S)
    original = await conversation(stub, sid)
    before = (await stub.GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id=sid), timeout=TIMEOUT_S)).session

    made = await stub.ForkSession(
        S.ForkSessionRequest(tenant_id=TENANT, session_id=sid, turn_id="t2", agent="critic", labels={"v": "2"}),
        timeout=TIMEOUT_S,
    )
    fork = made.session
    assert made.message_count == 5 and fork.message_count == 5 and fork.session_id != sid
    assert (fork.agent, dict(fork.labels), fork.role_id, list(fork.active_skill_ids)) == (
        "critic",
        {"v": "2"},
        "",  # another agent starts in its own default role
        ["calc"],
    )
    assert (fork.forked_from.session_id, fork.forked_from.turn_id) == (sid, "t2")
    assert fork.forked_from.fork_time.seconds > 0
    copied = await conversation(stub, fork.session_id)
    assert len(copied) == 5
    for theirs, ours in zip(original[:5], copied, strict=True):
        assert theirs == ours  # message by message, turn ids and times too
    rehydrated = await stub.GetRehydrationPayload(
        S.GetRehydrationPayloadRequest(tenant_id=TENANT, session_id=fork.session_id), timeout=TIMEOUT_S
    )
    assert (rehydrated.summary.text, rehydrated.summary.covered_message_count) == ("greeted", 2)

    # Before t2: the conversation of t1 alone; the summary covers no more, so it comes along.
    before_t2 = await stub.ForkSession(
        S.ForkSessionRequest(tenant_id=TENANT, session_id=sid, turn_id="t2", before_turn=True), timeout=TIMEOUT_S
    )
    assert before_t2.message_count == 2 and before_t2.session.forked_from.turn_id == "t1"
    assert before_t2.session.agent == "default"
    assert await conversation(stub, before_t2.session.session_id) == original[:2]
    before_t1 = await stub.ForkSession(
        S.ForkSessionRequest(tenant_id=TENANT, session_id=sid, turn_id="t1", before_turn=True), timeout=TIMEOUT_S
    )
    assert before_t1.message_count == 0 and before_t1.session.forked_from.turn_id == ""
    summary = await stub.GetRehydrationPayload(
        S.GetRehydrationPayloadRequest(tenant_id=TENANT, session_id=before_t1.session.session_id), timeout=TIMEOUT_S
    )
    assert not summary.HasField("summary")  # it covered more than was copied
    whole = await stub.ForkSession(S.ForkSessionRequest(tenant_id=TENANT, session_id=sid), timeout=TIMEOUT_S)
    assert whole.message_count == 6 and whole.session.forked_from.turn_id == "t3"

    # The original is as it was, message by message.
    assert await conversation(stub, sid) == original
    after = (await stub.GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id=sid), timeout=TIMEOUT_S)).session
    assert after.message_count == before.message_count and not after.HasField("forked_from")

    lineage = await stub.ListSessions(S.ListSessionsRequest(tenant_id=TENANT, forked_from=sid), timeout=TIMEOUT_S)
    assert {s.session_id for s in lineage.sessions} == {
        fork.session_id,
        before_t2.session.session_id,
        before_t1.session.session_id,
        whole.session.session_id,
    }

    info, _ = await expect_error(
        stub.ForkSession(S.ForkSessionRequest(tenant_id=TENANT, session_id=sid, turn_id="t9"), timeout=TIMEOUT_S),
        grpc.StatusCode.NOT_FOUND,
    )
    assert info.reason == "TURN_NOT_FOUND"
    _, violations = await expect_error(
        stub.ForkSession(S.ForkSessionRequest(tenant_id=TENANT, session_id=sid, labels={"BAD": "x"})),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert [f for f, _ in violations] == ['labels["BAD"]']


# --------------------------------------------------------------------------- RewindSession and ROLLBACK


async def test_rewind_drops_turns_logs_the_event_and_is_refused_while_a_turn_runs(stub: Stub) -> None:
    sid = await three_turns(stub)
    original = await conversation(stub, sid)
    failed = await stub.RewindSession(S.RewindSessionRequest(tenant_id=TENANT, session_id=sid, turn_id="t3"))
    assert failed.session.status == resources_pb2.SESSION_STATUS_IDLE  # t3 failed, and is gone
    assert failed.event.rewound.dropped_message_count == 1
    await run_turn(stub, sid, "t3", "and 3+3?", "6")
    original = [*original[:5], *(await conversation(stub, sid))[5:]]
    granted = await begin(stub, sid, "t4", "more")
    info, _ = await expect_error(
        stub.RewindSession(S.RewindSessionRequest(tenant_id=TENANT, session_id=sid, turn_id="t2"), timeout=TIMEOUT_S),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert info.reason == "TURN_IN_PROGRESS" and info.metadata["turn_id"] == "t4"
    await finish(stub, sid, "t4", granted.lease_token, "more", "sure")

    rewound = await stub.RewindSession(
        S.RewindSessionRequest(tenant_id=TENANT, session_id=sid, turn_id="t2", requested_by="alice"),
        timeout=TIMEOUT_S,
    )
    event = rewound.event
    assert (event.seq, event.rewound.void_after_seq, event.rewound.void_through_seq) == (17, 3, 16)
    assert list(event.rewound.dropped_turn_ids) == ["t2", "t3", "t4"]
    assert (event.rewound.dropped_message_count, event.rewound.reason, event.rewound.requested_by) == (
        7,
        "rewind",
        "alice",
    )
    assert rewound.session.message_count == 2
    assert await conversation(stub, sid) == original[:2]
    assert (await log_of(stub, sid, 16))[0] == event
    turns = (await stub.ListTurns(S.ListTurnsRequest(tenant_id=TENANT, session_id=sid), timeout=TIMEOUT_S)).turns
    assert [t.turn_id for t in turns] == ["t1"]
    info, _ = await expect_error(
        stub.RewindSession(S.RewindSessionRequest(tenant_id=TENANT, session_id=sid, turn_id="t2"), timeout=TIMEOUT_S),
        grpc.StatusCode.NOT_FOUND,
    )
    assert info.reason == "TURN_NOT_FOUND"
    _, violations = await expect_error(
        stub.RewindSession(S.RewindSessionRequest(tenant_id=TENANT, session_id=sid), timeout=TIMEOUT_S),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert [f for f, _ in violations] == ["turn_id"]


async def test_a_rollback_turn_drops_the_turn_it_interrupted_before_it_starts(stub: Stub) -> None:
    sid = await new_session(stub)
    await run_turn(stub, sid, "t1", "hi", "hello")
    running = await begin(stub, sid, "t2", "write an essay")
    rollback = asyncio.create_task(
        begin(stub, sid, "t3", "no, a poem", strategy=S.MULTITASK_STRATEGY_ROLLBACK, start_messages=50)
    )
    # t2's runtime learns of the interrupt as it renews its lease, and stops, keeping what it wrote.
    renew = S.RenewTurnLeaseRequest(tenant_id=TENANT, session_id=sid, lease_token=running.lease_token)
    while not (await stub.RenewTurnLease(renew, timeout=TIMEOUT_S)).interrupt_requested_by:
        assert not rollback.done(), rollback
        await asyncio.sleep(0.01)
    cancelled = events_pb2.TurnError(kind=events_pb2.ERROR_KIND_CANCELLED, message="interrupted")
    await stub.AppendEvents(
        S.AppendEventsRequest(
            tenant_id=TENANT,
            session_id=sid,
            turn_id="t2",
            lease_token=running.lease_token,
            events=[events_pb2.RuntimeEvent(error=cancelled, turn_id="t2")],
            messages=[message("t2", "write an essay", messages_pb2.ROLE_USER), message("t2", "Once upon")],
            release_lease=True,
        ),
        timeout=TIMEOUT_S,
    )
    granted = await rollback
    assert granted.interrupted_turn_id == "t2"
    # The start the new turn reads holds t1 alone: t2's messages never reach it.
    assert [(m.turn_id, m.content) for m in granted.start.messages] == [("t1", "hi"), ("t1", "hello")]
    assert granted.start.session.message_count == 2
    log = await log_of(stub, sid)
    rewind = log[-1]
    assert rewind.WhichOneof("payload") == "rewound" and rewind.turn_id == "t3"
    assert (rewind.rewound.turn_id, list(rewind.rewound.dropped_turn_ids), rewind.rewound.reason) == (
        "t2",
        ["t2"],
        "rollback",
    )
    # t2's events are void; t3's own acceptance, logged with its grant, is not.
    assert (rewind.rewound.void_after_seq, rewind.rewound.void_through_seq) == (3, granted.start_seq)
    assert {e.turn_id for e in log[3 : granted.start_seq]} == {"t2"}
    assert log[granted.start_seq].turn_id == "t3" and rewind.seq == granted.last_seq + 1
    assert rewind.rewound.dropped_message_count == 2
    await finish(stub, sid, "t3", granted.lease_token, "no, a poem", "Roses")
    assert [m.turn_id for m in await conversation(stub, sid)] == ["t1", "t1", "t3", "t3"]
