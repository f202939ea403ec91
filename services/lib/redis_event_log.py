"""Reading a session's event log on Redis Streams, for every gateway replica and the sessions service.

The sessions service writes the log (services/sessions/lua/append_events.lua, under the
turn's lease); this module reads it. Each session is a stream with an entry per append
whose id is `<seq>-0` of its last event (field `e`: a lone event without its seq; or
field `b`: up to 32 of them as a StoredEvents, their count in `n`), so a cursor maps to
the entry that holds it; the session's hash keeps the last seq. Reads replay from Redis, then tail
a local in-memory mirror that this process fills for every session it watches, with
one blocking read per Redis shard: on a standalone Redis (or Sentinel), one XREAD of
every watched stream, woken early by a stream of the process's own when a session is
added; on a cluster, where one XREAD cannot span slots, one sharded pub/sub connection
per primary (SSUBSCRIBE to each watched session's channel, which the append script
SPUBLISHes to in the session's slot), after which the new entries are read with
XRANGE. Either way a thousand watched sessions cost one blocking connection per shard,
not one per session, and the fan-out itself stays in memory. Commands share a bounded
pool: a burst waits for a free connection instead of failing, and a Redis that is down
or hung still fails them within bounded time.

Deleting a session leaves a tombstone and one entry after the last seq, marked
`dropped`, which ends every reader of it on every replica (the watch loops read it
like an event; they also ask for tombstones now and then, in case they missed it).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.typing import KeyT, StreamIdT

from cogmesh.common.v1 import events_pb2
from cogmesh.sessions.v1 import sessions_pb2
from services.kit.errors import Unavailable
from services.kit.logging import log
from services.kit.redis_pool import POOL_SIZE, REDIS_ERRORS, Client, closed_under_us, next_message, pooled_client
from services.kit.redis_url import check_prefix, parse_redis_url
from services.lib.event_log import Batch, SessionLog, check_cursor, leaves_idle, session_gone, tail
from services.lib.redis_keys import SessionKeys

T = TypeVar("T")

BLOCK_MS = 1000  # longest wait of a watch loop's blocking read
WAKE_LEN = 16  # entries kept in a process's wake stream
WAKE_TTL_S = 60  # a replica that died leaves its wake stream behind this long at most
DROPPED_TTL_S = 24 * 3600  # a deleted session's tombstone outlives any turn that could still append
DROP_WAKE_S = 600  # how long a deleted session's marker stays to end readers on every replica
DROP_RECHECK_S = 60.0  # how often a watch loop asks for tombstones of its sessions (it may miss a marker)
REPLAY_CHUNK = 1000  # entries per XRANGE when a replay fills the mirror


def _seq(entry_id: Any) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0])


def decode_entries(entries: Any, after: int = 0, stop: int | None = None) -> Batch:
    """Stream entries to the events after seq `after` (and up to `stop`), carrying their seqs.

    An entry is one append's events, its id the last one's seq: a lone event in field `e`, several as
    StoredEvents in field `b` (their count in `n`). `drop`'s marker is no event.
    """
    batch = Batch()
    for entry_id, fields in entries:
        last = _seq(entry_id)
        lone = fields.get(b"e")
        if lone is not None:
            if after < last and (stop is None or last <= stop):
                event = events_pb2.RuntimeEvent.FromString(lone)
                event.seq = last
                batch.append(event)
            continue
        several = fields.get(b"b")
        if several is None:
            continue
        events = sessions_pb2.StoredEvents.FromString(several).events
        for seq, event in enumerate(events, last - len(events) + 1):
            if after < seq and (stop is None or seq <= stop):
                event.seq = seq
                batch.append(event)
    return batch


async def read_range(redis: Any, stream: str, after: int, stop: int, count: int | None = None) -> Batch:
    """The events after seq `after` up to `stop` (from at most `count` entries, and the one after them).

    The entries whose ids fall in the range hold all of it but the part of the entry that holds `stop` and
    ends after it (an entry's id is its last event's seq): that one is read on its own.
    """
    entries = await redis.xrange(stream, f"{after + 1}-0", f"{stop}-0", count=count)
    batch = decode_entries(entries, after, stop)
    reached = batch[-1].seq if batch else after
    if reached < stop and (count is None or len(entries) < count):
        batch += decode_entries(await redis.xrange(stream, f"{reached + 1}-0", "+", count=1), reached, stop)
    return batch


def first_seq(entry: Any) -> int:
    """The seq of the first event a stream entry holds (see decode_entries)."""
    entry_id, fields = entry
    count = fields.get(b"n")
    return _seq(entry_id) - (int(count) - 1 if count else 0)


def is_drop_marker(entry: Any) -> bool:
    return b"dropped" in entry[1]


@dataclass
class _Follower:
    """One watched session on this replica: its mirror, filled by the watch loop and shared by its readers.

    Events before `live_from` came from Redis for readers replaying older history: one copy for
    all of them (a replay per reader held as many copies as there were readers), forgotten once
    none of them needs it.
    """

    mirror: SessionLog
    live_from: int  # the first seq the watch loop brings; older ones are a replay's backfill
    readers: int = 0
    replaying: int = 0  # readers whose cursor is still before `live_from`
    filling: asyncio.Lock = field(default_factory=asyncio.Lock)  # one backfill at a time

    @property
    def after(self) -> str:
        return f"{self.mirror.last_seq}-0"


class _LogKeys:
    """A session's keys the log is read from, all in the session's slot (services/lib/redis_keys.py):
    the stream, the session's hash (its `eseq` field is the last seq), the tombstone and the channel."""

    __slots__ = ("channel", "dropped", "session", "stream")

    def __init__(self, prefix: str, session_id: str):
        keys = SessionKeys(prefix, session_id)
        self.stream, self.session, self.dropped = keys.key("events"), keys.key("s"), keys.key("events:dropped")
        self.channel = keys.key("events:news")


def _deliver(follower: _Follower, entries: Any) -> None:
    """Add the entries after the mirror's last seq to it; `drop`'s marker closes it."""
    events = decode_entries(entries, follower.mirror.last_seq)
    if events:
        follower.mirror.add(events)
    if any(is_drop_marker(entry) for entry in entries):  # the session is gone
        follower.mirror.close()


class RedisEventLog:
    """A reader of sessions' logs: replays from Redis, then tails the mirror the watch loop fills."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "cogmesh:",
        retention: int = 10_000,
        max_lag: int = 5_000,
        max_batch: int = 512,
        timeout_s: float = 2.0,
        fanout_rate: float = 0.0,
        pool_size: int = POOL_SIZE,
    ):
        # Reads only: a connection that a Redis restart closed is retried once on a fresh one.
        self._redis: Client = pooled_client(url, timeout_s, retry_timeouts=False, pool_size=pool_size)
        self._cluster = isinstance(self._redis, aioredis.RedisCluster)
        self.prefix, self.retention = check_prefix(prefix), retention
        self.max_lag, self.max_batch, self.fanout_rate = max_lag, max_batch, fanout_rate
        self._followers: dict[str, _Follower] = {}
        self._shards = ShardWatch(self, url, timeout_s) if self._cluster else None
        # Standalone: the watch loop's XREAD blocks up to BLOCK_MS, so it gets its own connection and a
        # socket timeout past that: a hung Redis is noticed, a quiet one is not mistaken for it.
        self._blocking = None
        if not self._cluster:
            self._blocking = pooled_client(
                url, timeout_s, retry_timeouts=False, pool_size=1, socket_timeout_s=BLOCK_MS / 1000 + timeout_s
            )
        self._watch: asyncio.Task[None] | None = None
        # Adding a session wakes the loop's XREAD through this process's own stream.
        self._wake_key, self._wake_after = f"{prefix}events:wake:{uuid.uuid4().hex}", "0-0"
        self._waking: asyncio.Task[None] | None = None
        self._unwoken = False  # a session was added after the last wake was sent
        self._wake_ttl_due = 0.0  # loop time the wake stream's expiry is set again by (not on every wake)

    def _keys(self, session_id: str) -> _LogKeys:
        return _LogKeys(self.prefix, session_id)

    async def _redis_call(self, what: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except REDIS_ERRORS as exc:
            raise Unavailable(
                f"event log unavailable ({what}): {exc}", metadata={"dependency": "redis", "retryable": "true"}
            ) from exc

    async def last_seq(self, session_id: str) -> int:
        value = await self._redis_call("last_seq", self._redis.hget(self._keys(session_id).session, "eseq"))
        return int(value or 0)

    async def _head(self, session_id: str) -> tuple[int, int]:
        """The session's (last seq, first retained seq), in one round trip; NotFound once dropped."""
        keys = self._keys(session_id)
        pipe = self._redis.pipeline(transaction=False)
        pipe.hget(keys.session, "eseq")
        pipe.xrange(keys.stream, count=1)
        pipe.exists(keys.dropped)
        value, head, gone = await self._redis_call("read", pipe.execute())
        if gone:
            raise session_gone(session_id)
        last = int(value or 0)
        return last, first_seq(head[0]) if head else last + 1

    async def ends_with_turn_end(self, session_id: str) -> bool:
        entries = await self._redis_call("read", self._redis.xrevrange(self._keys(session_id).stream, count=1))
        ended = decode_entries(entries)
        return not ended or leaves_idle(ended[-1])  # empty, or dropped (its marker): nothing runs

    async def drop(self, session_id: str) -> None:
        """End this process's readers of a deleted session at once (the sessions service wrote its marker)."""
        follower = self._followers.get(session_id)
        if follower is not None:
            follower.mirror.close()

    async def read(
        self, session_id: str, after_seq: int, heartbeat_s: float, log_end: int | None = None
    ) -> AsyncIterator[Batch | None]:
        if log_end is not None and after_seq == log_end:
            # The caller just learned where the log ends (a lease grant): what follows is new, nothing to ask.
            # A session dropped meanwhile ends the read as any watched one does (its marker, or the recheck).
            last = log_end
        else:
            last, first = await self._head(session_id)
            check_cursor(session_id, after_seq, first, last)
        follower = self._attach(session_id, last)
        replaying = after_seq < follower.live_from - 1
        try:
            cursor = after_seq
            if replaying:
                follower.replaying += 1
                await self._backfill(session_id, follower, cursor)
            # Replay from Redis what the mirror does not hold, then tail the mirror.
            while cursor < follower.mirror.first_seq - 1:
                if follower.mirror.closed:
                    raise session_gone(session_id)
                stop = min(cursor + self.max_batch, follower.mirror.first_seq - 1)
                batch = await self._redis_call(
                    "replay", read_range(self._redis, self._keys(session_id).stream, cursor, stop)
                )
                if not batch or batch[0].seq != cursor + 1:
                    check_cursor(session_id, cursor, batch[0].seq if batch else last + 1, last)  # trimmed under us
                cursor = batch[-1].seq
                yield batch
            if replaying and cursor >= follower.live_from - 1:
                replaying = False
                self._replayed(follower)
            async for item in tail(session_id, follower.mirror, cursor, heartbeat_s, self.max_lag, self.max_batch):
                if replaying and item is not None and item[-1].seq >= follower.live_from - 1:
                    replaying = False
                    self._replayed(follower)
                yield item
        finally:
            if replaying:
                self._replayed(follower)
            self._detach(session_id, follower)

    async def _backfill(self, session_id: str, follower: _Follower, cursor: int) -> None:
        """Bring the events after `cursor` that the mirror lacks into it, up to its retention.

        Readers replaying together then share one decoded copy (and its encoding) instead of
        each holding batches of their own: 400 replays of 9,000 events held 400 copies.
        """
        mirror = follower.mirror
        if cursor >= mirror.first_seq - 1:
            return
        async with follower.filling:  # readers behind the first one mostly find the mirror filled
            stop = mirror.first_seq - 1
            start = max(cursor + 1, mirror.last_seq - self.retention + 1)
            if start > stop or mirror.closed:
                return
            stream, events = self._keys(session_id).stream, Batch()
            while (want := start + len(events)) <= stop:
                chunk = await self._redis_call(
                    "replay", read_range(self._redis, stream, want - 1, stop, count=REPLAY_CHUNK)
                )
                if not chunk or chunk[0].seq != want:
                    return  # trimmed meanwhile: the reader's own replay tells it
                events += chunk
            if mirror.first_seq == stop + 1 and not mirror.closed:
                mirror.prepend(events)

    def _replayed(self, follower: _Follower) -> None:
        """A reader left the backfilled part; when none is left in it, the mirror forgets it."""
        follower.replaying -= 1
        if follower.replaying == 0:
            follower.mirror.forget_before(follower.live_from)

    def _attach(self, session_id: str, last: int) -> _Follower:
        follower = self._followers.get(session_id)
        if follower is None or follower.mirror.closed:
            mirror = SessionLog(self.retention, last_seq=last, rate=self.fanout_rate)
            follower = _Follower(mirror, live_from=last + 1)
            self._followers[session_id] = follower
            if self._shards is not None:
                self._shards.watch(session_id)
            elif self._watch is None or self._watch.done():
                self._watch = asyncio.create_task(self._watch_all(), name="event-log-watch")
            else:  # the loop's XREAD may be blocked on the sessions it had
                self._unwoken = True
                if self._waking is None:
                    self._waking = asyncio.create_task(self._wake())
        follower.readers += 1
        return follower

    def _detach(self, session_id: str, follower: _Follower) -> None:
        follower.readers -= 1
        if follower.readers == 0 and self._followers.get(session_id) is follower:
            del self._followers[session_id]  # the loop stops reading it at its next XREAD
            if self._shards is not None:
                self._shards.unwatch(session_id)

    async def _wake(self) -> None:
        """End the loop's XREAD: an entry it has not read yet makes its current or next XREAD return."""
        try:
            while self._unwoken:  # sessions added while a wake was on its way need one sent after them
                self._unwoken = False
                pipe = self._redis.pipeline(transaction=False)
                pipe.xadd(self._wake_key, {"w": 1}, maxlen=WAKE_LEN, approximate=False)
                now = asyncio.get_running_loop().time()
                if now >= self._wake_ttl_due:  # a replica that died leaves nothing behind
                    pipe.expire(self._wake_key, WAKE_TTL_S)
                    self._wake_ttl_due = now + WAKE_TTL_S / 3
                await pipe.execute()
        except REDIS_ERRORS as exc:  # the XREAD still ends within BLOCK_MS
            self._wake_ttl_due = 0.0
            log.warning("event log could not wake its watch loop", error=str(exc))
        finally:
            self._waking = None

    async def _close_dropped(self, session_ids: Iterable[str]) -> None:
        """End the readers of watched sessions that were dropped without the loop seeing their marker
        (it was away from Redis for longer than DROP_WAKE_S, say)."""
        watched = [(sid, f) for sid in session_ids if (f := self._followers.get(sid)) and not f.mirror.closed]
        pipe = self._redis.pipeline(transaction=False)
        for sid, _ in watched:
            pipe.exists(self._keys(sid).dropped)
        for (_, follower), gone in zip(watched, await pipe.execute(), strict=True):
            if gone:
                follower.mirror.close()

    async def _catch_up(self, session_ids: Iterable[str]) -> None:
        """Bring each watched session's mirror up to the end of its stream (a cluster's shard watch)."""
        pending = list(session_ids)
        while pending:
            followers = [(sid, f) for sid in pending if (f := self._followers.get(sid)) and not f.mirror.closed]
            replies = await asyncio.gather(
                *(
                    self._redis.xrange(self._keys(sid).stream, f"{f.mirror.last_seq + 1}-0", "+", count=self.max_batch)
                    for sid, f in followers
                )
            )
            pending = []
            for (sid, follower), entries in zip(followers, replies, strict=True):
                if entries and not follower.mirror.closed:
                    _deliver(follower, entries)
                    if len(entries) == self.max_batch:
                        pending.append(sid)  # more behind these

    async def _watch_all(self) -> None:
        """Copy new entries of every watched session's stream into its mirror, in order, while any is watched.

        One XREAD covers them all: one connection however many sessions (a read per session
        held a connection each, and past redis-py's 100 they failed "Too many connections").
        """
        assert self._blocking is not None
        backoff, checked = 0.05, asyncio.get_running_loop().time()
        while True:
            watched = {self._keys(sid).stream: (sid, f) for sid, f in self._followers.items() if not f.mirror.closed}
            if not watched:
                return
            cursors: dict[KeyT, StreamIdT] = {stream: f.after for stream, (_, f) in watched.items()}
            cursors[self._wake_key] = self._wake_after
            try:
                if asyncio.get_running_loop().time() - checked >= DROP_RECHECK_S:
                    await self._close_dropped(sid for sid, _ in watched.values())
                    checked = asyncio.get_running_loop().time()
                    continue
                reply: Any = await self._blocking.xread(cursors, count=self.max_batch, block=BLOCK_MS)
                backoff = 0.05
            except REDIS_ERRORS as exc:
                self._wake_ttl_due = 0.0  # a Redis that restarted lost the wake stream's expiry: the next wake sets it
                log.warning("event log watch lost redis; retrying", sessions=len(watched), error=str(exc))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                continue
            for stream, entries in reply or []:
                key = stream.decode() if isinstance(stream, bytes) else stream
                if key == self._wake_key:
                    last = entries[-1][0]
                    self._wake_after = last.decode() if isinstance(last, bytes) else last
                    continue
                follower = watched[key][1]
                if not follower.mirror.closed:
                    _deliver(follower, entries)

    async def close(self) -> None:
        followers = list(self._followers.values())  # readers detach (and edit the dict) as they end
        self._followers.clear()
        for follower in followers:
            follower.mirror.close()
        for task in (self._watch, self._waking):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._shards is not None:
            await self._shards.close()
        else:
            with contextlib.suppress(*REDIS_ERRORS):
                await self._redis.delete(self._wake_key)
        await self._redis.aclose()
        if self._blocking is not None:
            await self._blocking.aclose()


@dataclass
class _Shard:
    """One primary's watch: a sharded pub/sub connection subscribed to its watched sessions' channels."""

    name: str
    url: str
    sessions: set[str] = field(default_factory=set)
    pubsub: PubSub | None = None  # set once connected: subscriptions may then be sent to it
    task: asyncio.Task[None] | None = None


class ShardWatch:
    """A cluster's watch loop: one blocking read per primary for all the sessions this replica watches there.

    Each watched session's channel (in its slot) is SSUBSCRIBEd on the connection to the
    primary that owns the slot; the append, reap and drop scripts SPUBLISH the session's
    last seq there. A notice, or the confirmation of a subscription, makes the loop read
    the session's new entries with XRANGE from the mirror's last seq, so a subscription
    made late, or made again after a failover, misses nothing. A shard whose connection
    fails (its primary died, a slot moved) hands its sessions back to be placed again on
    the cluster's current primaries; redis-py finds those (the slot map refreshed).
    """

    def __init__(self, events: RedisEventLog, url: str, timeout_s: float):
        assert isinstance(events._redis, aioredis.RedisCluster)
        self._events, self._cluster = events, events._redis
        self._target, self._timeout_s = parse_redis_url(url), timeout_s
        self._shards: dict[str, _Shard] = {}  # primary's name -> its watch
        self._home: dict[str, _Shard] = {}  # session -> the watch it is subscribed on
        self._by_channel: dict[bytes, str] = {}  # channel name -> session, for the notices
        self._orders: asyncio.Queue[tuple[str, str]] = asyncio.Queue()  # ("watch" | "unwatch", session)
        self._placer: asyncio.Task[None] | None = None
        self._backoff: dict[str, float] = {}  # primary's name -> seconds to wait before its next try

    def _channel(self, session_id: str) -> str:
        return self._events._keys(session_id).channel

    def watch(self, session_id: str) -> None:
        self._order("watch", session_id)

    def unwatch(self, session_id: str) -> None:
        self._order("unwatch", session_id)

    def _order(self, what: str, session_id: str) -> None:
        self._orders.put_nowait((what, session_id))
        if self._placer is None or self._placer.done():
            self._placer = asyncio.create_task(self._place_all(), name="event-log-shards")

    async def _place_all(self) -> None:
        """Carry out watch/unwatch orders one at a time (so subscriptions never race), while any come."""
        while not self._orders.empty():
            what, session_id = self._orders.get_nowait()
            try:
                if what == "watch":
                    await self._place(session_id)
                else:
                    await self._unplace(session_id)
            except REDIS_ERRORS as exc:
                log.warning("event log shard watch lost redis; placing again", error=str(exc))
                await self._wait_for_topology("placing")
                if what == "watch":
                    self._orders.put_nowait((what, session_id))

    async def _place(self, session_id: str) -> None:
        if session_id not in self._events._followers or session_id in self._home:
            return
        node = self._cluster.get_node_from_key(self._channel(session_id))
        if node is None:
            raise RedisError(f"no primary serves the slot of session {session_id} yet")
        shard = self._shards.get(node.name)
        if shard is None:
            shard = self._shards[node.name] = _Shard(node.name, self._target.node_url(node.host, int(node.port)))
        shard.sessions.add(session_id)
        self._home[session_id] = shard
        self._by_channel[self._channel(session_id).encode()] = session_id
        if shard.task is None or shard.task.done():
            shard.task = asyncio.create_task(self._follow(shard), name=f"event-log-shard-{node.name}")
        elif not await self._send(shard, "SSUBSCRIBE", session_id):
            self._home.pop(session_id, None)
            shard.sessions.discard(session_id)
            raise RedisError(f"could not subscribe to session {session_id} on {node.name}")

    async def _unplace(self, session_id: str) -> None:
        if session_id in self._events._followers:  # watched again meanwhile
            return
        shard = self._home.pop(session_id, None)
        if shard is None:
            return
        self._by_channel.pop(self._channel(session_id).encode(), None)
        shard.sessions.discard(session_id)
        if shard.sessions:  # else its loop ends and closes the connection
            await self._send(shard, "SUNSUBSCRIBE", session_id)

    async def _send(self, shard: _Shard, command: str, session_id: str) -> bool:
        """(Un)subscribe on the shard's connection while its loop reads; False when that failed.

        A connection still opening subscribes its sessions itself once open, so there is
        nothing to send then.
        """
        pubsub = shard.pubsub
        if pubsub is None:
            return True
        try:
            send = pubsub.ssubscribe if command == "SSUBSCRIBE" else pubsub.sunsubscribe
            await send(self._channel(session_id))
        except Exception as exc:  # noqa: BLE001 - a send that races its loop's disconnect fails in many ways
            log.warning("event log shard watch could not send", command=command, shard=shard.name, error=repr(exc))
            return False
        return True

    async def _follow(self, shard: _Shard) -> None:
        """Read the shard's notices until it has no session left or its connection fails."""
        client = aioredis.Redis.from_url(
            shard.url,
            socket_timeout=self._timeout_s,
            socket_connect_timeout=self._timeout_s,
            retry=Retry(NoBackoff(), 0),  # a lost connection ends the loop, which subscribes anew
        )
        pubsub = client.pubsub()
        try:
            await self._subscribe_and_follow(shard, pubsub)
        except REDIS_ERRORS as exc:
            log.warning("event log shard watch lost its primary; placing again", shard=shard.name, error=str(exc))
            self._retire(shard)
            await self._wait_for_topology(shard.name)
            self._disband(shard)
        finally:
            self._retire(shard)
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]
            await client.aclose()

    async def _subscribe_and_follow(self, shard: _Shard, pubsub: PubSub) -> None:
        """Subscribe the shard's sessions, then fetch what each notice or confirmation says is new."""
        loop = asyncio.get_running_loop()
        with closed_under_us():
            await pubsub.connect()  # type: ignore[no-untyped-call]
            shard.pubsub = pubsub
            for session_id in list(shard.sessions):
                await pubsub.ssubscribe(self._channel(session_id))
            checked = loop.time()
            while shard.sessions:
                news = await self._read(shard, pubsub)
                if news:
                    await self._events._catch_up(news)
                self._backoff.pop(shard.name, None)
                if loop.time() - checked >= DROP_RECHECK_S:
                    await self._events._close_dropped(list(shard.sessions))
                    checked = loop.time()

    def _retire(self, shard: _Shard) -> None:
        """No more subscriptions on this shard's connection; new sessions of its primary get a new one."""
        shard.pubsub = None
        if self._shards.get(shard.name) is shard:
            del self._shards[shard.name]

    async def _wait_for_topology(self, name: str) -> None:
        """Back off (per primary), then read the cluster's slot map again: a failover may have moved slots."""
        backoff = self._backoff.get(name, 0.05)
        self._backoff[name] = min(backoff * 2, 2.0)
        await asyncio.sleep(backoff)
        with contextlib.suppress(*REDIS_ERRORS):
            await self._cluster.nodes_manager.initialize()

    async def _read(self, shard: _Shard, pubsub: PubSub) -> set[str]:
        """The sessions with news: notices and confirmed subscriptions, as many as are there (one wait at most)."""
        news: set[str] = set()
        message = await next_message(pubsub, BLOCK_MS / 1000)
        while message is not None:
            kind, channel = message["type"], message["channel"]
            session_id = self._by_channel.get(channel, "")
            if session_id in shard.sessions:
                if kind == "sunsubscribe":  # not ours: the slot moved to another primary
                    raise RedisError(f"the cluster moved the slot of session {session_id}")
                if kind == "ssubscribe" or self._behind(session_id, message["data"]):
                    news.add(session_id)
            if len(news) >= self._events.max_batch:
                break
            message = await next_message(pubsub, 0)
        return news

    def _behind(self, session_id: str, data: Any) -> bool:
        follower = self._events._followers.get(session_id)
        return follower is not None and int(data) > follower.mirror.last_seq

    def _disband(self, shard: _Shard) -> None:
        """Hand a failed shard's sessions back to be placed on the cluster's current primaries."""
        for session_id in list(shard.sessions):
            if self._home.get(session_id) is shard:
                del self._home[session_id]
                self._order("watch", session_id)
        shard.sessions.clear()

    async def close(self) -> None:
        tasks = [self._placer, *(shard.task for shard in self._shards.values())]
        for shard in self._shards.values():
            shard.sessions.clear()  # its loop ends even if the read swallows the cancellation
        for task in tasks:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
