"""Webhooks in Redis, shared by every sessions replica; standalone, Sentinel or Cluster.

Slots (services/lib/redis_keys.py's rule: a script touches one slot):

- a tenant's webhooks and its delivery log: `<prefix>{wh:t:<tenant>}:...` (the records,
  sealed secrets, their order, the tenant-wide set and one set per session);
- each queue, the deliveries of one (webhook, session): `<prefix>{wh:q:<webhook>:<session>}:...`
  (items: seq -> delivery, pending: the seqs not yet delivered or dead, lease: its taker);
- the schedule, queues by when they are due, spread over SCHEDULE_BUCKETS slots.

A change that spans slots is done queue first, then the log, then the schedule, each
step safe to repeat: a re-enqueue (the retried append) redoes the steps a crash skipped.
A queue leaves the schedule only when it was found empty, and is put back if an enqueue
slipped in between (the queue is written before the schedule, so one of the two sees it).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import zlib
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from redis.commands.core import AsyncScript

from services.kit import lua
from services.kit.errors import NotFound, Unavailable
from services.kit.redis_pool import UNAVAILABLE_ERRORS, Client, pooled_client
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
from services.sessions.webhooks.store import DELIVERY_LOG_MAX, Claimed, Later, Taken, page_filter

T = TypeVar("T")
SCHEDULE_BUCKETS = 16
QUEUE_TTL_MS = 8 * 86_400_000  # a queue's keys outlive the longest retry window by a day
SCAN_BATCHES = 20  # a filtered page of deliveries reads at most this many batches of the log

# The scripts: services/sessions/webhooks/lua/*.lua (each file's opening comments say what its KEYS and ARGV
# hold and it returns).
_LUA = lua.load("services.sessions.webhooks")
CREATE, DELETE, ENQUEUE, LOG_ADD = _LUA["create"], _LUA["delete"], _LUA["enqueue"], _LUA["log_add"]
CLAIM, TAKE, SETTLE, REDELIVER = _LUA["claim"], _LUA["take"], _LUA["settle"], _LUA["redeliver"]


def _tag(value: str) -> str:
    """`value` as a hash tag: kept when it holds no braces, else a digest (still one slot, still distinct)."""
    return value if "{" not in value and "}" not in value else "~" + hashlib.sha256(value.encode()).hexdigest()[:32]


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisWebhookStore:
    def __init__(self, client: Client, prefix: str, owns_client: bool = True):
        """`owns_client` False: the client is shared (another store's pool) and closed by its owner."""
        self._redis, self._prefix = client, prefix
        self._owns_client = owns_client
        self._scripts: dict[str, AsyncScript] = {}

    @property
    def client(self) -> Client:
        """The Redis client this store calls through (to share with another store on the same Redis)."""
        return self._redis

    @classmethod
    def from_url(cls, url: str, prefix: str, timeout_s: float) -> RedisWebhookStore:
        return cls(pooled_client(url, timeout_s), prefix)

    # ----------------------------------------------------------------- keys

    def _tenant(self, tenant_id: str, name: str) -> str:
        return f"{self._prefix}{{wh:t:{_tag(tenant_id)}}}:{name}"

    def _queue(self, queue: Queue) -> list[str]:
        base = f"{self._prefix}{{wh:q:{_tag(queue.webhook_id + ':' + queue.session_id)}}}"
        return [f"{base}:items", f"{base}:pending", f"{base}:lease"]

    def _bucket(self, queue: Queue) -> str:
        return self._bucket_key(zlib.crc32(f"{queue.webhook_id}:{queue.session_id}".encode()) % SCHEDULE_BUCKETS)

    def _bucket_key(self, n: int) -> str:
        return f"{self._prefix}{{wh:due:{n}}}"

    @staticmethod
    def _member(queue: Queue) -> str:
        return "\x1f".join((queue.tenant_id, queue.webhook_id, queue.session_id))

    # ----------------------------------------------------------------- calls

    async def _call(self, call: Awaitable[T]) -> T:
        try:
            return await call
        except UNAVAILABLE_ERRORS as exc:
            raise Unavailable(f"webhook store unavailable: {exc}", metadata={"retryable": "true"}) from exc

    async def _eval(self, source: str, keys: list[str], args: list[Any]) -> Any:
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = self._redis.register_script(source)
        return await self._call(script(keys=keys, args=args))

    # ----------------------------------------------------------------- webhooks

    async def create(self, hook: Webhook, sealed: bytes) -> Webhook:
        index = self._tenant(hook.tenant_id, f"s:{hook.session_id}" if hook.session_id else "all")
        keys = [self._tenant(hook.tenant_id, n) for n in ("hooks", "sealed", "order", "seq")] + [index]
        await self._eval(CREATE, keys, [hook.webhook_id, json.dumps(hook.to_json()), sealed])
        return hook

    async def get(self, tenant_id: str, webhook_id: str) -> Webhook:
        raw = await self._call(self._redis.hget(self._tenant(tenant_id, "hooks"), webhook_id))
        if raw is None:
            raise webhook_not_found(webhook_id)
        return Webhook.from_json(json.loads(raw))

    async def sealed(self, tenant_id: str, webhook_id: str) -> bytes:
        raw = await self._call(self._redis.hget(self._tenant(tenant_id, "sealed"), webhook_id))
        if raw is None:
            raise webhook_not_found(webhook_id)
        return raw if isinstance(raw, bytes) else raw.encode("latin-1")

    async def list_hooks(
        self,
        tenant_id: str,
        cursor: str,
        limit: int,
        session_id: str = "",
        turn_id: str = "",
        fmt: Format | None = None,
    ) -> Page[Webhook]:
        order = self._tenant(tenant_id, "order")
        low: Any = "-inf"
        if cursor:
            score = await self._call(self._redis.zscore(order, cursor))
            low = f"({score}" if score is not None else "-inf"
        items: list[Webhook] = []
        while True:
            ids: list[Any] = await self._call(
                self._redis.zrangebyscore(order, low, "+inf", start=0, num=limit, withscores=True)
            )
            if not ids:
                return Page(items)
            raws = await self._call(self._redis.hmget(self._tenant(tenant_id, "hooks"), [_s(i) for i, _ in ids]))
            hooks = [Webhook.from_json(json.loads(r)) for r in raws if r is not None]
            for hook in page_filter(hooks, session_id, turn_id, fmt):
                items.append(hook)
                if len(items) == limit:
                    return Page(items, hook.webhook_id)
            low = f"({ids[-1][1]}"

    async def delete(self, tenant_id: str, webhook_id: str) -> bool:
        try:
            hook = await self.get(tenant_id, webhook_id)
        except NotFound:
            return False
        index = self._tenant(tenant_id, f"s:{hook.session_id}" if hook.session_id else "all")
        keys = [self._tenant(tenant_id, n) for n in ("hooks", "sealed", "order")] + [index]
        return bool(await self._eval(DELETE, keys, [webhook_id]))

    async def matching(self, tenant_id: str, session_id: str) -> list[Webhook]:
        # The tenant's hooks and the session's, in one command (the keys share the tenant's slot).
        both = await self._call(
            self._redis.sunion([self._tenant(tenant_id, "all"), self._tenant(tenant_id, f"s:{session_id}")])
        )
        ids = sorted(_s(i) for i in both)
        if not ids:
            return []
        raws = await self._call(self._redis.hmget(self._tenant(tenant_id, "hooks"), ids))
        return [Webhook.from_json(json.loads(r)) for r in raws if r is not None]

    # ----------------------------------------------------------------- deliveries

    async def enqueue(self, deliveries: Sequence[Delivery]) -> None:
        for d in deliveries:
            items, pending, _ = self._queue(d.queue)
            await self._eval(ENQUEUE, [items, pending], [d.seq, json.dumps(d.to_json()), QUEUE_TTL_MS])
            keys = [self._tenant(d.tenant_id, "log"), self._tenant(d.tenant_id, "logseq")]
            await self._eval(LOG_ADD, keys, [d.delivery_id, DELIVERY_LOG_MAX])
            await self._call(self._redis.zadd(self._bucket(d.queue), {self._member(d.queue): d.next_at}, nx=True))

    async def claim(self, limit: int, lease_s: float, now: float) -> Claimed:
        """The first entry of every bucket in one round trip; then, from the due buckets only, a share of
        `limit` each (a busy bucket gives the rest on the next claim). Idle, a claim is 16 reads."""
        pipe = self._redis.pipeline(transaction=False)
        for n in range(SCHEDULE_BUCKETS):
            pipe.zrange(self._bucket_key(n), 0, 0, withscores=True)
        firsts: list[Any] = await self._call(pipe.execute())
        due = [n for n, first in enumerate(firsts) if first and float(first[0][1]) <= now]
        later = [float(first[0][1]) for first in firsts if first and float(first[0][1]) > now]
        claimed = []
        if due:
            share = -(-limit // len(due))
            args = [f"{now:.6f}", share, f"{now + lease_s:.6f}"]
            for members, first in await asyncio.gather(*(self._eval(CLAIM, [self._bucket_key(n)], args) for n in due)):
                if _s(first):
                    later.append(float(_s(first)))
                for member in members:
                    tenant_id, webhook_id, session_id = _s(member).split("\x1f")
                    claimed.append(Queue(tenant_id, webhook_id, session_id))
        return Claimed(claimed, min(later, default=None))

    async def take(self, queue: Queue, holder: str, lease_s: float, now: float) -> Taken | Later | None:
        reply = await self._eval(TAKE, self._queue(queue), [holder, f"{now:.6f}", int(lease_s * 1000)])
        status = _s(reply[0])
        if status == "head":
            return Taken(Delivery.from_json(json.loads(reply[1])))
        if status == "later":
            at = float(_s(reply[1]))
            await self._call(self._redis.zadd(self._bucket(queue), {self._member(queue): at}))
            return Later(at)
        if status == "empty":
            await self._unschedule(queue)
        return None

    async def settle(self, queue: Queue, holder: str, delivery: Delivery, attempt: Attempt) -> bool:
        settled = attempt.applied(delivery)
        done = "1" if settled.state is not State.PENDING else ""
        reply = await self._eval(
            SETTLE, self._queue(queue), [holder, delivery.seq, json.dumps(settled.to_json()), done]
        )
        status = _s(reply[0])
        if status == "lost":
            return False
        if status == "empty":
            await self._unschedule(queue)
        else:
            await self._call(self._redis.zadd(self._bucket(queue), {self._member(queue): float(_s(reply[1]))}))
        return True

    async def _unschedule(self, queue: Queue) -> None:
        """Out of the schedule, and back in if an enqueue wrote the queue meanwhile."""
        bucket, member = self._bucket(queue), self._member(queue)
        await self._call(self._redis.zrem(bucket, member))
        if await self._call(self._redis.zcard(self._queue(queue)[1])):
            await self._call(self._redis.zadd(bucket, {member: 0}, nx=True))

    async def _load(self, tenant_id: str, ids: Sequence[str]) -> list[Delivery | None]:
        pipe = self._redis.pipeline(transaction=False)
        for did in ids:
            parsed = parse_delivery_id(did)
            assert parsed is not None
            webhook_id, session_id, seq = parsed
            pipe.hget(self._queue(Queue(tenant_id, webhook_id, session_id))[0], str(seq))
        raws = await self._call(pipe.execute()) if ids else []
        return [Delivery.from_json(json.loads(r)) if r is not None else None for r in raws]

    async def deliveries(
        self, tenant_id: str, webhook_id: str, session_id: str, state: State | None, cursor: str, limit: int
    ) -> Page[Delivery]:
        log = self._tenant(tenant_id, "log")
        high: Any = "+inf"
        if cursor:
            score = await self._call(self._redis.zscore(log, cursor))
            if score is None:
                return Page([])
            high = f"({score}"
        items: list[Delivery] = []
        batch = max(limit, 50)
        for _ in range(SCAN_BATCHES):
            found: list[Any] = await self._call(
                self._redis.zrevrangebyscore(log, high, "-inf", start=0, num=batch, withscores=True)
            )
            if not found:
                return Page(items)
            ids = [_s(m) for m, _ in found]
            for did, d in zip(ids, await self._load(tenant_id, ids), strict=True):
                if d is None or (webhook_id and d.webhook_id != webhook_id):
                    continue
                if (session_id and d.session_id != session_id) or (state is not None and d.state is not state):
                    continue
                items.append(d)
                if len(items) == limit:
                    return Page(items, did)
            high = f"({found[-1][1]}"
        return Page(items, _s(found[-1][0]))

    async def delivery(self, tenant_id: str, delivery_id: str) -> Delivery:
        if parse_delivery_id(delivery_id) is None:
            raise delivery_not_found(delivery_id)
        found = (await self._load(tenant_id, [delivery_id]))[0]
        if found is None or found.tenant_id != tenant_id:
            raise delivery_not_found(delivery_id)
        return found

    async def redeliver(self, tenant_id: str, delivery_id: str, now: float) -> Delivery:
        d = await self.delivery(tenant_id, delivery_id)
        if d.state is State.PENDING:
            return d
        d = d.redelivered(now)
        items, pending, _ = self._queue(d.queue)
        await self._eval(REDELIVER, [items, pending], [d.seq, json.dumps(d.to_json()), QUEUE_TTL_MS])
        await self._call(self._redis.zadd(self._bucket(d.queue), {self._member(d.queue): now}, lt=True))
        return d

    async def close(self) -> None:
        if self._owns_client:
            await self._redis.aclose()
