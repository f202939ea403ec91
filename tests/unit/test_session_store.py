"""The memory store with a fake clock, and the servicer's pure helpers.

Behaviour shared with the Redis store is in tests/contract; these tests pin what
needs a controllable clock (expiry exactly at the TTL) and the paging helpers.
"""

from __future__ import annotations

import pytest

from cogmesh.sessions.v1 import sessions_pb2
from services.kit.errors import InvalidArgument
from services.sessions.model import NewSession, SessionNotFound, SessionUpdate, StaleLease, Strategy
from services.sessions.servicer import _decision_bytes, _fit, decode_page_token, encode_page_token
from services.sessions.store import MemorySessionStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_eviction_happens_exactly_at_the_ttl_after_the_last_write() -> None:
    clock = Clock()
    store = MemorySessionStore(clock, session_ttl_s=900)
    record, _ = await store.create("acme", NewSession("u", "t", "default"))
    assert record.expires_at == 1900
    clock.now += 899
    await store.update("acme", record.session_id, SessionUpdate(role_id="coach"), 0)
    clock.now += 899
    assert (await store.get("acme", record.session_id)).role_id == "coach"
    clock.now += 1
    with pytest.raises(SessionNotFound):
        await store.get("acme", record.session_id)


async def test_zero_ttl_keeps_sessions_forever() -> None:
    clock = Clock()
    store = MemorySessionStore(clock, session_ttl_s=0)
    record, _ = await store.create("acme", NewSession("u", "t", "default"))
    clock.now += 10 * 365 * 86_400
    assert (await store.get("acme", record.session_id)).expires_at == 0


async def test_the_sweep_frees_idle_sessions_nobody_asks_about() -> None:
    clock = Clock()
    store = MemorySessionStore(clock, session_ttl_s=10)
    for i in range(3):
        await store.create("acme", NewSession("u", str(i), "default"))
    clock.now += 11
    await store.create("acme", NewSession("u", "fresh", "default"))
    assert len(store._entries) == 1
    assert len(store._by_key) == 1


async def test_lease_expiry_follows_the_clock() -> None:
    clock = Clock()
    store = MemorySessionStore(clock)
    record, _ = await store.create("acme", NewSession("", "", "default"))
    sid = record.session_id
    first = await store.try_acquire("acme", sid, "turn-1", 30, Strategy.REJECT)
    clock.now += 29.9
    await store.append_messages("acme", sid, [b"m"], first.token)  # type: ignore[union-attr]
    clock.now += 0.1
    second = await store.try_acquire("acme", sid, "turn-2", 30, Strategy.REJECT)
    assert second.token == first.token + 1  # type: ignore[union-attr]
    with pytest.raises(StaleLease):
        await store.append_messages("acme", sid, [b"late"], first.token)  # type: ignore[union-attr]


def test_page_tokens_round_trip_and_reject_foreign_tokens() -> None:
    assert decode_page_token(encode_page_token("o", 42), "o") == 42
    assert encode_page_token("o", None) == "" and decode_page_token("", "o") is None
    for bad in ("not-base64!", encode_page_token("c", 5), encode_page_token("o", -1)):
        with pytest.raises(InvalidArgument) as err:
            decode_page_token(bad, "o")
        assert err.value.violations[0][0] == "page_token"


def test_pages_stop_before_the_byte_budget_but_never_empty() -> None:
    items = [b"a" * 10, b"b" * 10, b"c" * 10]
    assert _fit(items, 25) == items[:2]
    assert _fit(items, 25, newest=True) == items[1:]
    assert _fit([b"x" * 100], 10) == [b"x" * 100]


def test_a_decision_compares_without_its_timestamp() -> None:
    decision = sessions_pb2.CheckpointDecision(text="yes", decided_by="alice")
    stamped = sessions_pb2.CheckpointDecision()
    stamped.CopyFrom(decision)
    stamped.decide_time.seconds = 12345
    assert _decision_bytes(decision) == _decision_bytes(stamped)
