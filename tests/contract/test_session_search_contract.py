"""Session search, one contract for every store (memory, Redis standalone, Sentinel, Cluster): labels set at
creation and changed later, and ListSessions filtered by labels, status, agent, creation and last-activity
times, newest first, paged by cursor, including a Redis listing that stops at its scan budget mid-filter."""

from __future__ import annotations

import time

import pytest

from cogmesh.common.v1 import events_pb2
from services.lib import session_search as search
from services.lib.redis_keys import TenantKeys
from services.lib.session_search import SessionFilter
from services.sessions import leases, redis_store
from services.sessions.model import (
    InvalidValue,
    NewCheckpoint,
    NewEvents,
    NewSession,
    Origin,
    SessionNotFound,
    SessionUpdate,
    Strategy,
)
from services.sessions.store import SessionStore
from tests.contract import test_session_store_contract as contract
from tests.support.waiting import until

ACME, GLOBEX = contract.ACME, contract.GLOBEX
make_store, store = contract.make_store, contract.store  # the same stores, each kind of Redis and memory


async def create(store: SessionStore, topic: str, agent: str = "default", tenant: str = ACME, **kw: object) -> str:
    record, _ = await store.create(tenant, NewSession("", topic, agent, **kw))  # type: ignore[arg-type]
    return record.session_id


async def listed(
    store: SessionStore, where: SessionFilter | None, page_size: int = 2, **kw: object
) -> tuple[list[str], int]:
    """Every session the filter lists, page by page (none larger than page_size); and how many pages it took."""
    seen: list[str] = []
    cursor: int | None = None
    pages = 0
    while True:
        page = await store.list_sessions(ACME, cursor, page_size, where=where, **kw)  # type: ignore[arg-type]
        assert len(page.items) <= page_size
        pages += 1
        seen += [r.session_id for r in page.items]
        if page.next_cursor is None:
            return seen, pages
        assert cursor is None or page.next_cursor < cursor, "a cursor must move on"
        cursor = page.next_cursor


async def clock_moves_on() -> None:
    mark = time.time()
    await until(lambda: time.time() > mark + 0.005, "the clock to move on")


def ended(turn_id: str, token: int, event: events_pb2.RuntimeEvent) -> NewEvents:
    event.turn_id = turn_id
    return NewEvents(turn_id, token, [event], release=True)


async def test_labels_are_set_at_creation_and_changed_whole_or_by_key(store: SessionStore) -> None:
    sid = await create(store, "t", labels={"team": "billing", "env": "prod"})
    assert (await store.get(ACME, sid)).labels == {"team": "billing", "env": "prod"}
    # Two updates of different keys both hold: each merges with the labels as they stand.
    await store.update(ACME, sid, SessionUpdate(label_changes={"tier": "gold"}), 0)
    record = await store.update(ACME, sid, SessionUpdate(label_changes={"env": None, "team": "support"}), 0)
    assert record.labels == {"team": "support", "tier": "gold"}
    assert (await store.get(ACME, sid)).labels == {"team": "support", "tier": "gold"}
    record = await store.update(ACME, sid, SessionUpdate(labels={"only": "this"}), 0)
    assert record.labels == {"only": "this"}
    assert (await store.update(ACME, sid, SessionUpdate(labels={}), 0)).labels == {}
    with pytest.raises(SessionNotFound):
        await store.update(GLOBEX, sid, SessionUpdate(labels={"x": "y"}), 0)


async def test_label_changes_beyond_the_limit_change_nothing(store: SessionStore) -> None:
    full = {f"k{i}": "v" for i in range(search.MAX_LABELS)}
    sid = await create(store, "t", labels=full)
    with pytest.raises(InvalidValue) as raised:
        await store.update(ACME, sid, SessionUpdate(role_id="coach", label_changes={"one": "more"}), 0)
    assert raised.value.field_name == "labels" and str(search.MAX_LABELS) in str(raised.value)
    record = await store.get(ACME, sid)
    assert record.labels == full and record.role_id == ""
    # Replacing one makes room, in the same update.
    record = await store.update(ACME, sid, SessionUpdate(label_changes={"k0": None, "one": "more"}), 0)
    assert "one" in record.labels and "k0" not in record.labels and len(record.labels) == search.MAX_LABELS


async def test_a_label_filter_needs_every_entry_and_pages_inside_the_filter(store: SessionStore) -> None:
    ids = []
    for i in range(12):
        labels = {"team": "a" if i % 2 == 0 else "b"}
        if i % 3 == 0:
            labels["env"] = "prod"
        ids.append(await create(store, str(i), labels=labels))
    await create(store, "other", tenant=GLOBEX, labels={"team": "a"})
    newest_first = ids[::-1]
    seen, pages = await listed(store, SessionFilter(labels={"team": "a"}))
    assert seen == [s for s in newest_first if ids.index(s) % 2 == 0]
    assert pages >= 3  # six matches, two a page: the page boundaries fall inside the filter
    seen, _ = await listed(store, SessionFilter(labels={"team": "a", "env": "prod"}))
    assert seen == [ids[6], ids[0]]
    assert (await listed(store, SessionFilter(labels={"team": "c"})))[0] == []
    # A label changed later is what the filter sees.
    await store.update(ACME, ids[1], SessionUpdate(label_changes={"team": "a", "env": "prod"}), 0)
    assert (await listed(store, SessionFilter(labels={"team": "a", "env": "prod"})))[0] == [ids[6], ids[1], ids[0]]


async def test_filters_combine_with_a_scope_filter(store: SessionStore) -> None:
    a = await create(store, "1", scope={"end_user": "u1"}, labels={"team": "x"})
    await create(store, "2", scope={"end_user": "u2"}, labels={"team": "x"})
    await create(store, "3", scope={"end_user": "u1"}, labels={"team": "y"})
    seen, _ = await listed(store, SessionFilter(labels={"team": "x"}), scope_filter={"end_user": "u1"})
    assert seen == [a]


async def test_the_agent_filter_names_the_sessions_agent(store: SessionStore) -> None:
    coach = [await create(store, str(i), agent="coach") for i in range(3)]
    await create(store, "d")
    assert (await listed(store, SessionFilter(agent="coach")))[0] == coach[::-1]
    assert (await listed(store, SessionFilter(agent="nobody")))[0] == []


async def test_the_forked_from_filter_lists_a_sessions_forks_and_combines_with_others(store: SessionStore) -> None:
    original = await create(store, "o")
    forks = [
        await create(store, str(i), forked_from=Origin(original, f"t{i}", time.time()), labels={"n": str(i % 2)})
        for i in range(3)
    ]
    await create(store, "x", forked_from=Origin("another", "", time.time()))
    assert (await listed(store, SessionFilter(forked_from=original)))[0] == forks[::-1]
    assert (await listed(store, SessionFilter(forked_from=original, labels={"n": "0"})))[0] == [forks[2], forks[0]]
    assert (await listed(store, SessionFilter(forked_from=forks[0])))[0] == []


async def test_creation_and_activity_ranges_are_half_open(store: SessionStore) -> None:
    records = []
    for i in range(3):
        sid = await create(store, str(i))
        records.append(await store.get(ACME, sid))
        await clock_moves_on()  # distinct creation times
    first, second, third = records
    seen, _ = await listed(store, SessionFilter(created_after=second.created_at))
    assert seen == [third.session_id, second.session_id]
    seen, _ = await listed(store, SessionFilter(created_before=second.created_at))
    assert seen == [first.session_id]
    seen, _ = await listed(store, SessionFilter(created_after=first.created_at, created_before=third.created_at))
    assert seen == [second.session_id, first.session_id]
    # Activity: an update makes the oldest session the latest active.
    touched = await store.update(ACME, first.session_id, SessionUpdate(label_changes={"seen": "yes"}), 0)
    assert touched.updated_at > third.updated_at
    seen, _ = await listed(store, SessionFilter(active_after=touched.updated_at))
    assert seen == [first.session_id]
    seen, _ = await listed(store, SessionFilter(active_before=touched.updated_at))
    assert seen == [third.session_id, second.session_id]


async def test_status_filters_idle_running_paused_and_failed(store: SessionStore) -> None:
    idle, running, paused, failed, cancelled, done = [await create(store, name) for name in "irpfcd"]
    await leases.acquire(store, ACME, running, "t-run", 30, Strategy.REJECT, 0)
    grant = await leases.acquire(store, ACME, paused, "t-pause", 30, Strategy.REJECT, 0)
    pause = events_pb2.RuntimeEvent(turn_id="t-pause")
    pause.status.state, pause.status.interrupt_id = events_pb2.TURN_STATE_PAUSED, "int_1"
    checkpoint = NewCheckpoint("int_1", "t-pause", "approval", events_pb2.ApprovalRequired().SerializeToString(), b"")
    await store.append_events(ACME, paused, NewEvents("t-pause", grant.token, [pause], pause=checkpoint))
    for sid, event in (
        (failed, events_pb2.RuntimeEvent(error=events_pb2.TurnError(kind=events_pb2.ERROR_KIND_INTERNAL))),
        (cancelled, events_pb2.RuntimeEvent(error=events_pb2.TurnError(kind=events_pb2.ERROR_KIND_CANCELLED))),
        (done, events_pb2.RuntimeEvent(final=events_pb2.FinalResult())),
    ):
        grant = await leases.acquire(store, ACME, sid, "t-" + sid, 30, Strategy.REJECT, 0)
        await store.append_events(ACME, sid, ended("t-" + sid, grant.token, event))
    statuses = {sid: (await store.get(ACME, sid)).status for sid in (idle, running, paused, failed, cancelled, done)}
    assert statuses == {
        idle: search.IDLE,
        running: search.RUNNING,
        paused: search.PAUSED,
        failed: search.FAILED,
        cancelled: search.IDLE,
        done: search.IDLE,
    }
    assert (await listed(store, SessionFilter(statuses={search.IDLE})))[0] == [done, cancelled, idle]
    assert (await listed(store, SessionFilter(statuses={search.RUNNING})))[0] == [running]
    assert (await listed(store, SessionFilter(statuses={search.PAUSED})))[0] == [paused]
    assert (await listed(store, SessionFilter(statuses={search.FAILED, search.RUNNING})))[0] == [failed, running]
    # A failed session's next turn that completes makes it idle again.
    grant = await leases.acquire(store, ACME, failed, "t-again", 30, Strategy.REJECT, 0)
    await store.append_events(ACME, failed, ended("t-again", grant.token, events_pb2.RuntimeEvent(final={})))
    assert (await listed(store, SessionFilter(statuses={search.FAILED})))[0] == []


async def test_a_filtered_listing_past_its_scan_budget_answers_a_cursor_to_go_on_from(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis reads a bounded stretch of the index per call: a rare match far down is still found, page by
    page, each call within its budget (the memory store reads all; the same sessions come out)."""
    monkeypatch.setattr(redis_store, "SCAN_BUDGET", 5)
    monkeypatch.setattr(redis_store, "FILTER_BATCH", 2)
    ids = [await create(store, str(i), agent="rare" if i in (1, 13) else "default") for i in range(16)]
    seen, pages = await listed(store, SessionFilter(agent="rare"), page_size=10)
    assert seen == [ids[13], ids[1]]
    if isinstance(store, redis_store.RedisSessionStore):
        assert pages >= 4  # 16 entries, 5 a call at most
    page = await store.list_sessions(ACME, None, 1, where=SessionFilter(agent="rare"))
    assert [r.session_id for r in page.items] == [ids[13]] and page.next_cursor is not None


async def test_a_label_filter_reads_the_labels_index_not_the_tenants(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Redis a label has an index of its own: a rare label is one call however many sessions lie between,
    and the index follows the labels through UpdateSession, deletion and sessions labelled before it existed."""
    monkeypatch.setattr(redis_store, "SCAN_BUDGET", 5)
    monkeypatch.setattr(redis_store, "FILTER_BATCH", 2)
    ids = [await create(store, str(i), labels={"rare": "yes"} if i in (1, 13) else {"common": "x"}) for i in range(16)]
    rare = SessionFilter(labels={"rare": "yes"})
    seen, pages = await listed(store, rare, page_size=10)
    assert seen == [ids[13], ids[1]] and pages == 1
    # Moved: a label gained, one lost, one changed value.
    token = 0
    await store.update(ACME, ids[5], SessionUpdate(label_changes={"rare": "yes"}), token)
    await store.update(ACME, ids[13], SessionUpdate(labels={"rare": "no"}), token)
    assert (await listed(store, rare, page_size=10))[0] == [ids[5], ids[1]]
    assert (await listed(store, SessionFilter(labels={"rare": "no"}), page_size=10))[0] == [ids[13]]
    await store.delete(ACME, ids[1])
    assert (await listed(store, rare, page_size=10))[0] == [ids[5]]
    if isinstance(store, redis_store.RedisSessionStore):
        # Sessions labelled before label indexes existed: the first labelled listing puts them in.
        tenant = TenantKeys(store._prefix, ACME)
        index = tenant.label_index("rare", "yes")
        assert await store.client.zcard(index) == 1
        await store.client.delete(index, tenant.labels)
        assert (await listed(store, rare, page_size=10))[0] == [ids[5]]
        assert await store.client.zcard(index) == 1
