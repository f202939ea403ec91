"""The sessions service over gRPC, on the memory store and on a real Redis.

Every RPC with good input, the statuses of bad input (the field named, a foreign
tenant's session NOT_FOUND), lease strategies against the caller's deadline, and
Redis faults: a dead or hung Redis is UNAVAILABLE with retryable=true, fast, and the
service recovers when Redis is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2

from cogmesh.common.v1 import events_pb2, messages_pb2
from cogmesh.sessions.v1 import sessions_pb2 as S
from cogmesh.sessions.v1 import sessions_pb2_grpc
from services.kit.protos import dict_to_struct, struct_to_dict
from services.kit.server import start
from services.sessions import main as sessions_main
from services.sessions.settings import SessionsSettings
from tests.integration.conftest import DOMAIN, status_details
from tests.support.redis_server import RedisServer
from tests.support.redis_topologies import REDIS_TOPOLOGIES, redis_for
from tests.support.waiting import until

TENANT, OTHER = "acme", "globex"
TIMEOUT_S = 10.0


@contextlib.asynccontextmanager
async def sessions_service(settings: SessionsSettings) -> AsyncIterator[sessions_pb2_grpc.SessionsServiceStub]:
    server = await start(sessions_main.build, settings, "127.0.0.1:0")
    channel = grpc.aio.insecure_channel(server.address)
    try:
        yield sessions_pb2_grpc.SessionsServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(0)


@pytest.fixture(params=["memory", *REDIS_TOPOLOGIES])
async def stub(request: pytest.FixtureRequest) -> AsyncIterator[sessions_pb2_grpc.SessionsServiceStub]:
    with contextlib.ExitStack() as stack:
        settings = SessionsSettings()
        if request.param != "memory":
            redis = stack.enter_context(redis_for(request, request.param))
            settings = SessionsSettings(redis_url=redis.url, redis_key_prefix=redis.prefix)
        async with sessions_service(settings) as client:
            yield client


async def create(stub: Any, **fields: Any) -> Any:
    fields.setdefault("tenant_id", TENANT)
    fields.setdefault("agent", "default")
    return await stub.CreateSession(S.CreateSessionRequest(**fields), timeout=TIMEOUT_S)


async def acquire(
    stub: Any, session_id: str, turn_id: str = "turn-1", deadline_s: float = TIMEOUT_S, **fields: Any
) -> Any:
    request = S.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=session_id, turn_id=turn_id, **fields)
    return await stub.AcquireTurnLease(request, timeout=deadline_s)


def message(text: str, role: int = messages_pb2.ROLE_USER) -> messages_pb2.Message:
    return messages_pb2.Message(role=role, content=text)  # type: ignore[arg-type]


async def expect_error(call: Any, code: grpc.StatusCode) -> tuple[Any, list[tuple[str, str]], Any]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    err = caught.value
    assert err.code() == code, f"{err.code()}: {err.details()}"
    info, violations = status_details(err)
    assert info is not None and info.domain == DOMAIN, "every error carries an ErrorInfo"
    return info, violations, err


# --------------------------------------------------------------------------- good input


async def test_session_state_identity_and_updates(stub: Any) -> None:
    created = await create(
        stub,
        user_id="u1",
        topic_id="savings",
        role_id="coach",
        active_skill_ids=["finuslugi"],
        runtime_config=dict_to_struct({"model": "local", "max_tool_calls": 8}),
        delegated_from="orchestrator",
    )
    session, state = created.session, created.state
    assert (session.user_id, session.topic_id, session.role_id) == ("u1", "savings", "coach")
    assert list(session.active_skill_ids) == ["finuslugi"]
    assert struct_to_dict(state.runtime_config) == {"model": "local", "max_tool_calls": 8}
    assert (state.delegated_from, state.delegation_turn_count) == ("orchestrator", 0)
    assert state.HasField("expire_time"), "the default TTL evicts idle sessions eventually"

    found = await stub.LookupSession(S.LookupSessionRequest(tenant_id=TENANT, user_id="u1", topic_id="savings"))
    assert found.session.session_id == session.session_id
    again = await create(stub, user_id="u1", topic_id="savings", reuse_existing=True)
    assert again.reused and again.session.session_id == session.session_id

    updated = await stub.UpdateSession(
        S.UpdateSessionRequest(
            tenant_id=TENANT,
            session_id=session.session_id,
            role_id="credit_advisor",
            active_skill_ids=["credit-mcp"],
            prompt_hash="ignored: not in the mask",
            update_mask=field_mask_pb2.FieldMask(paths=["role_id", "active_skill_ids"]),
        )
    )
    assert updated.session.role_id == "credit_advisor"
    assert list(updated.session.active_skill_ids) == ["credit-mcp"]
    assert updated.session.prompt_hash == ""
    got = await stub.GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id=session.session_id))
    assert got.session.role_id == "credit_advisor" and got.state.delegated_from == "orchestrator"

    other = await create(stub, user_id="u2")
    listed = await stub.ListSessions(S.ListSessionsRequest(tenant_id=TENANT, page_size=1))
    assert [s.session_id for s in listed.sessions] == [other.session.session_id] and listed.next_page_token
    rest = await stub.ListSessions(
        S.ListSessionsRequest(tenant_id=TENANT, page_size=1, page_token=listed.next_page_token)
    )
    assert [s.session_id for s in rest.sessions] == [session.session_id] and not rest.next_page_token
    closed = await stub.CloseAllSessions(S.CloseAllSessionsRequest(tenant_id=TENANT, user_id="u1"))
    assert closed.closed_count == 1
    await expect_error(
        stub.GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id=session.session_id)),
        grpc.StatusCode.NOT_FOUND,
    )


async def test_messages_lease_and_paging(stub: Any) -> None:
    sid = (await create(stub)).session.session_id
    lease = await acquire(stub, sid, ttl_seconds=30)
    assert lease.lease_token > 0 and lease.expire_time.seconds > time.time()
    appended = await stub.AppendMessages(
        S.AppendMessagesRequest(
            tenant_id=TENANT,
            session_id=sid,
            lease_token=lease.lease_token,
            messages=[message(f"m{i}") for i in range(5)],
            request_id="r1",
        )
    )
    assert (appended.message_count, appended.deduplicated) == (5, False)
    retried = await stub.AppendMessages(
        S.AppendMessagesRequest(
            tenant_id=TENANT, session_id=sid, lease_token=lease.lease_token, messages=[message("m0")], request_id="r1"
        )
    )
    assert (retried.message_count, retried.deduplicated) == (5, True)
    texts: list[str] = []
    token = ""
    while True:
        page = await stub.ListMessages(
            S.ListMessagesRequest(tenant_id=TENANT, session_id=sid, page_size=2, page_token=token)
        )
        texts += [m.content for m in page.messages]
        assert all(m.HasField("create_time") for m in page.messages)
        token = page.next_page_token
        if not token:
            break
    assert texts == [f"m{i}" for i in range(5)]
    last = await stub.ListMessages(S.ListMessagesRequest(tenant_id=TENANT, session_id=sid, last_n=2))
    assert [m.content for m in last.messages] == ["m3", "m4"]

    renewed = await stub.RenewTurnLease(
        S.RenewTurnLeaseRequest(tenant_id=TENANT, session_id=sid, lease_token=lease.lease_token, ttl_seconds=60)
    )
    assert renewed.expire_time.seconds > lease.expire_time.seconds and renewed.interrupt_requested_by == ""
    info = await stub.GetTurnLease(S.GetTurnLeaseRequest(tenant_id=TENANT, session_id=sid))
    assert (info.lease.turn_id, info.lease.lease_token) == ("turn-1", lease.lease_token)
    released = await stub.ReleaseTurnLease(
        S.ReleaseTurnLeaseRequest(tenant_id=TENANT, session_id=sid, lease_token=lease.lease_token)
    )
    assert released.released
    assert not (await stub.GetTurnLease(S.GetTurnLeaseRequest(tenant_id=TENANT, session_id=sid))).HasField("lease")


async def test_a_page_of_big_messages_stops_under_the_grpc_limit(stub: Any) -> None:
    sid = (await create(stub)).session.session_id
    token = (await acquire(stub, sid)).lease_token
    big = "x" * ((1 << 20) - 100)  # just under the 1 MiB cap each
    for _ in range(5):
        await stub.AppendMessages(
            S.AppendMessagesRequest(tenant_id=TENANT, session_id=sid, lease_token=token, messages=[message(big)])
        )
    first = await stub.ListMessages(S.ListMessagesRequest(tenant_id=TENANT, session_id=sid, page_size=10))
    assert 0 < len(first.messages) < 5 and first.next_page_token
    rest = await stub.ListMessages(
        S.ListMessagesRequest(tenant_id=TENANT, session_id=sid, page_size=10, page_token=first.next_page_token)
    )
    assert len(first.messages) + len(rest.messages) == 5 and not rest.next_page_token


async def test_checkpoints_pause_decide_and_resume(stub: Any) -> None:
    sid = (await create(stub)).session.session_id
    pausing = (await acquire(stub, sid, "turn-pause")).lease_token
    approval = events_pb2.ApprovalRequired(
        action_name="transfer",
        arguments=dict_to_struct({"amount": 100}),
        allowed_decisions=[events_pb2.APPROVAL_DECISION_APPROVE, events_pb2.APPROVAL_DECISION_REJECT],
        description="moves money",
    )
    written = await stub.WriteCheckpoint(
        S.WriteCheckpointRequest(
            tenant_id=TENANT,
            session_id=sid,
            lease_token=pausing,
            checkpoint=S.Checkpoint(interrupt_id="int-1", turn_id="turn-pause", approval=approval, payload=b"\x00s"),
        )
    )
    assert written.checkpoint.approval.interrupt_id == "int-1", "the request quotes its interrupt id"
    assert written.checkpoint.lease_token == pausing and written.checkpoint.HasField("create_time")
    await stub.ReleaseTurnLease(S.ReleaseTurnLeaseRequest(tenant_id=TENANT, session_id=sid, lease_token=pausing))
    state = (await stub.GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id=sid))).state
    assert list(state.pending_interrupt_ids) == ["int-1"]

    _, violations, _ = await expect_error(
        stub.DecideCheckpoint(
            S.DecideCheckpointRequest(
                tenant_id=TENANT, session_id=sid, interrupt_id="int-1", decision=S.CheckpointDecision(text="sure")
            )
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert [f for f, _ in violations] == ["decision.approval"]
    decision = S.CheckpointDecision(approval=events_pb2.APPROVAL_DECISION_APPROVE, decided_by="on-call")
    decided = await stub.DecideCheckpoint(
        S.DecideCheckpointRequest(tenant_id=TENANT, session_id=sid, interrupt_id="int-1", decision=decision)
    )
    assert decided.checkpoint.decision.decided_by == "on-call" and decided.checkpoint.decision.HasField("decide_time")
    await stub.DecideCheckpoint(  # the same answer again is fine
        S.DecideCheckpointRequest(tenant_id=TENANT, session_id=sid, interrupt_id="int-1", decision=decision)
    )
    await expect_error(
        stub.DecideCheckpoint(
            S.DecideCheckpointRequest(
                tenant_id=TENANT,
                session_id=sid,
                interrupt_id="int-1",
                decision=S.CheckpointDecision(approval=events_pb2.APPROVAL_DECISION_REJECT, text="no"),
            )
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    listed = await stub.ListCheckpoints(S.ListCheckpointsRequest(tenant_id=TENANT, session_id=sid))
    assert [c.interrupt_id for c in listed.checkpoints] == ["int-1"]

    resuming = (await acquire(stub, sid, "turn-resume")).lease_token
    consumed = await stub.ConsumeCheckpoint(
        S.ConsumeCheckpointRequest(tenant_id=TENANT, session_id=sid, interrupt_id="int-1", lease_token=resuming)
    )
    assert consumed.checkpoint.payload == b"\x00s"
    assert consumed.checkpoint.approval.action_name == "transfer"
    assert consumed.checkpoint.decision.approval == events_pb2.APPROVAL_DECISION_APPROVE
    info, _, _ = await expect_error(
        stub.GetCheckpoint(S.GetCheckpointRequest(tenant_id=TENANT, session_id=sid, interrupt_id="int-1")),
        grpc.StatusCode.NOT_FOUND,
    )
    assert info.metadata["interrupt_id"] == "int-1"


async def test_rehydration_payload(stub: Any) -> None:
    sid = (await create(stub, role_id="coach", active_skill_ids=["finuslugi"])).session.session_id
    token = (await acquire(stub, sid)).lease_token
    await stub.AppendMessages(
        S.AppendMessagesRequest(
            tenant_id=TENANT, session_id=sid, lease_token=token, messages=[message(f"m{i}") for i in range(15)]
        )
    )
    await stub.UpdateSummary(
        S.UpdateSummaryRequest(tenant_id=TENANT, session_id=sid, text="User discussed savings", covered_message_count=5)
    )
    goal = await stub.SaveGoal(
        S.SaveGoalRequest(tenant_id=TENANT, session_id=sid, goal=S.Goal(text="Open a deposit", data=dict_to_struct({})))
    )
    assert goal.goal.status == S.GOAL_STATUS_ACTIVE and goal.goal.goal_id
    await stub.SetPhase(
        S.SetPhaseRequest(
            tenant_id=TENANT, session_id=sid, phase=S.PhaseState(phase="recommendation", data=dict_to_struct({"s": 1}))
        )
    )
    goals = await stub.ListGoals(S.ListGoalsRequest(tenant_id=TENANT, session_id=sid))
    assert [g.text for g in goals.goals] == ["Open a deposit"]
    payload = await stub.GetRehydrationPayload(S.GetRehydrationPayloadRequest(tenant_id=TENANT, session_id=sid))
    assert [f.name for f in S.GetRehydrationPayloadResponse.DESCRIPTOR.fields] == [
        "session",
        "state",
        "summary",
        "last_messages",
        "goal",
        "phase",
    ], "the payload keeps seed 000's order"
    assert (payload.session.role_id, list(payload.session.active_skill_ids)) == ("coach", ["finuslugi"])
    assert payload.summary.text == "User discussed savings" and payload.summary.covered_message_count == 5
    assert [m.content for m in payload.last_messages] == [f"m{i}" for i in range(5, 15)]  # default: last 10
    assert payload.goal.text == "Open a deposit"
    assert payload.phase.phase == "recommendation"
    three = await stub.GetRehydrationPayload(S.GetRehydrationPayloadRequest(tenant_id=TENANT, session_id=sid, last_n=3))
    assert [m.content for m in three.last_messages] == ["m12", "m13", "m14"]


# --------------------------------------------------------------------------- the multitask strategies


async def test_reject_names_the_running_turn(stub: Any) -> None:
    sid = (await create(stub)).session.session_id
    await acquire(stub, sid, "running")
    info, _, _ = await expect_error(acquire(stub, sid, "second"), grpc.StatusCode.FAILED_PRECONDITION)
    assert info.reason == "TURN_IN_PROGRESS" and info.metadata["turn_id"] == "running"


async def test_enqueue_waits_and_honours_the_callers_deadline(stub: Any) -> None:
    sid = (await create(stub)).session.session_id
    first = (await acquire(stub, sid, "running")).lease_token
    started = time.monotonic()
    info, _, err = await expect_error(
        acquire(stub, sid, "impatient", strategy=S.MULTITASK_STRATEGY_ENQUEUE, deadline_s=1.5),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert 0.9 < time.monotonic() - started < 1.5, "answers just before the deadline, not after"
    assert info.reason == "TURN_IN_PROGRESS" and info.metadata["turn_id"] == "running"
    assert "after waiting" in (err.details() or "")
    assert (
        list((await stub.GetTurnLease(S.GetTurnLeaseRequest(tenant_id=TENANT, session_id=sid))).queued_turn_ids) == []
    )

    waiting = asyncio.create_task(acquire(stub, sid, "patient", strategy=S.MULTITASK_STRATEGY_ENQUEUE, deadline_s=5))
    await asyncio.sleep(0.2)
    await stub.ReleaseTurnLease(S.ReleaseTurnLeaseRequest(tenant_id=TENANT, session_id=sid, lease_token=first))
    granted = await asyncio.wait_for(waiting, 5)
    # The server's clock starts when the request lands, a little after the task was created.
    assert granted.lease_token > first and granted.waited_seconds >= 0.1


async def test_interrupt_reaches_the_holder_through_renew(stub: Any) -> None:
    sid = (await create(stub)).session.session_id
    held = (await acquire(stub, sid, "running")).lease_token
    interrupter = asyncio.create_task(
        acquire(stub, sid, "urgent", strategy=S.MULTITASK_STRATEGY_INTERRUPT, deadline_s=5)
    )
    await asyncio.sleep(0.2)
    renewed = await stub.RenewTurnLease(S.RenewTurnLeaseRequest(tenant_id=TENANT, session_id=sid, lease_token=held))
    assert renewed.interrupt_requested_by == "urgent"
    await stub.ReleaseTurnLease(S.ReleaseTurnLeaseRequest(tenant_id=TENANT, session_id=sid, lease_token=held))
    granted = await asyncio.wait_for(interrupter, 5)
    assert granted.interrupted_turn_id == "running"
    info, _, _ = await expect_error(
        stub.AppendMessages(
            S.AppendMessagesRequest(tenant_id=TENANT, session_id=sid, lease_token=held, messages=[message("stale")])
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert info.reason == "TURN_NOT_FOUND"


async def test_a_look_for_orphans_says_none_is_open_only_when_none_is(stub: Any) -> None:
    """ClaimOrphanedTurns' none_open: an idle runtime waits a whole lease TTL after it (docs/durability.md)."""
    look = S.ClaimOrphanedTurnsRequest(holder="10.0.0.9:50052", max_turns=4, ttl_seconds=6)
    idle = await stub.ClaimOrphanedTurns(look, timeout=TIMEOUT_S)
    assert list(idle.turns) == [] and idle.none_open
    sid = (await create(stub)).session.session_id
    accepted = events_pb2.RuntimeEvent(status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_QUEUED))
    opened = S.JournalEntry(kind="request", state=b"hello", position=1)
    await acquire(stub, sid, "t1", events=[accepted], entries=[opened])  # opens the turn, as the gateway does
    busy = await stub.ClaimOrphanedTurns(look, timeout=TIMEOUT_S)
    assert list(busy.turns) == [] and not busy.none_open, "a live open turn: not due, but open"


async def test_an_idle_look_for_orphans_is_answered_when_a_turn_opens() -> None:
    """wait_seconds: with nothing open, one sessions process (memory stores) holds the look until a turn
    opens, so an idle runtime asks again when there is work, not on a clock. The answer is the one it would
    have given at once: none open, so none can come due within a lease TTL."""
    server = await start(sessions_main.build, SessionsSettings(), "127.0.0.1:0")
    servicer = server.app.mounts[0].servicer
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = sessions_pb2_grpc.SessionsServiceStub(channel)
        look = S.ClaimOrphanedTurnsRequest(holder="10.0.0.9:50052", max_turns=4, ttl_seconds=6, wait_seconds=300)
        try:
            held = asyncio.ensure_future(stub.ClaimOrphanedTurns(look, timeout=600))
            await until(lambda: servicer.held_looks == 1)
            sid = (await create(stub)).session.session_id
            assert not held.done(), "a session made is not a turn opened"
            accepted = events_pb2.RuntimeEvent(status=events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_QUEUED))
            opened = S.JournalEntry(kind="request", state=b"hello", position=1)
            token = (await acquire(stub, sid, "t1", events=[accepted], entries=[opened])).lease_token
            answer = await asyncio.wait_for(held, TIMEOUT_S)
            assert list(answer.turns) == [] and answer.none_open and servicer.held_looks == 0
            # A turn is open now: the next look is answered at once, whatever it would wait.
            busy = await stub.ClaimOrphanedTurns(look, timeout=TIMEOUT_S)
            assert list(busy.turns) == [] and not busy.none_open
            # The turn let go: nothing open again. The drain answers a held look, so the stop need not wait.
            await stub.ReleaseTurnLease(S.ReleaseTurnLeaseRequest(tenant_id=TENANT, session_id=sid, lease_token=token))
            quiet = asyncio.ensure_future(stub.ClaimOrphanedTurns(look, timeout=600))
            await until(lambda: servicer.held_looks == 1)
            await servicer.drain()
            assert (await asyncio.wait_for(quiet, TIMEOUT_S)).none_open
        finally:
            await server.stop(0)


@pytest.mark.parametrize("topology", REDIS_TOPOLOGIES)
async def test_a_look_on_a_shared_store_is_answered_at_once(request: pytest.FixtureRequest, topology: str) -> None:
    """A store replicas share (Redis) cannot see a turn open through another replica: it never holds a look
    (a held one would outlive this call's deadline)."""
    with redis_for(request, topology) as redis:
        settings = SessionsSettings(redis_url=redis.url, redis_key_prefix=redis.prefix)
        async with sessions_service(settings) as stub:
            look = S.ClaimOrphanedTurnsRequest(holder="10.0.0.9:50052", max_turns=4, ttl_seconds=6, wait_seconds=300)
            idle = await stub.ClaimOrphanedTurns(look, timeout=TIMEOUT_S)
            assert list(idle.turns) == [] and idle.none_open


# --------------------------------------------------------------------------- bad input


async def test_bad_input_names_the_field(stub: Any) -> None:
    sid = (await create(stub)).session.session_id
    token = (await acquire(stub, sid)).lease_token
    oversized = message("y" * ((16 << 20) + 1))  # a stored message holds at most 16 MiB
    cases: list[tuple[Any, list[str]]] = [
        (stub.ListMessages(S.ListMessagesRequest(tenant_id=TENANT, session_id=sid, page_size=-1)), ["page_size"]),
        (stub.ListSessions(S.ListSessionsRequest(tenant_id=TENANT, page_size=-5)), ["page_size"]),
        (
            stub.AppendMessages(
                S.AppendMessagesRequest(tenant_id=TENANT, session_id=sid, lease_token=token, messages=[oversized])
            ),
            ["messages[0]"],
        ),
        (
            stub.AcquireTurnLease(S.AcquireTurnLeaseRequest(tenant_id=TENANT, session_id=sid, turn_id="t", strategy=9)),
            ["strategy"],
        ),
        (
            stub.UpdateSession(
                S.UpdateSessionRequest(
                    tenant_id=TENANT, session_id=sid, update_mask=field_mask_pb2.FieldMask(paths=["scope"])
                )
            ),
            ["update_mask"],
        ),
        (stub.UpdateSession(S.UpdateSessionRequest(tenant_id=TENANT, session_id=sid)), ["update_mask"]),
        (
            stub.UpdateSession(
                S.UpdateSessionRequest(
                    tenant_id=TENANT,
                    session_id=sid,
                    delegation_turn_count=-1,
                    update_mask=field_mask_pb2.FieldMask(paths=["delegation_turn_count"]),
                )
            ),
            ["delegation_turn_count"],
        ),
        (
            stub.UpdateSummary(
                S.UpdateSummaryRequest(tenant_id=TENANT, session_id=sid, text="s", covered_message_count=3)
            ),
            ["covered_message_count"],
        ),
        (
            stub.WriteCheckpoint(
                S.WriteCheckpointRequest(
                    tenant_id=TENANT,
                    session_id=sid,
                    lease_token=token,
                    checkpoint=S.Checkpoint(interrupt_id="i", turn_id="t", payload=b"x" * ((3 << 20) + 1)),
                )
            ),
            ["checkpoint.request", "checkpoint.payload"],
        ),
        (
            stub.WriteCheckpoint(
                S.WriteCheckpointRequest(
                    tenant_id=TENANT,
                    session_id=sid,
                    checkpoint=S.Checkpoint(
                        interrupt_id="i", turn_id="t", user_input=events_pb2.UserInputRequested(interrupt_id="j")
                    ),
                )
            ),
            ["lease_token"],  # the fields' rules first; the rest once they hold (next case)
        ),
        (
            stub.WriteCheckpoint(
                S.WriteCheckpointRequest(
                    tenant_id=TENANT,
                    session_id=sid,
                    lease_token=token,
                    checkpoint=S.Checkpoint(
                        interrupt_id="i", turn_id="t", user_input=events_pb2.UserInputRequested(interrupt_id="j")
                    ),
                )
            ),
            ["checkpoint.user_input.interrupt_id"],
        ),
        (stub.SaveGoal(S.SaveGoalRequest(tenant_id=TENANT, session_id=sid)), ["goal"]),
        (stub.SaveGoal(S.SaveGoalRequest(tenant_id=TENANT, session_id=sid, goal=S.Goal())), ["goal.text"]),
        (
            stub.GetRehydrationPayload(S.GetRehydrationPayloadRequest(tenant_id=TENANT, session_id=sid, last_n=-1)),
            ["last_n"],
        ),
        (stub.LookupSession(S.LookupSessionRequest(tenant_id=TENANT)), ["user_id"]),
        (
            stub.ConsumeCheckpoint(S.ConsumeCheckpointRequest(tenant_id=TENANT, session_id=sid)),
            ["interrupt_id", "lease_token"],
        ),
    ]
    for call, fields in cases:
        info, violations, _ = await expect_error(call, grpc.StatusCode.INVALID_ARGUMENT)
        assert info.reason == "INVALID_ARGUMENT"
        assert [f for f, _ in violations] == fields
    assert (await stub.GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id=sid))).session.message_count == 0


async def test_unknown_and_foreign_sessions_are_not_found(stub: Any) -> None:
    sid = (await create(stub)).session.session_id
    for tenant, session_id in ((TENANT, "f" * 32), (OTHER, sid)):
        calls = [
            stub.GetSession(S.GetSessionRequest(tenant_id=tenant, session_id=session_id)),
            stub.ListMessages(S.ListMessagesRequest(tenant_id=tenant, session_id=session_id)),
            stub.AcquireTurnLease(S.AcquireTurnLeaseRequest(tenant_id=tenant, session_id=session_id, turn_id="t")),
            stub.GetRehydrationPayload(S.GetRehydrationPayloadRequest(tenant_id=tenant, session_id=session_id)),
            stub.ListCheckpoints(S.ListCheckpointsRequest(tenant_id=tenant, session_id=session_id)),
            stub.UpdateSession(
                S.UpdateSessionRequest(
                    tenant_id=tenant,
                    session_id=session_id,
                    role_id="x",
                    update_mask=field_mask_pb2.FieldMask(paths=["role_id"]),
                )
            ),
        ]
        for call in calls:
            info, _, _ = await expect_error(call, grpc.StatusCode.NOT_FOUND)
            assert info.reason == "SESSION_NOT_FOUND" and info.metadata["session_id"] == session_id
    assert not (await stub.DeleteSession(S.DeleteSessionRequest(tenant_id=OTHER, session_id=sid))).deleted
    assert (await stub.GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id=sid))).session.session_id == sid


# --------------------------------------------------------------------------- Redis faults


async def test_redis_going_away_is_unavailable_and_retryable_then_recovers(private_redis: RedisServer) -> None:
    settings = SessionsSettings(redis_url=private_redis.url, redis_timeout_s=0.5)
    async with sessions_service(settings) as stub:
        sid = (await create(stub)).session.session_id
        private_redis.kill()
        started = time.monotonic()
        for call in (
            create(stub),
            stub.GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id=sid), timeout=TIMEOUT_S),
            acquire(stub, sid),
        ):
            info, _, _ = await expect_error(call, grpc.StatusCode.UNAVAILABLE)
            assert info.reason == "DEPENDENCY_UNAVAILABLE" and info.metadata["retryable"] == "true"
        assert time.monotonic() - started < 5, "a dead Redis fails fast"
        private_redis.start()  # empty again: it kept nothing on disk
        fresh = await create(stub)
        assert (await acquire(stub, fresh.session.session_id)).lease_token == 1


async def test_a_hung_redis_times_out_as_unavailable(private_redis: RedisServer) -> None:
    settings = SessionsSettings(redis_url=private_redis.url, redis_timeout_s=0.3)
    async with sessions_service(settings) as stub:
        sid = (await create(stub)).session.session_id
        private_redis.pause()
        try:
            started = time.monotonic()
            info, _, _ = await expect_error(
                stub.GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id=sid), timeout=TIMEOUT_S),
                grpc.StatusCode.UNAVAILABLE,
            )
            assert info.metadata["retryable"] == "true"
            assert time.monotonic() - started < 3, "bounded by the Redis timeout (and one retry), never a hang"
        finally:
            private_redis.resume()
        got = await stub.GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id=sid), timeout=TIMEOUT_S)
        assert got.session.session_id == sid


async def test_the_service_refuses_to_start_without_its_redis() -> None:
    settings = SessionsSettings(redis_url="redis://:secret@127.0.0.1:1/0", redis_timeout_s=0.3)
    with pytest.raises(SystemExit, match=re.escape("cannot reach Redis at redis://***@127.0.0.1:1/0")):
        await start(sessions_main.build, settings, "127.0.0.1:0")


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_the_session_ttl_setting_evicts_idle_sessions(kind: str, request: pytest.FixtureRequest) -> None:
    redis_fields = {}
    if kind == "redis":
        redis_fields = {
            "redis_url": request.getfixturevalue("redis_url"),
            "redis_key_prefix": request.getfixturevalue("redis_prefix"),
        }
    async with sessions_service(SessionsSettings(session_ttl_s=0.3, **redis_fields)) as short:
        sid = (await create(short)).session.session_id
        await asyncio.sleep(0.5)
        info, _, _ = await expect_error(
            short.GetSession(S.GetSessionRequest(tenant_id=TENANT, session_id=sid)), grpc.StatusCode.NOT_FOUND
        )
        assert info.reason == "SESSION_NOT_FOUND"
    async with sessions_service(SessionsSettings(session_ttl_s=0, **redis_fields)) as forever:
        created = await create(forever)
        assert not created.state.HasField("expire_time")
