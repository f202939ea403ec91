"""What only the Redis store has: auto-pipelining, script reloading, keys and expiry in Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis

from cogmesh.common.v1 import events_pb2
from services.lib.redis_event_log import DROP_WAKE_S, DROPPED_TTL_S
from services.lib.redis_keys import SessionKeys, TenantKeys, identity_key
from services.sessions.model import Acquired, Appended, NewEvents, NewSession, SessionNotFound, Strategy
from services.sessions.redis_lua import EXPIRY_SLACK
from services.sessions.redis_store import RedisSessionStore
from tests.support.redis_server import RedisServer, admin_client, delete_prefix, unique_prefix
from tests.support.redis_topologies import RedisUnderTest


async def test_concurrent_calls_share_round_trips_and_keep_their_own_answers(private_redis: RedisServer) -> None:
    store = RedisSessionStore.from_url(private_redis.url, "p:", 0.0, 2.0)
    assert store._pipeline is not None
    warm = (await store.create("acme", NewSession("", "", "default")))[0]
    await store.get("acme", warm.session_id)  # loads the scripts: a retry after NOSCRIPT is a batch of its own
    batches: list[int] = []
    send = store._pipeline._send

    async def counting_send(batch: list) -> None:  # type: ignore[type-arg]
        batches.append(len(batch))
        await send(batch)

    store._pipeline._send = counting_send  # type: ignore[method-assign]
    try:
        ids = [(await store.create("acme", NewSession("", "", "default")))[0].session_id for i in range(30)]
        assert batches == [1] * 30, "a lone call goes at once, alone"
        batches.clear()
        results = await asyncio.gather(
            *(store.get("acme", sid) for sid in ids), store.get("acme", "missing"), return_exceptions=True
        )
        assert batches == [31], "calls made together travel together"
        assert [r.session_id for r in results[:-1]] == ids  # type: ignore[union-attr]
        assert isinstance(results[-1], SessionNotFound), "one caller's failure stays its own"
    finally:
        await store.close()


@pytest.fixture(params=["standalone", "cluster"])
def own_redis_url(request: pytest.FixtureRequest) -> str:
    """A Redis whose script caches this test may flush: a private server, or the test run's cluster."""
    url: str = request.getfixturevalue("private_redis").url if request.param == "standalone" else ""
    return url or request.getfixturevalue("redis_cluster_url")


async def test_scripts_are_reloaded_when_redis_forgets_them(own_redis_url: str) -> None:
    prefix = unique_prefix("scripts")
    store = RedisSessionStore.from_url(own_redis_url, prefix, 0.0, 2.0)
    admin = admin_client(own_redis_url)
    try:
        sids = [(await store.create("acme", NewSession("", "", "default")))[0].session_id for _ in range(10)]
        if isinstance(admin, redis.RedisCluster):  # every node has a cache of its own, as after a failover
            admin.execute_command("SCRIPT FLUSH", target_nodes=redis.RedisCluster.ALL_NODES)
        else:
            admin.script_flush()  # as after a Redis restart
        got = await asyncio.gather(*(store.get("acme", sid) for sid in sids))
        assert [g.session_id for g in got] == sids
        grant = await store.try_acquire("acme", sids[0], "t", 10, Strategy.REJECT)
        assert grant.token == 1  # type: ignore[union-attr]
    finally:
        admin.close()
        await store.close()
        delete_prefix(own_redis_url, prefix)


async def test_session_keys_share_one_slot_carry_the_ttl_and_vanish_with_the_session(
    any_redis: RedisUnderTest,
) -> None:
    prefix = any_redis.prefix
    store = RedisSessionStore.from_url(any_redis.url, prefix, 60.0, 2.0)
    direct = admin_client(any_redis.url)
    try:
        record, _ = await store.create("acme", NewSession("u", "t", "default"))
        sid = record.session_id
        grant = await store.try_acquire("acme", sid, "t", 10, Strategy.REJECT)
        await store.append_messages("acme", sid, [b"m"], grant.token, "r")  # type: ignore[union-attr]
        keys = {k.decode() for k in direct.scan_iter(match=f"{prefix}*")}
        session = SessionKeys(prefix, sid)
        identity = identity_key(prefix, session.tag)
        tenant = TenantKeys(prefix, "acme")
        assert {session.key("s"), session.key("m"), identity} <= keys
        assert keys - {tenant.index, tenant.seq} == {k for k in keys if k.startswith(f"{prefix}{{{session.tag}}}")}
        slots = {redis.cluster.key_slot(k.encode()) for k in keys - {tenant.index, tenant.seq}}
        assert len(slots) == 1, "a session's keys, its identity's too, are in one slot"
        # The messages list, made in the turn, got the expiry the session's other keys have.
        assert len(set(_expiries(direct, keys - {tenant.index, tenant.seq}).values())) == 1
        for key in keys - {tenant.index, tenant.seq}:  # evicted within a tenth of the TTL after it ends
            assert 60_000 * 0.9 < direct.pttl(key) <= 60_000 * (1 + 1 / EXPIRY_SLACK), key
        assert await store.delete("acme", sid)
        left = {k.decode() for k in direct.scan_iter(match=f"{prefix}*")}
        # What stays: the tombstone that refuses a late append and, for a while, the marker that ends
        # readers of the session's log on every replica; both expire.
        marker, tombstone = session.key("events"), session.key("events:dropped")
        assert left <= {tenant.seq, marker, tombstone}, left
        assert 0 < direct.pttl(tombstone) <= DROPPED_TTL_S * 1000
        assert 0 < direct.pttl(marker) <= DROP_WAKE_S * 1000
        assert [fields for _, fields in direct.xrange(marker)] == [{b"dropped": b"1"}]
    finally:
        direct.close()
        await store.close()


def _expiries(direct: redis.Redis, keys: set[str]) -> dict[str, int]:
    """Each key's expiry, in ms of Redis's clock (PEXPIRETIME: -1 without one, -2 when there is no such key)."""
    return {key: int(direct.execute_command("PEXPIRETIME", key)) for key in keys}


def _pexpireats(direct: redis.Redis) -> int:
    return int(direct.info("commandstats").get("cmdstat_pexpireat", {}).get("calls", 0))


async def test_a_turn_sets_its_sessions_expiry_when_it_starts_and_ends_not_at_each_write(
    private_redis: RedisServer,
) -> None:
    """Issue 32: every write re-expired the session's twelve keys (247 of a paced 50-token turn's 628 commands).
    A turn's start and writes leave the expiry while it outlasts the lease by half the session TTL, giving a key
    they create the same; its end sets it again, from then."""
    store = RedisSessionStore.from_url(private_redis.url, "p:", 60.0, 2.0)
    direct = admin_client(private_redis.url)
    try:
        record, _ = await store.create("acme", NewSession("u", "t", "default"))
        sid = record.session_id
        grant = await store.try_acquire("acme", sid, "t1", 10, Strategy.REJECT)
        assert isinstance(grant, Acquired)
        session = SessionKeys(store._prefix, sid)
        started = _expiries(direct, {session.key("s"), identity_key(store._prefix, session.tag)})
        at = started[session.key("s")]
        assert set(started.values()) == {at} and at > 0
        created = round(record.expires_at * 1000)  # created a moment ago: 60 s left, well past the 10 s lease
        assert at == created + 60_000 // EXPIRY_SLACK, "Redis evicts the keys a tenth of the TTL after it ends"

        direct.config_resetstat()
        for n in range(1, 4):  # the first makes the log, its append ids and the journal: keys the turn creates
            event = events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text=f"d{n}"))
            await store.append_events(
                "acme", sid, NewEvents("t1", grant.token, [event], [("model", b"state", 1)], f"t1:{n}")
            )
            await store.renew_lease("acme", sid, grant.token, 10)
        await store.append_messages("acme", sid, [b"m"], grant.token, "r")  # makes the messages and their ids
        made = {session.key(name) for name in ("events", "j", "jt", "m", "a", "al", "tr")}  # append ids: in the hash
        assert _pexpireats(direct) == len(made), "only the keys the turn made got an expiry, once each"
        keys = {k.decode() for k in direct.scan_iter(match=f"p:{{{session.tag}}}*")}
        assert made <= keys
        assert set(_expiries(direct, keys).values()) == {at}, "every key of the session expires together"

        end = events_pb2.RuntimeEvent(final=events_pb2.FinalResult(text="done"))
        await store.append_events("acme", sid, NewEvents("t1", grant.token, [end], append_id="t1:end", release=True))
        ended = _expiries(direct, keys)
        assert len(set(ended.values())) == 1 and ended[session.key("s")] == at, "evicted after it ends: kept"
        assert (await store.get("acme", sid)).expires_at > record.expires_at, "its end: the TTL from now"
    finally:
        direct.close()
        await store.close()


async def test_an_active_sessions_keys_are_re_expired_once_per_tenth_of_the_ttl(private_redis: RedisServer) -> None:
    """Issue 32: each turn's end re-expired the session's twelve keys (16 of a paced turn's commands). Its keys are
    evicted a tenth of the TTL after the session ends; a turn's end moves that only when the session would outlive
    it, so turns in a row cost no PEXPIREAT until a tenth of the TTL has passed (the clock's offset moves it here)."""
    store = RedisSessionStore.from_url(private_redis.url, "p:", 60.0, 2.0)
    direct = admin_client(private_redis.url)
    try:
        record, _ = await store.create("acme", NewSession("u", "t", "default"))
        sid, session = record.session_id, SessionKeys("p:", record.session_id)

        async def turn(name: str) -> float:
            grant = await store.try_acquire("acme", sid, name, 10, Strategy.REJECT)
            assert isinstance(grant, Acquired)
            end = events_pb2.RuntimeEvent(final=events_pb2.FinalResult(text=name))
            await store.append_events("acme", sid, NewEvents(name, grant.token, [end], append_id=name, release=True))
            return (await store.get("acme", sid)).expires_at

        await turn("t0")
        evicted = _expiries(direct, {session.key("s")})[session.key("s")]
        direct.config_resetstat()
        for n in range(1, 4):
            alive_until = await turn(f"t{n}")
            assert alive_until * 1000 <= evicted, "the keys outlive the session"
        assert _pexpireats(direct) == 0, "turns within a tenth of the TTL leave the keys' eviction"
        # As if a tenth of the TTL had passed since: the next turn's end would let the session outlive its keys.
        direct.hset(session.key("s"), "pexp", evicted - 7_000)
        alive_until = await turn("t4")
        moved = _expiries(direct, {session.key("s")})[session.key("s")]
        assert _pexpireats(direct) > 0 and moved > alive_until * 1000
        assert moved == round(alive_until * 1000) + 60_000 // EXPIRY_SLACK
    finally:
        direct.close()
        await store.close()


async def test_a_long_turn_moves_its_sessions_expiry_before_its_lease_could_outlive_it(
    private_redis: RedisServer,
) -> None:
    """A turn's writes leave the session's expiry until a renewal would leave less than half the TTL past the
    lease: then every key of the session gets the lease's end plus the TTL."""
    store = RedisSessionStore.from_url(private_redis.url, "p:", 60.0, 2.0)
    direct = admin_client(private_redis.url)
    try:
        sid = (await store.create("acme", NewSession("", "", "default")))[0].session_id
        grant = await store.try_acquire("acme", sid, "t1", 10, Strategy.REJECT)
        assert isinstance(grant, Acquired)
        first = (await store.get("acme", sid)).expires_at
        assert first == pytest.approx(grant.expires_at + 50, abs=0.1), "its creation's: 50 s past the lease"

        for _ in range(2):  # renewed every 8 s; at 16 s, 34 s are left past the renewed lease: still enough
            store.clock_offset_ms += 8_000
            await store.renew_lease("acme", sid, grant.token, 10)
            assert (await store.get("acme", sid)).expires_at == first
        store.clock_offset_ms += 8_000  # 24 s: 26 s would be left, under half the TTL
        renewed = await store.renew_lease("acme", sid, grant.token, 10)
        moved = (await store.get("acme", sid)).expires_at
        assert moved == pytest.approx(renewed.expires_at + 60, abs=0.01)
        # Redis expires the keys by its own clock: the logical expiry less the test's offset, plus the slack.
        keys = {k.decode() for k in direct.scan_iter(match=f"p:{{{SessionKeys('p:', sid).tag}}}*")}
        evicted = round(moved * 1000) - store.clock_offset_ms + 60_000 // EXPIRY_SLACK
        assert set(_expiries(direct, keys).values()) == {evicted}
    finally:
        direct.close()
        await store.close()


class OpenTurn:
    """Turn t1 open on a fresh session of a store with the prefix `p:`, and a client to write what an older
    version of the append script would have."""

    def __init__(self, url: str):
        self.store = RedisSessionStore.from_url(url, "p:", 60.0, 2.0)
        self.direct = admin_client(url)

    async def open(self) -> None:
        self.sid = (await self.store.create("acme", NewSession("", "", "default")))[0].session_id
        grant = await self.store.try_acquire("acme", self.sid, "t1", 10, Strategy.REJECT)
        assert isinstance(grant, Acquired)
        self.token, self.keys = grant.token, SessionKeys("p:", self.sid)

    async def append(self, append_id: str = "") -> Appended:
        """One delta, with that append id ('' for none)."""
        delta = events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text="d"))
        return await self.store.append_events(
            "acme", self.sid, NewEvents("t1", self.token, [delta], append_id=append_id)
        )

    async def close(self) -> None:
        self.direct.close()
        await self.store.close()


@pytest.fixture
async def open_turn(private_redis: RedisServer) -> AsyncIterator[OpenTurn]:
    turn = OpenTurn(private_redis.url)
    try:
        await turn.open()
        yield turn
    finally:
        await turn.close()


async def test_an_append_retried_across_the_upgrade_to_the_ring_of_append_ids_is_still_told(
    open_turn: OpenTurn,
) -> None:
    """Before the ring in the session's hash, append ids lived in the sorted set `events:batches` (id -> the seq the
    append ended at). An append that landed under that script and is retried under this one answers as it did."""
    await open_turn.append()  # no id: the ring stays empty
    open_turn.direct.zadd(open_turn.keys.key("events:batches"), {"t1:old": 1})  # what the old script wrote for it
    open_turn.direct.hset(open_turn.keys.key("s"), "ab", 1)
    again = await open_turn.append("t1:old")
    assert again.duplicate and again.last_seq == 1
    fresh = await open_turn.append("t1:new")
    assert not fresh.duplicate and fresh.last_seq == 2
    assert open_turn.direct.hget(open_turn.keys.key("s"), "r2") == b"2|t1:new", "the next id goes to its slot"


async def test_an_append_retried_across_the_upgrade_to_one_ring_field_is_still_told(open_turn: OpenTurn) -> None:
    """Before the ring was one field, the hash kept append ids in the slots `r0`..`r<n-1>` (`<last seq>|<id>`, slot
    `ab` mod n). An append that landed under that script and is retried under this one answers as it did, also
    after the next append has made the ring; and each append still writes its slot, where that version looks."""
    session = open_turn.keys.key("s")
    for _ in range(3):
        await open_turn.append()  # no id: no ring
    # What the old script wrote for three appends with ids, ending at seqs 1, 2 and 3.
    open_turn.direct.hset(session, mapping={"ab": 3, "r1": "1|t1:a", "r2": "2|t1:b", "r3": "3|t1:c"})
    assert open_turn.direct.hget(session, "ring") is None
    again = await open_turn.append("t1:b")
    assert again.duplicate and again.last_seq == 2
    fresh = await open_turn.append("t1:d")
    assert not fresh.duplicate and fresh.last_seq == 4
    assert open_turn.direct.hget(session, "ring") is not None, "the append made the ring, the slots' ids in it"
    assert open_turn.direct.hget(session, "r4") == b"4|t1:d", "and wrote its slot, for the old version"
    for append_id, seq in (("t1:a", 1), ("t1:c", 3), ("t1:d", 4)):
        retried = await open_turn.append(append_id)
        assert retried.duplicate and retried.last_seq == seq, append_id
    # A replica of the old version appends (its slot only; as if it also logged seq 5), then this one is asked
    # again: the ring is behind `ab`, so the slots answer.
    open_turn.direct.hset(session, mapping={"ab": 5, "r5": "5|t1:e"})
    for append_id, seq in (("t1:e", 5), ("t1:b", 2)):
        retried = await open_turn.append(append_id)
        assert retried.duplicate and retried.last_seq == seq, append_id
    assert (await open_turn.store.log_state("acme", open_turn.sid)).last_seq == 4


async def test_the_log_keeps_its_last_retention_events_whatever_its_appends_held(private_redis: RedisServer) -> None:
    """An entry holds an append's events; trimming goes by the events' seqs, not by entries, so a log of big appends
    keeps its last `retention` events (and the rest of the entry that holds the oldest of them), not more."""
    store = RedisSessionStore.from_url(private_redis.url, "p:", 0.0, 2.0, event_retention=8)
    try:
        sid = (await store.create("acme", NewSession("", "", "default")))[0].session_id
        grant = await store.try_acquire("acme", sid, "t1", 10, Strategy.REJECT)
        assert isinstance(grant, Acquired)
        for batch in range(3):  # 15 events in entries of five: seqs 1-5, 6-10, 11-15
            texts = [f"{batch}.{i}" for i in range(5)]
            events = [events_pb2.RuntimeEvent(assistant_delta=events_pb2.AssistantDelta(text=t)) for t in texts]
            await store.append_events("acme", sid, NewEvents("t1", grant.token, events))
        state = await store.log_state("acme", sid)
        assert (state.first_seq, state.last_seq) == (6, 15), "events 8-15 kept, with 6 and 7 of their entry"
        read = [e async for batch in store.read_events("acme", sid, 5, False, 30) if batch for e in batch]
        assert [e.seq for e in read] == list(range(6, 16))
        assert read[0].assistant_delta.text == "1.0" and read[-1].assistant_delta.text == "2.4"
    finally:
        await store.close()
