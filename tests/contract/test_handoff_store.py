"""What a turn's events change in its session, on every store (memory, and Redis standalone, Sentinel
and cluster): a `handoff` sets the active agent, a `plan` the todo list, and a turn that delegates is
counted once, in the same write as the events, so a resent append or a redone step changes nothing more."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from cogmesh.common.v1 import events_pb2
from services.sessions import leases
from services.sessions.model import NewEvents, NewSession, SessionUpdate, StaleLease, Strategy
from services.sessions.redis_store import RedisSessionStore
from services.sessions.store import MemorySessionStore, SessionStore
from tests.support.redis_topologies import REDIS_TOPOLOGIES, redis_for

ACME = "acme"


@pytest.fixture(params=["memory", *REDIS_TOPOLOGIES])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[SessionStore]:
    with contextlib.ExitStack() as stack:
        made: SessionStore
        if request.param == "memory":
            made = MemorySessionStore()
        else:
            redis = stack.enter_context(redis_for(request, request.param))
            made = RedisSessionStore.from_url(redis.url, redis.prefix, 0.0, 2.0, 5.0)
        yield made
        await made.close()


def handoff(to: str, frm: str = "triage") -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(handoff=events_pb2.Handoff(from_agent=frm, to_agent=to, reason="billing question"))


def plan(version: int, *done: bool) -> events_pb2.RuntimeEvent:
    pending, completed = events_pb2.TODO_STATUS_PENDING, events_pb2.TODO_STATUS_COMPLETED
    items = [
        events_pb2.TodoItem(id=str(i), content=f"step {i}", status=completed if d else pending)
        for i, d in enumerate(done, 1)
    ]
    return events_pb2.RuntimeEvent(plan=events_pb2.PlanUpdated(items=items, version=version))


def delegation() -> events_pb2.RuntimeEvent:
    return events_pb2.RuntimeEvent(delegation=events_pb2.Delegation(from_agent="triage", to_agent="researcher"))


async def turn(store: SessionStore, sid: str, turn_id: str) -> int:
    grant = await leases.acquire(store, ACME, sid, turn_id, 30.0, Strategy.REJECT, 0)
    return grant.token


async def test_handoff_plan_and_delegation_change_the_session_with_their_events(store: SessionStore) -> None:
    record, _ = await store.create(ACME, NewSession("", "", "triage"))
    sid = record.session_id
    assert (record.active_agent, record.delegated_turns, record.plan) == ("", 0, b"")
    token = await turn(store, sid, "t1")
    append: Callable[[str, list[events_pb2.RuntimeEvent]], Awaitable[object]] = lambda aid, events: (  # noqa: E731
        store.append_events(ACME, sid, NewEvents("t1", token, events, append_id=aid))
    )
    await append("t1:1", [delegation(), plan(1, False, False)])
    await append("t1:2", [delegation(), handoff("billing"), plan(2, True, False)])
    await append("t1:2", [delegation(), handoff("billing"), plan(2, True, False)])  # a resend: applied once
    got = await store.get(ACME, sid)
    assert (got.active_agent, got.delegated_turns) == ("billing", 1)
    assert events_pb2.PlanUpdated.FromString(got.plan) == plan(2, True, False).plan
    # The same turn delegating again (a redone step, another append) still counts once.
    await append("t1:3", [delegation()])
    await store.append_events(ACME, sid, NewEvents("t1", token, [], append_id="t1:end", release=True))
    assert (await store.get(ACME, sid)).delegated_turns == 1
    # A stale writer changes nothing.
    with pytest.raises(StaleLease):
        await store.append_events(ACME, sid, NewEvents("t1", token, [handoff("x")], append_id="t1:late"))
    # The next turn's acceptance may carry a handoff back (a reset), applied with the grant.
    opening = NewEvents("t2", 0, [handoff("triage", "billing"), delegation()], [("request", b"r", 2)])
    grant = await leases.acquire(store, ACME, sid, "t2", 30.0, Strategy.REJECT, 0, opening)
    assert grant.last_seq > grant.start_seq
    got = await store.get(ACME, sid)
    assert (got.active_agent, got.answering(), got.delegated_turns) == ("triage", "", 2)


async def test_update_sets_and_clears_the_active_agent_and_the_plan_fenced(store: SessionStore) -> None:
    record, _ = await store.create(ACME, NewSession("", "", "triage"))
    sid = record.session_id
    saved = plan(4, True).plan.SerializeToString()
    got = await store.update(ACME, sid, SessionUpdate(active_agent="billing", plan=saved), 0)
    assert (got.answering(), got.plan) == ("billing", saved)
    token = await turn(store, sid, "t1")
    with pytest.raises(StaleLease):
        await store.update(ACME, sid, SessionUpdate(active_agent=""), token + 1)
    got = await store.update(ACME, sid, SessionUpdate(active_agent="", plan=b""), token)
    assert (got.active_agent, got.plan) == ("", b"")
