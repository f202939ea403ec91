"""One contract, every store: each test runs against the memory store and the Redis store on
each form of Redis: standalone, Sentinel and a 6-node cluster (tests/support/redis_topologies.py).

The Redis store talks to real redis-servers under a key prefix of its own. Times are
real and short (tenths of a second), because the Redis store keeps time with Redis's
clock and expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from cogmesh.common.v1 import events_pb2, messages_pb2
from services.lib import session_search as search
from services.sessions import history, leases
from services.sessions.model import (
    MAX_GOALS,
    REMEMBERED_APPENDS,
    Acquired,
    Appended,
    CheckpointConflict,
    CheckpointExists,
    CheckpointNotFound,
    GoalStatus,
    HistoryChanged,
    InvalidValue,
    LeaseHeld,
    LimitExceeded,
    NewCheckpoint,
    NewEvents,
    NewSession,
    Origin,
    Queued,
    Rewind,
    SessionNotFound,
    SessionUpdate,
    StaleLease,
    Strategy,
    TurnNotFound,
)
from services.sessions.redis_store import RedisSessionStore
from services.sessions.store import MemorySessionStore, SessionStore
from tests.support.redis_topologies import REDIS_TOPOLOGIES, redis_for

MakeStore = Callable[..., Awaitable[SessionStore]]
ACME, GLOBEX = "acme", "globex"


@pytest.fixture(params=["memory", *REDIS_TOPOLOGIES])
async def make_store(request: pytest.FixtureRequest) -> AsyncIterator[MakeStore]:
    """Build stores of the parametrised kind; Redis ones share this test's prefix."""
    made: list[SessionStore] = []
    with contextlib.ExitStack() as stack:
        redis = None if request.param == "memory" else stack.enter_context(redis_for(request, request.param))

        async def make(
            session_ttl_s: float = 0.0, waiter_ttl_s: float = 5.0, event_retention: int = 10_000
        ) -> SessionStore:
            store: SessionStore
            if redis is None:
                store = MemorySessionStore(
                    session_ttl_s=session_ttl_s, waiter_ttl_s=waiter_ttl_s, event_retention=event_retention
                )
            else:
                store = RedisSessionStore.from_url(
                    redis.url, redis.prefix, session_ttl_s, 2.0, waiter_ttl_s, event_retention=event_retention
                )
            made.append(store)
            return store

        yield make
        for store in made:
            await store.close()


@pytest.fixture
async def store(make_store: MakeStore) -> SessionStore:
    return await make_store()


async def new_session(store: SessionStore, tenant: str = ACME, user: str = "", topic: str = "", **kw: object) -> str:
    record, _ = await store.create(tenant, NewSession(user, topic, "default", **kw))  # type: ignore[arg-type]
    return record.session_id


async def lease(store: SessionStore, sid: str, turn: str = "turn-1", ttl_s: float = 10.0) -> int:
    grant = await leases.acquire(store, ACME, sid, turn, ttl_s, Strategy.REJECT, 0)
    return grant.token


# --------------------------------------------------------------------------- sessions


async def test_create_get_and_a_foreign_tenant_sees_nothing(store: SessionStore) -> None:
    record, reused = await store.create(
        ACME,
        NewSession("u1", "t1", "default", "coach", ("finuslugi",), {"model": "local", "n": 2}, "orchestrator"),
    )
    assert not reused
    got = await store.get(ACME, record.session_id)
    assert (got.user_id, got.topic_id, got.agent, got.role_id) == ("u1", "t1", "default", "coach")
    assert got.active_skill_ids == ("finuslugi",)
    assert got.runtime_config == {"model": "local", "n": 2}
    assert (got.delegated_from, got.delegation_turn_count) == ("orchestrator", 0)
    assert got.message_count == 0 and got.active_turn_id == ""
    for call in (
        store.get(GLOBEX, record.session_id),
        store.list_messages(GLOBEX, record.session_id, 0, 10),
        store.try_acquire(GLOBEX, record.session_id, "t", 10, Strategy.REJECT),
        store.update(GLOBEX, record.session_id, SessionUpdate(role_id="x"), 0),
        store.rehydrate(GLOBEX, record.session_id, 5),
        store.get(ACME, "no-such-session"),
    ):
        with pytest.raises(SessionNotFound):
            await call
    assert not await store.delete(GLOBEX, record.session_id)
    assert (await store.list_sessions(GLOBEX, None, 10)).items == []
    assert (await store.get(ACME, record.session_id)).session_id == record.session_id


async def test_list_is_newest_first_and_paged_by_cursor(store: SessionStore) -> None:
    ids = [await new_session(store, topic=str(i)) for i in range(5)]
    await new_session(store, tenant=GLOBEX)
    seen: list[str] = []
    cursor: int | None = None
    pages = 0
    while True:
        page = await store.list_sessions(ACME, cursor, 2)
        seen += [r.session_id for r in page.items]
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == ids[::-1]
    assert pages == 3


async def test_identity_lookup_and_reuse(store: SessionStore) -> None:
    first = await new_session(store, user="u1", topic="loans")
    assert (await store.lookup(ACME, "u1", "loans")).session_id == first
    reused, was_reused = await store.create(ACME, NewSession("u1", "loans", "default"), reuse_existing=True)
    assert was_reused and reused.session_id == first
    second = await new_session(store, user="u1", topic="loans")  # a plain create registers the newer session
    assert (await store.lookup(ACME, "u1", "loans")).session_id == second
    for tenant, user, topic in ((GLOBEX, "u1", "loans"), (ACME, "u1", "other"), (ACME, "", "")):
        with pytest.raises(SessionNotFound):
            await store.lookup(tenant, user, topic)
    assert await store.delete(ACME, second)
    with pytest.raises(SessionNotFound):
        await store.lookup(ACME, "u1", "loans")
    fresh, was_reused = await store.create(ACME, NewSession("u1", "loans", "default"), reuse_existing=True)
    assert not was_reused and fresh.session_id not in (first, second)


async def test_the_scope_is_stored_and_part_of_the_identity(store: SessionStore) -> None:
    alice = {"end_user": "alice", "project": "apollo"}
    first = await new_session(store, user="u1", topic="loans", scope=alice)
    assert (await store.get(ACME, first)).scope == alice
    # The same user and topic for another end user is another conversation, never reused.
    bob, was_reused = await store.create(ACME, NewSession("u1", "loans", "default", scope={"end_user": "bob"}), True)
    assert not was_reused and bob.session_id != first and bob.scope == {"end_user": "bob"}
    same, was_reused = await store.create(
        ACME, NewSession("u1", "loans", "default", scope={"project": "apollo", "end_user": "alice"}), True
    )
    assert was_reused and same.session_id == first  # entries in any order
    assert (await store.lookup(ACME, "u1", "loans", alice)).session_id == first
    with pytest.raises(SessionNotFound):
        await store.lookup(ACME, "u1", "loans")  # the unscoped conversation does not exist
    listed = await store.list_sessions(ACME, None, 100)
    assert {r.session_id: r.scope for r in listed.items}[bob.session_id] == {"end_user": "bob"}


async def test_concurrent_creates_of_one_identity_share_one_session(store: SessionStore) -> None:
    created = await asyncio.gather(
        *(store.create(ACME, NewSession("ann", "trip", "default"), reuse_existing=True) for _ in range(8))
    )
    assert len({record.session_id for record, _ in created}) == 1
    assert sorted(reused for _, reused in created) == [False] + [True] * 7
    assert (await store.lookup(ACME, "ann", "trip")).session_id == created[0][0].session_id


async def test_update_role_and_skills_mid_session(store: SessionStore) -> None:
    sid = await new_session(store, role_id="coach", active_skill_ids=("finuslugi",), runtime_config={"a": 1})
    before = await store.get(ACME, sid)
    updated = await store.update(
        ACME, sid, SessionUpdate(role_id="credit_advisor", active_skill_ids=("credit-mcp", "calc")), 0
    )
    assert updated.role_id == "credit_advisor"
    assert updated.active_skill_ids == ("credit-mcp", "calc")
    assert updated.runtime_config == {"a": 1} and updated.prompt_hash == ""  # untouched fields stay
    assert updated.updated_at >= before.updated_at
    again = await store.update(
        ACME,
        sid,
        SessionUpdate(prompt_hash="a1b2c3d4e5f67890", runtime_config={"b": [1, 2]}, delegated_from="coach"),
        0,
    )
    again = await store.update(ACME, sid, SessionUpdate(delegation_turn_count=3), 0)
    assert (again.prompt_hash, again.runtime_config) == ("a1b2c3d4e5f67890", {"b": [1, 2]})
    assert (again.delegated_from, again.delegation_turn_count) == ("coach", 3)
    assert (await store.get(ACME, sid)).role_id == "credit_advisor"
    token = await lease(store, sid)
    await store.update(ACME, sid, SessionUpdate(role_id="fenced"), token)
    assert await store.release_lease(ACME, sid, token)
    with pytest.raises(StaleLease):
        await store.update(ACME, sid, SessionUpdate(role_id="late"), token)
    assert (await store.get(ACME, sid)).role_id == "fenced"


async def test_idle_sessions_are_evicted_and_writes_keep_them(make_store: MakeStore) -> None:
    store = await make_store(session_ttl_s=0.4)
    idle = await new_session(store, user="u", topic="idle")
    busy = await new_session(store)
    record = await store.get(ACME, busy)
    assert record.expires_at == pytest.approx(record.updated_at + 0.4, abs=0.05)
    for i in range(3):
        await asyncio.sleep(0.2)
        await store.update(ACME, busy, SessionUpdate(prompt_hash="x"), 0)  # activity
        if i == 0:
            await store.get(ACME, idle)  # reads are not activity
    with pytest.raises(SessionNotFound):
        await store.get(ACME, idle)
    with pytest.raises(SessionNotFound):
        await store.lookup(ACME, "u", "idle")
    assert [r.session_id for r in (await store.list_sessions(ACME, None, 10)).items] == [busy]
    await asyncio.sleep(0.5)
    with pytest.raises(SessionNotFound):
        await store.get(ACME, busy)
    assert (await store.list_sessions(ACME, None, 10)).items == []


async def test_a_running_turn_keeps_its_session_alive(make_store: MakeStore) -> None:
    store = await make_store(session_ttl_s=0.3)
    sid = await new_session(store)
    token = await lease(store, sid, ttl_s=1.0)
    await asyncio.sleep(0.5)
    assert (await store.get(ACME, sid)).active_turn_id == "turn-1"
    assert (await store.append_messages(ACME, sid, [b"late but fine"], token)).message_count == 1


async def test_close_one_and_close_all(store: SessionStore) -> None:
    a1 = await new_session(store, user="alice")
    a2 = await new_session(store, user="alice", topic="t2")
    b1 = await new_session(store, user="bob")
    other = await new_session(store, tenant=GLOBEX, user="alice")
    assert await store.delete(ACME, a1)
    assert not await store.delete(ACME, a1)
    assert await store.close_all(ACME, "alice") == 1
    assert [r.session_id for r in (await store.list_sessions(ACME, None, 10)).items] == [b1]
    assert await store.close_all(ACME, "") == 1
    for sid in (a2, b1):
        with pytest.raises(SessionNotFound):
            await store.get(ACME, sid)
    assert (await store.get(GLOBEX, other)).user_id == "alice"
    assert await store.close_all(ACME, "") == 0


# --------------------------------------------------------------------------- the turn lease


async def test_lease_is_exclusive_fenced_and_expires(store: SessionStore) -> None:
    sid = await new_session(store)
    token = await lease(store, sid, "turn-1", ttl_s=0.3)
    retried = await store.try_acquire(ACME, sid, "turn-1", 0.3, Strategy.REJECT)
    assert isinstance(retried, Acquired) and retried.token == token, "a retried acquire gets the same lease"
    with pytest.raises(LeaseHeld) as held:
        await store.try_acquire(ACME, sid, "turn-2", 10, Strategy.REJECT)
    assert held.value.turn_id == "turn-1"
    assert (await store.get(ACME, sid)).active_turn_id == "turn-1"
    assert (await store.append_messages(ACME, sid, [b"m1", b"m2"], token)).message_count == 2
    await asyncio.sleep(0.4)  # the holder crashed: its lease runs out
    assert (await store.get(ACME, sid)).active_turn_id == ""
    newer = await lease(store, sid, "turn-2")
    assert newer > token
    with pytest.raises(StaleLease):
        await store.append_messages(ACME, sid, [b"late"], token)
    with pytest.raises(StaleLease):
        await store.renew_lease(ACME, sid, token, 10)
    assert not await store.release_lease(ACME, sid, token)
    assert await store.release_lease(ACME, sid, newer)
    assert not await store.release_lease(ACME, sid, newer)
    assert (await store.get(ACME, sid)).active_turn_id == ""
    assert (await store.list_messages(ACME, sid, 0, 10)).items == [b"m1", b"m2"]


async def test_renew_extends_the_lease(store: SessionStore) -> None:
    sid = await new_session(store)
    token = await lease(store, sid, ttl_s=0.3)
    for _ in range(3):
        await asyncio.sleep(0.15)
        info = await store.renew_lease(ACME, sid, token, 0.3)
        assert (info.turn_id, info.token, info.interrupt_requested_by) == ("turn-1", token, "")
    assert (await store.get(ACME, sid)).active_turn_id == "turn-1"


async def test_only_one_of_many_concurrent_turns_gets_the_lease(store: SessionStore) -> None:
    sid = await new_session(store)

    async def attempt(i: int) -> int | None:
        try:
            return (await leases.acquire(store, ACME, sid, f"turn-{i}", 10, Strategy.REJECT, 0)).token
        except LeaseHeld:
            return None

    results = await asyncio.gather(*(attempt(i) for i in range(20)))
    assert len([r for r in results if r is not None]) == 1


async def test_enqueue_runs_turns_in_arrival_order(store: SessionStore) -> None:
    sid = await new_session(store)
    token = await lease(store, sid, "running")
    order: list[str] = []

    async def queued_turn(name: str) -> None:
        grant = await leases.acquire(store, ACME, sid, name, 10, Strategy.ENQUEUE, 10)
        order.append(name)
        assert grant.waited_s > 0
        await asyncio.sleep(0.02)
        assert await store.release_lease(ACME, sid, grant.token)

    tasks = []
    for name in ("first", "second", "third"):
        tasks.append(asyncio.create_task(queued_turn(name)))
        await asyncio.sleep(0.05)  # arrival order
    state = await store.lease_state(ACME, sid)
    assert state.queued_turn_ids == ("first", "second", "third")
    with pytest.raises(LeaseHeld):  # REJECT does not jump the queue
        await store.try_acquire(ACME, sid, "rude", 10, Strategy.REJECT)
    assert await store.release_lease(ACME, sid, token)
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert order == ["first", "second", "third"]
    assert (await store.lease_state(ACME, sid)).queued_turn_ids == ()


async def test_enqueue_gives_up_at_its_deadline_and_leaves_the_queue(store: SessionStore) -> None:
    sid = await new_session(store)
    await lease(store, sid, "running")
    with pytest.raises(LeaseHeld) as held:
        await leases.acquire(store, ACME, sid, "patient", 10, Strategy.ENQUEUE, 0.3)
    assert held.value.turn_id == "running" and held.value.waited_s >= 0.3
    assert (await store.lease_state(ACME, sid)).queued_turn_ids == ()


async def test_a_cancelled_waiter_leaves_the_queue(store: SessionStore) -> None:
    sid = await new_session(store)
    await lease(store, sid, "running")
    waiter = asyncio.create_task(leases.acquire(store, ACME, sid, "gone", 10, Strategy.ENQUEUE, 10))
    await asyncio.sleep(0.1)
    assert (await store.lease_state(ACME, sid)).queued_turn_ids == ("gone",)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert (await store.lease_state(ACME, sid)).queued_turn_ids == ()


async def test_a_waiter_whose_replica_died_loses_its_place(make_store: MakeStore) -> None:
    store = await make_store(waiter_ttl_s=0.3)
    sid = await new_session(store)
    token = await lease(store, sid, "running")
    # One try_acquire and then silence: what a crashed replica's waiter looks like.
    assert isinstance(await store.try_acquire(ACME, sid, "ghost", 10, Strategy.ENQUEUE), Queued)
    assert await store.release_lease(ACME, sid, token)
    with pytest.raises(LeaseHeld):  # the ghost is still first in line for a moment
        await store.try_acquire(ACME, sid, "next", 10, Strategy.REJECT)
    await asyncio.sleep(0.4)
    assert isinstance(await store.try_acquire(ACME, sid, "next", 10, Strategy.REJECT), Acquired)


async def test_interrupt_asks_the_holder_to_stop_and_goes_first(store: SessionStore) -> None:
    sid = await new_session(store)
    token = await lease(store, sid, "running")
    polite = asyncio.create_task(leases.acquire(store, ACME, sid, "polite", 10, Strategy.ENQUEUE, 10))
    await asyncio.sleep(0.05)
    urgent = asyncio.create_task(leases.acquire(store, ACME, sid, "urgent", 10, Strategy.INTERRUPT, 10))
    await asyncio.sleep(0.1)
    state = await store.lease_state(ACME, sid)
    assert state.lease is not None and state.lease.interrupt_requested_by == "urgent"
    assert state.queued_turn_ids == ("urgent", "polite")
    renewed = await store.renew_lease(ACME, sid, token, 10)  # how the holder learns it must stop
    assert renewed.interrupt_requested_by == "urgent"
    assert await store.release_lease(ACME, sid, token)
    grant = await asyncio.wait_for(urgent, 5)
    assert grant.interrupted_turn_id == "running" and grant.token > token
    assert not polite.done()
    assert (await store.renew_lease(ACME, sid, grant.token, 10)).interrupt_requested_by == ""
    assert await store.release_lease(ACME, sid, grant.token)
    assert (await asyncio.wait_for(polite, 5)).interrupted_turn_id == ""


async def test_interrupt_takes_over_from_a_crashed_holder_when_its_lease_expires(store: SessionStore) -> None:
    sid = await new_session(store)
    await lease(store, sid, "crashed", ttl_s=0.3)
    grant = await leases.acquire(store, ACME, sid, "urgent", 10, Strategy.INTERRUPT, 5)
    assert grant.interrupted_turn_id == "crashed"
    assert 0.1 < grant.waited_s < 2
    assert (await store.get(ACME, sid)).active_turn_id == "urgent"


async def test_interrupt_on_an_idle_session_just_takes_the_lease(store: SessionStore) -> None:
    sid = await new_session(store)
    grant = await leases.acquire(store, ACME, sid, "urgent", 10, Strategy.INTERRUPT, 5)
    assert (grant.interrupted_turn_id, grant.waited_s) == ("", 0.0)


async def test_an_interrupter_that_gives_up_withdraws_its_request(store: SessionStore) -> None:
    sid = await new_session(store)
    token = await lease(store, sid, "running")
    with pytest.raises(LeaseHeld):
        await leases.acquire(store, ACME, sid, "urgent", 10, Strategy.INTERRUPT, 0.2)
    assert (await store.renew_lease(ACME, sid, token, 10)).interrupt_requested_by == ""


# --------------------------------------------------------------------------- messages


async def test_messages_append_page_and_last_n(store: SessionStore) -> None:
    sid = await new_session(store)
    token = await lease(store, sid)
    assert (await store.append_messages(ACME, sid, [str(i).encode() for i in range(7)], token)).message_count == 7
    first = await store.list_messages(ACME, sid, 0, 5)
    rest = await store.list_messages(ACME, sid, 5, 5)
    assert first.items == [b"0", b"1", b"2", b"3", b"4"] and first.next_cursor == 5
    assert rest.items == [b"5", b"6"] and rest.next_cursor is None
    assert await store.last_messages(ACME, sid, 3) == [b"4", b"5", b"6"]
    assert await store.last_messages(ACME, sid, 0) == []
    assert await store.last_messages(ACME, sid, 100) == [str(i).encode() for i in range(7)]
    assert (await store.get(ACME, sid)).message_count == 7
    binary = bytes(range(256)) * 4
    await store.append_messages(ACME, sid, [binary], token)
    assert await store.last_messages(ACME, sid, 1) == [binary]


async def test_append_without_the_lease_writes_nothing(store: SessionStore) -> None:
    sid = await new_session(store)
    with pytest.raises(StaleLease):
        await store.append_messages(ACME, sid, [b"a", b"b"], 1)
    token = await lease(store, sid)
    with pytest.raises(StaleLease):
        await store.append_messages(ACME, sid, [b"a", b"b"], token + 1)
    assert (await store.get(ACME, sid)).message_count == 0


async def test_a_retried_append_is_not_applied_twice(store: SessionStore) -> None:
    sid = await new_session(store)
    token = await lease(store, sid)
    first = await store.append_messages(ACME, sid, [b"a", b"b"], token, "req-1")
    retry = await store.append_messages(ACME, sid, [b"a", b"b"], token, "req-1")
    assert (first.message_count, first.deduplicated) == (2, False)
    assert (retry.message_count, retry.deduplicated) == (2, True)
    assert (await store.append_messages(ACME, sid, [b"c"], token, "req-2")).message_count == 3
    # Concurrent appends: an older one retried after newer ones landed is still recognised.
    late = await store.append_messages(ACME, sid, [b"a", b"b"], token, "req-1")
    assert (late.message_count, late.deduplicated) == (2, True)
    for i in range(REMEMBERED_APPENDS):
        await store.append_messages(ACME, sid, [b"."], token, f"filler-{i}")
    forgotten = await store.append_messages(ACME, sid, [b"a"], token, "req-1")
    assert not forgotten.deduplicated, "only the last REMEMBERED_APPENDS ids are remembered"
    assert (await store.get(ACME, sid)).message_count == 3 + REMEMBERED_APPENDS + 1


async def test_a_retried_event_append_is_told_among_the_last_remembered_appends(store: SessionStore) -> None:
    """An append id may be any text up to 256 characters; a retry of one of the session's last REMEMBERED_APPENDS
    appends with an id answers the seq it ended at and logs nothing, an older one is an append like any other."""
    sid = await new_session(store)
    token = await lease(store, sid)

    async def append(append_id: str, text: str = "d") -> Appended:
        delta = events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text=text))
        return await store.append_events(ACME, sid, NewEvents("turn-1", token, [delta], append_id=append_id))

    odd = ["a,b:c", ",", ":1", "é|x", "x" * 256]
    for n, append_id in enumerate(odd, start=1):
        assert (await append(append_id)).last_seq == n
    for n, append_id in enumerate(odd, start=1):
        retried = await append(append_id, "again")
        assert retried.duplicate and retried.last_seq == n, append_id
    for i in range(REMEMBERED_APPENDS - len(odd)):
        assert not (await append(f"filler-{i}")).duplicate
    assert (await append(odd[0])).duplicate, "the oldest of the last REMEMBERED_APPENDS"
    assert (await append("one more")).last_seq == REMEMBERED_APPENDS + 1  # odd[0] is forgotten
    again = await append(odd[0])
    assert not again.duplicate and again.last_seq == REMEMBERED_APPENDS + 2, "only the last ones are remembered"
    kept = await append(odd[2])  # odd[1] went out for odd[0]'s second append
    assert kept.duplicate and kept.last_seq == 3
    assert (await store.log_state(ACME, sid)).last_seq == REMEMBERED_APPENDS + 2


async def test_concurrent_appends_keep_each_batch_whole_and_one_order(store: SessionStore) -> None:
    sid = await new_session(store)
    token = await lease(store, sid)
    batches = [[f"{b}:{i}".encode() for i in range(5)] for b in range(20)]
    await asyncio.gather(*(store.append_messages(ACME, sid, batch, token) for batch in batches))
    stored = (await store.list_messages(ACME, sid, 0, 1000)).items
    assert len(stored) == 100
    chunks = [stored[i : i + 5] for i in range(0, 100, 5)]
    assert sorted(chunks) == sorted(batches)  # every batch landed contiguous and whole


# --------------------------------------------------------------------------- summary, goals, phase


async def test_summary_goals_and_phase(store: SessionStore) -> None:
    sid = await new_session(store)
    token = await lease(store, sid)
    await store.append_messages(ACME, sid, [b"1", b"2", b"3"], token)
    summary = await store.update_summary(ACME, sid, "User discussed savings options", 2, 0)
    assert (summary.text, summary.covered_message_count) == ("User discussed savings options", 2)
    with pytest.raises(InvalidValue) as bad:
        await store.update_summary(ACME, sid, "too far", 4, 0)
    assert bad.value.field_name == "covered_message_count"
    with pytest.raises(StaleLease):
        await store.update_summary(ACME, sid, "stale", 1, token + 1)

    deposit = await store.save_goal(ACME, sid, "", "Open a deposit", GoalStatus.ACTIVE, {"currency": "RUB"}, 0)
    await asyncio.sleep(0.01)
    loan = await store.save_goal(ACME, sid, "loan", "Refinance the loan", GoalStatus.ACTIVE, {}, token)
    await asyncio.sleep(0.01)
    done = await store.save_goal(ACME, sid, "loan", "Refinance the loan", GoalStatus.COMPLETED, {"ok": True}, 0)
    assert done.created_at == loan.created_at and done.updated_at >= loan.updated_at
    goals = await store.list_goals(ACME, sid)
    assert [(g.goal_id, g.status) for g in goals] == [
        (deposit.goal_id, GoalStatus.ACTIVE),
        ("loan", GoalStatus.COMPLETED),
    ]
    assert goals[0].data == {"currency": "RUB"}

    phase = await store.set_phase(ACME, sid, "recommendation", {"step": 2}, 0)
    assert (phase.phase, phase.data) == ("recommendation", {"step": 2})
    with pytest.raises(StaleLease):
        await store.set_phase(ACME, sid, "late", {}, token + 1)


async def test_goals_are_bounded(store: SessionStore) -> None:
    sid = await new_session(store)
    await asyncio.gather(
        *(store.save_goal(ACME, sid, f"g{i}", "goal", GoalStatus.ACTIVE, {}, 0) for i in range(MAX_GOALS))
    )
    with pytest.raises(LimitExceeded):
        await store.save_goal(ACME, sid, "", "one too many", GoalStatus.ACTIVE, {}, 0)
    await store.save_goal(ACME, sid, "g0", "replacing is fine", GoalStatus.COMPLETED, {}, 0)


# --------------------------------------------------------------------------- checkpoints


def checkpoint(interrupt_id: str = "int-1", payload: bytes = b"\x00snapshot\xff") -> NewCheckpoint:
    return NewCheckpoint(interrupt_id, "turn-1", "approval", b"\x0a\x04bash", payload)


async def test_checkpoint_lifecycle(store: SessionStore) -> None:
    sid = await new_session(store)
    token = await lease(store, sid)
    written = await store.write_checkpoint(ACME, sid, checkpoint(), token)
    assert (written.interrupt_id, written.lease_token, written.decision) == ("int-1", token, None)
    assert (await store.write_checkpoint(ACME, sid, checkpoint(), token)) == written  # retried write
    with pytest.raises(CheckpointExists):
        await store.write_checkpoint(ACME, sid, checkpoint(payload=b"other"), token)
    await store.write_checkpoint(ACME, sid, checkpoint("int-2"), token)
    assert (await store.get(ACME, sid)).pending_interrupt_ids == ("int-1", "int-2")
    assert await store.release_lease(ACME, sid, token)  # the turn paused and ended

    with pytest.raises(CheckpointConflict):  # nothing to resume with yet
        await store.consume_checkpoint(ACME, sid, "int-1", await lease(store, sid, "probe"), False)
    await store.release_lease(ACME, sid, (await store.lease_state(ACME, sid)).lease.token)  # type: ignore[union-attr]

    decided = await store.decide_checkpoint(ACME, sid, "int-1", b"approve")
    assert decided.decision == b"approve" and decided.decided_at >= written.created_at
    assert (await store.decide_checkpoint(ACME, sid, "int-1", b"approve")).decision == b"approve"
    with pytest.raises(CheckpointConflict):
        await store.decide_checkpoint(ACME, sid, "int-1", b"reject")
    assert (await store.get_checkpoint(ACME, sid, "int-1")).decision == b"approve"
    assert (await store.get(ACME, sid)).pending_interrupt_ids == ("int-2",)
    assert [c.interrupt_id for c in await store.list_checkpoints(ACME, sid)] == ["int-1", "int-2"]

    resume = await lease(store, sid, "turn-resume")
    with pytest.raises(StaleLease):
        await store.consume_checkpoint(ACME, sid, "int-1", token, False)
    consumed = await store.consume_checkpoint(ACME, sid, "int-1", resume, False)
    assert (consumed.payload, consumed.decision, consumed.request) == (b"\x00snapshot\xff", b"approve", b"\x0a\x04bash")
    assert (await store.consume_checkpoint(ACME, sid, "int-1", resume, False)) == consumed  # retried consume
    with pytest.raises(CheckpointNotFound):
        await store.get_checkpoint(ACME, sid, "int-1")
    with pytest.raises(CheckpointNotFound):
        await store.decide_checkpoint(ACME, sid, "int-1", b"approve")
    abandoned = await store.consume_checkpoint(ACME, sid, "int-2", resume, True)
    assert abandoned.decision is None
    assert await store.list_checkpoints(ACME, sid) == []
    assert (await store.get(ACME, sid)).pending_interrupt_ids == ()


async def test_a_checkpoint_needs_the_live_lease(store: SessionStore) -> None:
    sid = await new_session(store)
    token = await lease(store, sid, ttl_s=0.2)
    await asyncio.sleep(0.3)
    with pytest.raises(StaleLease):
        await store.write_checkpoint(ACME, sid, checkpoint(), token)
    assert await store.list_checkpoints(ACME, sid) == []


# --------------------------------------------------------------------------- rehydration


async def test_rehydration_payload_in_seed_order(store: SessionStore) -> None:
    sid = await new_session(store, user="u1", topic="t1", role_id="coach", active_skill_ids=("finuslugi",))
    await store.update(ACME, sid, SessionUpdate(prompt_hash="a1b2c3d4e5f67890"), 0)
    empty = await store.rehydrate(ACME, sid, 10)
    assert (empty.summary, empty.goal, empty.phase, empty.last_messages) == (None, None, None, [])
    token = await lease(store, sid)
    await store.append_messages(ACME, sid, [f"m{i}".encode() for i in range(12)], token)
    await store.update_summary(ACME, sid, "User discussed savings options", 2, token)
    await store.save_goal(ACME, sid, "old", "Old goal", GoalStatus.ACTIVE, {}, token)
    await asyncio.sleep(0.01)
    await store.save_goal(ACME, sid, "new", "Open a deposit", GoalStatus.ACTIVE, {}, token)
    await store.save_goal(ACME, sid, "done", "Done goal", GoalStatus.COMPLETED, {}, token)
    await store.set_phase(ACME, sid, "recommendation", {"step": 3}, token)
    payload = await store.rehydrate(ACME, sid, 10)
    assert payload.session.role_id == "coach"
    assert payload.session.active_skill_ids == ("finuslugi",)
    assert payload.session.prompt_hash == "a1b2c3d4e5f67890"
    assert payload.summary is not None and payload.summary.text == "User discussed savings options"
    assert payload.last_messages == [f"m{i}".encode() for i in range(2, 12)]
    assert payload.goal is not None and payload.goal.text == "Open a deposit"
    assert payload.phase is not None and (payload.phase.phase, payload.phase.data) == ("recommendation", {"step": 3})


async def test_a_grant_carries_the_rehydration_a_read_after_it_gives(store: SessionStore) -> None:
    """Issue 32: the lease grant that starts a turn carries the session as the turn starts from it (on
    Redis in the grant's own script), the same as a rehydrate read after it; not while a pause waits."""
    sid = await new_session(store, role_id="coach")
    token = await lease(store, sid)
    await store.append_messages(ACME, sid, [f"m{i}".encode() for i in range(6)], token)
    await store.save_goal(ACME, sid, "g", "Open a deposit", GoalStatus.ACTIVE, {}, token)
    await store.release_lease(ACME, sid, token)

    grant = await leases.acquire(store, ACME, sid, "turn-2", 10.0, Strategy.REJECT, 0, rehydrate=4)
    read = await store.rehydrate(ACME, sid, 4)
    assert grant.rehydration is not None
    assert grant.rehydration.last_messages == read.last_messages == [f"m{i}".encode() for i in range(2, 6)]
    assert grant.rehydration.goal is not None and grant.rehydration.goal.text == "Open a deposit"
    assert grant.rehydration.session.role_id == "coach"
    assert grant.rehydration.session.active_turn_id == read.session.active_turn_id == "turn-2"
    await store.release_lease(ACME, sid, grant.token)
    unasked = await leases.acquire(store, ACME, sid, "turn-3", 10.0, Strategy.REJECT, 0)
    assert unasked.rehydration is None
    # A paused turn waits for its answer: the grant opens nothing, and carries no rehydration.
    await store.write_checkpoint(ACME, sid, checkpoint(), unasked.token)
    await store.release_lease(ACME, sid, unasked.token)
    paused = await leases.acquire(store, ACME, sid, "turn-4", 10.0, Strategy.REJECT, 0, rehydrate=4)
    assert paused.pending_interrupt_ids == ("int-1",) and paused.rehydration is None


async def test_a_session_without_goals_starts_a_turn_without_reading_them_and_one_written_before_reads_them(
    store: SessionStore,
) -> None:
    """A session created now marks that it has no goal (`ng`), so its turns' grants skip the goals' read; the
    first goal clears the mark. A session created before the mark existed reads its goals as before."""
    if not isinstance(store, RedisSessionStore):
        pytest.skip("the Redis store's hash")
    sid = await new_session(store)
    key = store._keys(sid)[0]
    assert await store._redis.hget(key, "ng") == b"1"
    token = await lease(store, sid)
    await store.save_goal(ACME, sid, "g", "Open a deposit", GoalStatus.ACTIVE, {}, token)
    await store.release_lease(ACME, sid, token)
    assert await store._redis.hget(key, "ng") == b""
    await store._redis.hdel(key, "ng")  # as a session written before the mark
    grant = await leases.acquire(store, ACME, sid, "turn-2", 10.0, Strategy.REJECT, 0, rehydrate=4)
    assert grant.rehydration is not None and grant.rehydration.goal is not None
    assert [g.goal_id for g in await store.list_goals(ACME, sid)] == ["g"]


async def test_deleting_a_session_removes_everything_it_holds(store: SessionStore) -> None:
    sid = await new_session(store, user="u", topic="t")
    token = await lease(store, sid)
    await store.append_messages(ACME, sid, [b"m"], token)
    await store.write_checkpoint(ACME, sid, checkpoint(), token)
    await store.save_goal(ACME, sid, "g", "goal", GoalStatus.ACTIVE, {}, token)
    assert await store.delete(ACME, sid)
    for call in (
        store.get(ACME, sid),
        store.list_messages(ACME, sid, 0, 10),
        store.list_checkpoints(ACME, sid),
        store.list_goals(ACME, sid),
        store.lookup(ACME, "u", "t"),
    ):
        with pytest.raises(SessionNotFound):
            await call


# --------------------------------------------------------------------------- time travel


def said(turn_id: str, *texts: str) -> list[bytes]:
    """A turn's messages as stored: the user's, then the assistant's replies."""
    roles = [messages_pb2.ROLE_USER] + [messages_pb2.ROLE_ASSISTANT] * (len(texts) - 1)
    return [
        messages_pb2.Message(role=role, content=text, turn_id=turn_id).SerializeToString()
        for role, text in zip(roles, texts, strict=True)
    ]


def accepted(turn_id: str) -> NewEvents:
    queued = events_pb2.StatusUpdate(state=events_pb2.TURN_STATE_QUEUED, text="accepted")
    return NewEvents(turn_id, 0, [events_pb2.RuntimeEvent(status=queued)], [("request", b"", 1)])


async def run_turn(store: SessionStore, sid: str, turn_id: str, *texts: str, steps: int = 1) -> int:
    """A whole turn as a runtime writes it: accepted with the lease, `steps` deltas, the final answer and its
    messages with the end; returns the seq of its first event."""
    granted = await store.try_acquire(ACME, sid, turn_id, 10.0, Strategy.REJECT, accepted(turn_id))
    assert isinstance(granted, Acquired)
    deltas = [events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text=f"{i}")) for i in range(steps)]
    await store.append_events(ACME, sid, NewEvents(turn_id, granted.token, deltas))
    end = [events_pb2.RuntimeEvent(final=events_pb2.FinalResult(text=texts[-1]))]
    await store.append_events(
        ACME, sid, NewEvents(turn_id, granted.token, end, release=True, messages=said(turn_id, *texts))
    )
    return granted.start_seq + 1


async def logged(store: SessionStore, sid: str, after: int = 0) -> list[events_pb2.RuntimeEvent]:
    return [e async for batch in store.read_events(ACME, sid, after, False, 60.0) if batch for e in batch]


async def test_a_fork_keeps_its_origin_and_the_listing_filters_on_it(store: SessionStore) -> None:
    original = await new_session(store)
    origin = Origin(original, "t2", 1_700_000_000.5)
    fork = await new_session(store, forked_from=origin, labels={"kind": "fork"})
    other = await new_session(store, forked_from=Origin("elsewhere", "", 1_700_000_001.0))
    assert (await store.get(ACME, fork)).forked_from == origin
    assert (await store.get(ACME, original)).forked_from is None
    assert {r.session_id: r.forked_from for r in (await store.list_sessions(ACME, None, 10)).items}[fork] == origin
    listed = await store.list_sessions(ACME, None, 10, where=search.SessionFilter(forked_from=original))
    assert [r.session_id for r in listed.items] == [fork]
    listed = await store.list_sessions(ACME, None, 10, where=search.SessionFilter(forked_from="elsewhere"))
    assert [r.session_id for r in listed.items] == [other]
    assert (await store.list_sessions(GLOBEX, None, 10, where=search.SessionFilter(forked_from=original))).items == []


async def test_the_conversation_through_a_turn_pages_and_an_unknown_turn_is_not_found(store: SessionStore) -> None:
    sid = await new_session(store)
    await run_turn(store, sid, "t1", "hi", "hello")
    await run_turn(store, sid, "t2", "more", "a", "b")
    await run_turn(store, sid, "t3", "last", "bye")
    everything = (await store.list_messages(ACME, sid, 0, 100)).items
    first = await history.messages_through(store, ACME, sid, "t2", 0, 3)
    assert first.items == everything[:3] and first.next_cursor == 3
    rest = await history.messages_through(store, ACME, sid, "t2", 3, 3)
    assert rest.items == everything[3:5] and rest.next_cursor is None
    assert (await history.messages_through(store, ACME, sid, "t1", 0, 10)).items == everything[:2]
    with pytest.raises(TurnNotFound):
        await history.messages_through(store, ACME, sid, "t9", 0, 10)


async def test_a_rewind_drops_the_turn_and_later_ones_and_logs_the_void_range(store: SessionStore) -> None:
    sid = await new_session(store)
    await run_turn(store, sid, "t1", "hi", "hello")
    t2_first = await run_turn(store, sid, "t2", "more", "a", "b", steps=3)
    t3_first = await run_turn(store, sid, "t3", "last", "bye")
    assert await store.turn_seqs(ACME, sid, ["t1", "t2", "t3", "t9"]) == {"t1": 1, "t2": t2_first, "t3": t3_first}
    before = (await store.list_messages(ACME, sid, 0, 100)).items
    head = (await store.log_state(ACME, sid)).last_seq
    record, event = await history.rewind(store, ACME, sid, "t2", "alice")
    rewound = event.rewound
    assert (rewound.turn_id, list(rewound.dropped_turn_ids)) == ("t2", ["t2", "t3"])
    assert (rewound.void_after_seq, rewound.void_through_seq) == (t2_first - 1, head)
    assert (rewound.dropped_message_count, rewound.reason, rewound.requested_by) == (5, "rewind", "alice")
    assert event.seq == head + 1 and record.message_count == 2
    assert (await store.list_messages(ACME, sid, 0, 100)).items == before[:2]
    # The log stays append-only: the rewind is its newest event, with the seq an append would have given it.
    log = await logged(store, sid)
    assert [e.seq for e in log] == list(range(1, head + 2))
    assert log[-1].WhichOneof("payload") == "rewound" and log[-1].rewound == rewound
    assert await store.turn_seqs(ACME, sid, ["t1", "t2", "t3"]) == {"t1": 1}
    assert (await store.log_state(ACME, sid)).ends_with_turn_end  # no turn runs after a rewind
    assert len(await store.journal(ACME, sid, "t3")) == 1  # journals stay, an audit of what ran
    # The session goes on: the next turn's events follow the rewind.
    assert await run_turn(store, sid, "t4", "again", "ok") == head + 2
    with pytest.raises(TurnNotFound):
        await history.rewind(store, ACME, sid, "t3", "alice")


async def test_a_rewind_is_refused_while_a_turn_runs_waits_or_is_paused(store: SessionStore) -> None:
    sid = await new_session(store)
    await run_turn(store, sid, "t1", "hi", "hello")
    await run_turn(store, sid, "t2", "more", "fine")

    async def refused(busy_turn: str) -> None:
        count, head = (await store.get(ACME, sid)).message_count, (await store.log_state(ACME, sid)).last_seq
        with pytest.raises(LeaseHeld) as caught:
            await history.rewind(store, ACME, sid, "t2", "alice")
        assert caught.value.turn_id == busy_turn
        assert (await store.get(ACME, sid)).message_count == count  # nothing changed
        assert (await store.log_state(ACME, sid)).last_seq == head

    granted = await store.try_acquire(ACME, sid, "t3", 10.0, Strategy.REJECT, accepted("t3"))
    assert isinstance(granted, Acquired)
    await refused("t3")
    assert isinstance(await store.try_acquire(ACME, sid, "t4", 10.0, Strategy.ENQUEUE), Queued)
    pause = NewCheckpoint("i1", "t3", "approval", b"req", b"")
    await store.append_events(ACME, sid, NewEvents("t3", granted.token, [], pause=pause))
    await refused("t4")  # the lease is free, but t4 waits first in the queue
    await store.leave_queue(ACME, sid, "t4")
    await refused("t3")  # paused: its checkpoint is not consumed
    resumed = await store.try_acquire(ACME, sid, "t3", 10.0, Strategy.REJECT, resume="a1")
    assert isinstance(resumed, Acquired)
    end = [events_pb2.RuntimeEvent(final=events_pb2.FinalResult(text="done"))]
    new = NewEvents("t3", resumed.token, end, release=True, consume_interrupt_id="i1", messages=said("t3", "x"))
    await store.append_events(ACME, sid, new)
    _, event = await history.rewind(store, ACME, sid, "t2", "alice")
    assert list(event.rewound.dropped_turn_ids) == ["t2", "t3"]


async def test_a_rewind_is_a_compare_and_set_and_only_the_holder_rewinds_under_a_lease(store: SessionStore) -> None:
    sid = await new_session(store)
    await run_turn(store, sid, "t1", "hi", "hello")
    await run_turn(store, sid, "t2", "more", "fine")
    head = (await store.log_state(ACME, sid)).last_seq
    event = events_pb2.RuntimeEvent(rewound=events_pb2.SessionRewound(turn_id="t2"))
    for count, at in ((3, head), (4, head - 1)):  # the count or the log moved since the read
        with pytest.raises(HistoryChanged):
            await store.rewind(ACME, sid, Rewind(2, count, at, ["t2"], event))
    assert (await store.get(ACME, sid)).message_count == 4
    granted = await store.try_acquire(ACME, sid, "t3", 10.0, Strategy.REJECT, accepted("t3"))
    assert isinstance(granted, Acquired)
    with pytest.raises(StaleLease):
        await store.rewind(ACME, sid, Rewind(2, 4, head + 1, ["t2"], event, granted.token + 1, "t3"))
    record, seq = await store.rewind(ACME, sid, Rewind(2, 4, head + 1, ["t2"], event, granted.token, "t3"))
    assert (record.message_count, record.active_turn_id, seq) == (2, "t3", head + 2)
    last = (await logged(store, sid, head + 1))[-1]
    assert (last.turn_id, last.rewound.turn_id) == ("t3", "t2")


async def test_a_rewind_drops_a_summary_covering_dropped_messages(store: SessionStore) -> None:
    sid = await new_session(store)
    for turn in ("t1", "t2", "t3"):
        await run_turn(store, sid, turn, "q", "a")
    await store.update_summary(ACME, sid, "t1 and t2", 4, 0)
    await history.rewind(store, ACME, sid, "t3", "alice")
    summary = (await store.rehydrate(ACME, sid, 0)).summary
    assert summary is not None and summary.covered_message_count == 4  # it covers no more than what stays
    await history.rewind(store, ACME, sid, "t2", "alice")
    assert (await store.rehydrate(ACME, sid, 0)).summary is None


async def test_a_rewind_event_is_trimmed_by_retention_as_an_append_is(make_store: MakeStore) -> None:
    store = await make_store(event_retention=4)
    sid = await new_session(store)
    for turn in ("t1", "t2", "t3"):
        await run_turn(store, sid, turn, "q", "a", steps=2)
    head = (await store.log_state(ACME, sid)).last_seq
    _, event = await history.rewind(store, ACME, sid, "t1", "alice")
    # t1's events were trimmed already: the void range still starts where t1 began.
    assert (event.seq, event.rewound.void_after_seq, event.rewound.void_through_seq) == (head + 1, 0, head)
    state = await store.log_state(ACME, sid)
    assert state.last_seq == head + 1 and state.first_seq > 1
    assert (await logged(store, sid, state.first_seq - 1))[-1].rewound.turn_id == "t1"


async def test_rollback_waits_as_interrupt_does(store: SessionStore) -> None:
    sid = await new_session(store)
    holder = await lease(store, sid, "t1")
    assert isinstance(await store.try_acquire(ACME, sid, "enq", 10.0, Strategy.ENQUEUE), Queued)
    assert isinstance(await store.try_acquire(ACME, sid, "rb", 10.0, Strategy.ROLLBACK), Queued)
    state = await store.lease_state(ACME, sid)
    assert state.lease is not None and state.lease.interrupt_requested_by == "rb"
    assert state.queued_turn_ids == ("rb", "enq")  # ahead of ENQUEUE waiters
    assert await store.release_lease(ACME, sid, holder)
    assert isinstance(await store.try_acquire(ACME, sid, "rb", 10.0, Strategy.ROLLBACK), Acquired)
