"""One contract, every webhook store: in memory and on Redis (standalone, Sentinel, Cluster).

What the dispatcher relies on: an event enqueued twice is one delivery; a queue is sent in
seq order, its next head waiting until the one before is delivered or dead; a claim keeps a
queue from other claimers, and a taker's lease from other takers; a failed attempt comes due
again at its retry time; the log lists and redelivers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from services.kit.errors import NotFound
from services.kit.redis_pool import pooled_client
from services.sessions.webhooks.model import Attempt, Delivery, Format, Kind, Queue, State, Webhook
from services.sessions.webhooks.redis_store import RedisWebhookStore
from services.sessions.webhooks.store import Later, MemoryWebhookStore, Taken, WebhookStore
from tests.support.redis_topologies import REDIS_TOPOLOGIES, redis_for

LEASE_S = 30.0


@pytest.fixture(params=["memory", *REDIS_TOPOLOGIES])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[WebhookStore]:
    with contextlib.ExitStack() as stack:
        made: WebhookStore
        if request.param == "memory":
            made = MemoryWebhookStore()
        else:
            redis = stack.enter_context(redis_for(request, request.param))
            made = RedisWebhookStore(pooled_client(redis.url, 2.0), redis.prefix)
        try:
            yield made
        finally:
            await made.close()


def hook(webhook_id: str = "wh_1", session_id: str = "", tenant: str = "t1") -> Webhook:
    return Webhook(webhook_id, tenant, "https://example.com/h", frozenset(), session_id, created_at=1.0)


def delivery(seq: int, webhook_id: str = "wh_1", session_id: str = "s1", at: float = 10.0) -> Delivery:
    return Delivery(webhook_id, "t1", session_id, "turn", seq, Kind.FINAL, b"event", at, next_at=at, window_start=at)


QUEUE = Queue("t1", "wh_1", "s1")


async def test_webhooks_are_stored_listed_matched_and_deleted(store: WebhookStore) -> None:
    await store.create(hook("wh_a"), b"sealed-a")
    await store.create(hook("wh_b", session_id="s1"), b"sealed-b")
    await store.create(hook("wh_c", session_id="s2"), b"sealed-c")
    assert (await store.get("t1", "wh_b")).session_id == "s1"
    assert await store.sealed("t1", "wh_a") == b"sealed-a"
    with pytest.raises(NotFound):
        await store.get("t2", "wh_a")  # another tenant's is missing
    assert sorted(h.webhook_id for h in await store.matching("t1", "s1")) == ["wh_a", "wh_b"]
    first = await store.list_hooks("t1", "", 2)
    assert [h.webhook_id for h in first.items] == ["wh_a", "wh_b"] and first.next_cursor
    rest = await store.list_hooks("t1", first.next_cursor, 2)
    assert [h.webhook_id for h in rest.items] == ["wh_c"] and not rest.next_cursor
    assert [h.webhook_id for h in (await store.list_hooks("t1", "", 10, session_id="s2")).items] == ["wh_c"]
    assert (await store.list_hooks("t1", "", 10, fmt=Format.A2A)).items == []
    assert await store.delete("t1", "wh_b") and not await store.delete("t1", "wh_b")
    assert [h.webhook_id for h in await store.matching("t1", "s1")] == ["wh_a"]


async def test_a_queue_is_sent_in_order_one_at_a_time(store: WebhookStore) -> None:
    await store.enqueue([delivery(5), delivery(7)])
    await store.enqueue([delivery(5)])  # the same event again: one delivery
    assert (await store.claim(10, LEASE_S, now=9.0)).queues == []  # not due yet
    assert (await store.claim(10, LEASE_S, now=10.0)).queues == [QUEUE]
    assert (await store.claim(10, LEASE_S, now=11.0)).queues == []  # claimed: kept from other claimers
    taken = await store.take(QUEUE, "a", LEASE_S, now=11.0)
    assert isinstance(taken, Taken) and taken.delivery.seq == 5
    assert await store.take(QUEUE, "b", LEASE_S, now=11.0) is None  # another taker: leased
    # The head fails and is retried at 20: the next one waits behind it.
    assert await store.settle(QUEUE, "a", taken.delivery, Attempt(11.0, status=500, error="500", retry_at=20.0))
    assert (await store.claim(10, LEASE_S, now=15.0)).queues == []
    assert (await store.claim(10, LEASE_S, now=20.0)).queues == [QUEUE]
    again = await store.take(QUEUE, "b", LEASE_S, now=20.0)
    assert isinstance(again, Taken) and (again.delivery.seq, again.delivery.attempts) == (5, 1)
    assert await store.settle(QUEUE, "b", again.delivery, Attempt(20.0, status=204, delivered=True))
    following = await store.take(QUEUE, "b", LEASE_S, now=20.0)
    assert isinstance(following, Taken) and following.delivery.seq == 7
    assert not await store.settle(QUEUE, "other", following.delivery, Attempt(21.0, delivered=True))  # not its lease
    assert await store.settle(QUEUE, "b", following.delivery, Attempt(21.0, error="refused"))  # dead
    assert await store.take(QUEUE, "b", LEASE_S, now=22.0) is None
    assert (await store.claim(10, LEASE_S, now=1e9)).queues == []  # an empty queue leaves the schedule

    states = {d.seq: (d.state, d.attempts) for d in (await store.deliveries("t1", "", "", None, "", 10)).items}
    assert states == {5: (State.DELIVERED, 2), 7: (State.DEAD, 1)}
    dead = (await store.deliveries("t1", "wh_1", "s1", State.DEAD, "", 10)).items
    assert [d.seq for d in dead] == [7]
    redone = await store.redeliver("t1", dead[0].delivery_id, now=30.0)
    assert (redone.state, redone.attempts) == (State.PENDING, 0)
    assert (await store.claim(10, LEASE_S, now=30.0)).queues == [QUEUE]
    back = await store.take(QUEUE, "c", LEASE_S, now=30.0)
    assert isinstance(back, Taken) and back.delivery.seq == 7


async def test_a_takers_lease_runs_out_and_the_head_is_sent_again(store: WebhookStore) -> None:
    await store.enqueue([delivery(1, at=0.0)])
    await store.claim(10, LEASE_S, now=0.0)
    assert isinstance(await store.take(QUEUE, "dead-replica", 0.05, now=0.0), Taken)
    # The taker died mid-attempt: its claim and lease run out; another takes the same head.
    assert (await store.claim(10, LEASE_S, now=LEASE_S + 1)).queues == [QUEUE]
    async with asyncio.timeout(5):  # Redis expires the lease on its own clock (PX)
        while not isinstance(taken := await store.take(QUEUE, "next", LEASE_S, now=LEASE_S + 1), Taken):  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    assert taken.delivery.seq == 1


async def test_a_head_not_due_puts_the_queue_back_for_its_time(store: WebhookStore) -> None:
    await store.enqueue([delivery(1, at=50.0)])
    assert await store.take(QUEUE, "a", LEASE_S, now=10.0) == Later(50.0)
    assert (await store.claim(10, LEASE_S, now=49.0)).queues == []
    assert (await store.claim(10, LEASE_S, now=50.0)).queues == [QUEUE]


async def test_a_claim_tells_when_the_schedule_is_next_due(store: WebhookStore) -> None:
    """What a dispatcher sleeps until when nothing is due now: the schedule's earliest entry."""
    assert (await store.claim(10, LEASE_S, now=0.0)).next_at is None  # an empty schedule
    other = Queue("t1", "wh_1", "s2")
    await store.enqueue([delivery(1, at=10.0), delivery(1, session_id="s2", at=20.0)])
    nothing = await store.claim(10, LEASE_S, now=9.0)
    assert (nothing.queues, nothing.next_at) == ([], 10.0)
    first = await store.claim(10, LEASE_S, now=10.0)
    assert (first.queues, first.next_at) == ([QUEUE], 20.0)
    second = await store.claim(10, LEASE_S, now=20.0)
    assert (second.queues, second.next_at) == ([other], 10.0 + LEASE_S)  # the first claim's lease ends first


async def test_deliveries_page_newest_first(store: WebhookStore) -> None:
    await store.enqueue([delivery(seq, session_id=f"s{seq}") for seq in range(1, 6)])
    first = await store.deliveries("t1", "", "", None, "", 2)
    assert [d.seq for d in first.items] == [5, 4] and first.next_cursor
    second = await store.deliveries("t1", "", "", None, first.next_cursor, 10)
    assert [d.seq for d in second.items] == [3, 2, 1]
    with pytest.raises(NotFound):
        await store.redeliver("t2", first.items[0].delivery_id, now=1.0)


async def test_a_store_on_a_shared_client_leaves_it_open(request: pytest.FixtureRequest) -> None:
    """The sessions process may hand its one Redis client to the webhook store (and on to the schedule
    store): closing the store must not close the client its owner still uses."""
    with redis_for(request, "standalone") as redis:
        client = pooled_client(redis.url, 2.0)
        close = client.aclose
        closed: list[bool] = []

        async def counted() -> None:
            closed.append(True)

        client.aclose = counted  # type: ignore[method-assign]
        try:
            store = RedisWebhookStore(client, redis.prefix, owns_client=False)
            assert store.client is client
            await store.enqueue([delivery(1, at=0.0)])
            await store.close()
            assert closed == []
            assert (await store.claim(10, LEASE_S, now=0.0)).queues == [QUEUE]
            await RedisWebhookStore(client, redis.prefix).close()
            assert closed == [True]
        finally:
            await close()
