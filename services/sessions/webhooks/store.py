"""The webhook store contract and its in-memory implementation (the embedded default).

Deliveries of one (webhook, session) are a queue sent one at a time in seq order. A
dispatcher `claim`s queues that are due (a lease on the queue's place in the schedule, so
replicas spread the work), `take`s the queue's head under a lease on the queue itself,
sends it, and `settle`s the attempt; the head moves on only once it was delivered or
given up. A dispatcher that dies mid-attempt leaves both leases to run out; the head is
then sent again (at least once). The Redis store (redis_store.py) keeps the same rules
with the schedule and each queue on slots of their own.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from services.sessions.webhooks.model import (
    Attempt,
    Delivery,
    Format,
    Page,
    Queue,
    State,
    Webhook,
    delivery_not_found,
    parse_delivery_id,
    webhook_not_found,
)

DELIVERY_LOG_MAX = 10_000  # deliveries a tenant's log lists (the oldest go first)


@dataclass(frozen=True)
class Taken:
    """The head of a queue, now leased to the taker."""

    delivery: Delivery


@dataclass(frozen=True)
class Claimed:
    """The queues a claim took, and when the schedule's earliest queue is due after it (None: it is empty)."""

    queues: list[Queue]
    next_at: float | None = None


@dataclass(frozen=True)
class Later:
    """The head is not due before `at` (the queue was put back in the schedule for then)."""

    at: float


class WebhookStore(Protocol):
    async def create(self, hook: Webhook, sealed: bytes) -> Webhook: ...
    async def get(self, tenant_id: str, webhook_id: str) -> Webhook: ...
    async def sealed(self, tenant_id: str, webhook_id: str) -> bytes: ...
    async def list_hooks(
        self,
        tenant_id: str,
        cursor: str,
        limit: int,
        session_id: str = "",
        turn_id: str = "",
        fmt: Format | None = None,
    ) -> Page[Webhook]: ...
    async def delete(self, tenant_id: str, webhook_id: str) -> bool: ...
    async def matching(self, tenant_id: str, session_id: str) -> list[Webhook]:
        """The tenant's webhooks that may want this session's events (tenant-wide ones and the session's)."""
        ...

    async def enqueue(self, deliveries: Sequence[Delivery]) -> None:
        """Add each delivery unless it is there already (same webhook, session and seq)."""
        ...

    async def claim(self, limit: int, lease_s: float, now: float) -> Claimed:
        """Up to `limit` due queues, each kept from other claimers for `lease_s`; and when the next is due."""
        ...

    async def take(self, queue: Queue, holder: str, lease_s: float, now: float) -> Taken | Later | None:
        """The queue's head under a lease for `holder`; None when it is empty or another holder has it."""
        ...

    async def settle(self, queue: Queue, holder: str, delivery: Delivery, attempt: Attempt) -> bool:
        """Record the attempt on the head and give the lease back; False when the lease was lost meanwhile
        (nothing recorded). The queue is due again when its next head is, or leaves the schedule when empty."""
        ...

    async def deliveries(
        self, tenant_id: str, webhook_id: str, session_id: str, state: State | None, cursor: str, limit: int
    ) -> Page[Delivery]: ...
    async def delivery(self, tenant_id: str, delivery_id: str) -> Delivery: ...
    async def redeliver(self, tenant_id: str, delivery_id: str, now: float) -> Delivery: ...
    async def close(self) -> None: ...


def page_filter(hooks: Sequence[Webhook], session_id: str, turn_id: str, fmt: Format | None) -> list[Webhook]:
    return [
        h
        for h in hooks
        if (not session_id or h.session_id == session_id)
        and (not turn_id or h.turn_id == turn_id)
        and (fmt is None or h.format == fmt)
    ]


@dataclass
class _Queue:
    items: dict[int, Delivery] = field(default_factory=dict)
    pending: set[int] = field(default_factory=set)
    holder: str = ""
    lease_until: float = 0.0

    def head(self) -> Delivery | None:
        return self.items[min(self.pending)] if self.pending else None


class MemoryWebhookStore:
    """Process-local; no method awaits while it changes state, so each is atomic on the event loop."""

    def __init__(self) -> None:
        self._hooks: dict[tuple[str, str], tuple[Webhook, bytes]] = {}  # insertion order: oldest first
        self._queues: dict[Queue, _Queue] = {}
        self._due: dict[Queue, float] = {}
        self._log: dict[str, dict[str, int]] = {}  # tenant -> delivery id -> order
        self._order = itertools.count()

    async def create(self, hook: Webhook, sealed: bytes) -> Webhook:
        self._hooks[(hook.tenant_id, hook.webhook_id)] = (hook, sealed)
        return hook

    async def get(self, tenant_id: str, webhook_id: str) -> Webhook:
        found = self._hooks.get((tenant_id, webhook_id))
        if found is None:
            raise webhook_not_found(webhook_id)
        return found[0]

    async def sealed(self, tenant_id: str, webhook_id: str) -> bytes:
        await self.get(tenant_id, webhook_id)
        return self._hooks[(tenant_id, webhook_id)][1]

    async def list_hooks(
        self,
        tenant_id: str,
        cursor: str,
        limit: int,
        session_id: str = "",
        turn_id: str = "",
        fmt: Format | None = None,
    ) -> Page[Webhook]:
        hooks = page_filter([h for (t, _), (h, _) in self._hooks.items() if t == tenant_id], session_id, turn_id, fmt)
        start = next((i + 1 for i, h in enumerate(hooks) if h.webhook_id == cursor), 0) if cursor else 0
        items = hooks[start : start + limit]
        more = start + limit < len(hooks)
        return Page(items, items[-1].webhook_id if more and items else "")

    async def delete(self, tenant_id: str, webhook_id: str) -> bool:
        return self._hooks.pop((tenant_id, webhook_id), None) is not None

    async def matching(self, tenant_id: str, session_id: str) -> list[Webhook]:
        return [h for (t, _), (h, _) in self._hooks.items() if t == tenant_id and h.session_id in ("", session_id)]

    async def enqueue(self, deliveries: Sequence[Delivery]) -> None:
        for d in deliveries:
            queue = self._queues.setdefault(d.queue, _Queue())
            if d.seq in queue.items:
                continue
            queue.items[d.seq] = d
            queue.pending.add(d.seq)
            self._due.setdefault(d.queue, d.next_at)
            log = self._log.setdefault(d.tenant_id, {})
            log[d.delivery_id] = next(self._order)
            if len(log) > DELIVERY_LOG_MAX:
                self._forget(d.tenant_id, next(iter(log)))

    async def claim(self, limit: int, lease_s: float, now: float) -> Claimed:
        due = [q for q, at in self._due.items() if at <= now][:limit]
        for q in due:
            self._due[q] = now + lease_s
        return Claimed(due, min(self._due.values(), default=None))

    async def take(self, queue: Queue, holder: str, lease_s: float, now: float) -> Taken | Later | None:
        q = self._queues.get(queue)
        if q is None or (q.holder not in ("", holder) and q.lease_until > now):
            return None
        head = q.head()
        if head is None:
            q.holder = ""
            self._due.pop(queue, None)
            return None
        if head.next_at > now:
            self._due[queue] = head.next_at
            return Later(head.next_at)
        q.holder, q.lease_until = holder, now + lease_s
        return Taken(head)

    async def settle(self, queue: Queue, holder: str, delivery: Delivery, attempt: Attempt) -> bool:
        q = self._queues.get(queue)
        if q is None or q.holder != holder:
            return False
        settled = attempt.applied(q.items[delivery.seq])
        q.items[delivery.seq] = settled
        if settled.state is not State.PENDING:
            q.pending.discard(delivery.seq)
        q.holder = ""
        head = q.head()
        if head is None:
            self._due.pop(queue, None)
        else:
            self._due[queue] = head.next_at
        return True

    async def deliveries(
        self, tenant_id: str, webhook_id: str, session_id: str, state: State | None, cursor: str, limit: int
    ) -> Page[Delivery]:
        log = self._log.get(tenant_id, {})
        ids = sorted(log, key=log.__getitem__, reverse=True)
        if cursor:
            ids = ids[next((i + 1 for i, d in enumerate(ids) if d == cursor), len(ids)) :]
        items: list[Delivery] = []
        for n, did in enumerate(ids):
            d = self._find(tenant_id, did)
            if d is None or (webhook_id and d.webhook_id != webhook_id) or (session_id and d.session_id != session_id):
                continue
            if state is not None and d.state is not state:
                continue
            items.append(d)
            if len(items) == limit:
                return Page(items, did if n + 1 < len(ids) else "")
        return Page(items)

    def _forget(self, tenant_id: str, did: str) -> None:
        """Out of the log: out of its queue too, unless it still waits to be sent."""
        del self._log[tenant_id][did]
        found = self._find(tenant_id, did)
        if found is not None and found.state is not State.PENDING:
            del self._queues[found.queue].items[found.seq]

    def _find(self, tenant_id: str, did: str) -> Delivery | None:
        parsed = parse_delivery_id(did)
        if parsed is None:
            return None
        webhook_id, session_id, seq = parsed
        q = self._queues.get(Queue(tenant_id, webhook_id, session_id))
        return q.items.get(seq) if q is not None else None

    async def delivery(self, tenant_id: str, delivery_id: str) -> Delivery:
        found = self._find(tenant_id, delivery_id)
        if found is None:
            raise delivery_not_found(delivery_id)
        return found

    async def redeliver(self, tenant_id: str, delivery_id: str, now: float) -> Delivery:
        d = await self.delivery(tenant_id, delivery_id)
        if d.state is State.PENDING:
            return d
        q = self._queues[d.queue]
        d = q.items[d.seq] = d.redelivered(now)
        q.pending.add(d.seq)
        self._due[d.queue] = min(self._due.get(d.queue, now), now)
        return d

    async def close(self) -> None:
        return None
