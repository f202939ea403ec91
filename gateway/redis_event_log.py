"""The event log on Redis Streams, shared by every gateway replica.

Each session is a stream whose entry ids are `<seq>-0`, so a cursor maps straight to
a stream id and seq is strictly increasing across replicas (a Lua script assigns it
and appends atomically). Retention: MAXLEN by count, and the whole log expires after
`ttl_s` without appends. Reads replay from Redis, then tail a local in-memory mirror
that one XREAD loop per replica fills for every session it watches: a thousand watched
sessions cost one Redis connection and one blocking read, and the fan-out itself stays
in memory. Commands share a bounded pool: a burst waits for a free connection instead
of failing, and a Redis that is down or hung still fails them within bounded time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.typing import KeyT, StreamIdT

from cogmesh.common.v1 import events_pb2
from gateway.event_log import Batch, OpenTurn, SessionLog, check_cursor, ends_stream, is_terminal, tail
from services.kit.errors import Unavailable
from services.kit.logging import log
from services.kit.protos import now
from services.kit.redis_pool import POOL_SIZE, pooled_client

T = TypeVar("T")

BLOCK_MS = 1000  # longest wait of the watch loop's XREAD
WAKE_LEN = 16  # entries kept in a replica's wake stream

# KEYS: stream, seq counter, open turns (zset session -> expiry ms), their owners (hash session -> turn/tenant).
# ARGV: maxlen, ttl seconds, session, opened owner or "", open ttl ms, closed turn or "", payload...
# Returns the first seq assigned. Opening and closing a turn's mark happen with its events, atomically:
# a turn whose end event is in the log is never reaped, and a reaped one never gets a second end.
_APPEND = """
local n = #ARGV - 6
local last = redis.call('INCRBY', KEYS[2], n)
local first = last - n + 1
for i = 1, n do
  redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[1], (first + i - 1) .. '-0', 'e', ARGV[i + 6])
end
if tonumber(ARGV[2]) > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
local sid = ARGV[3]
if ARGV[4] ~= '' then
  local t = redis.call('TIME')
  redis.call('ZADD', KEYS[3], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[5]), sid)
  redis.call('HSET', KEYS[4], sid, ARGV[4])
end
if ARGV[6] ~= '' then
  local owner = redis.call('HGET', KEYS[4], sid)
  if owner and string.sub(owner, 1, #ARGV[6] + 1) == ARGV[6] .. '/' then
    redis.call('ZREM', KEYS[3], sid)
    redis.call('HDEL', KEYS[4], sid)
  end
end
return first
"""

# KEYS: open turns, owners. ARGV: session, owner, ttl ms. Pushes the mark's expiry back while its turn runs.
_KEEP = """
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[3]), ARGV[1])
return 1
"""

# KEYS: stream, seq counter, open turns, owners. ARGV: maxlen, ttl seconds, session, owner, payload.
# Ends an orphaned turn: only while its mark is still there and expired, so one replica wins.
_REAP = """
local sid = ARGV[3]
local expiry = redis.call('ZSCORE', KEYS[3], sid)
if not expiry or redis.call('HGET', KEYS[4], sid) ~= ARGV[4] then return 0 end
local t = redis.call('TIME')
if tonumber(expiry) > t[1] * 1000 + math.floor(t[2] / 1000) then return 0 end
redis.call('ZREM', KEYS[3], sid)
redis.call('HDEL', KEYS[4], sid)
local seq = redis.call('INCR', KEYS[2])
redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[1], seq .. '-0', 'e', ARGV[5])
if tonumber(ARGV[2]) > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
return seq
"""


def _seq(entry_id: Any) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0])


def _decode(entries: Any) -> Batch:
    """Stream entries (id, {b'e': payload}) to events carrying their seq."""
    batch = Batch()
    for entry_id, fields in entries:
        event = events_pb2.RuntimeEvent.FromString(fields[b"e"])
        event.seq = _seq(entry_id)
        batch.append(event)
    return batch


@dataclass
class _Follower:
    mirror: SessionLog
    readers: int = 0

    @property
    def after(self) -> str:
        return f"{self.mirror.last_seq}-0"


class RedisEventLog:
    def __init__(
        self,
        url: str,
        *,
        prefix: str = "cogmesh:",
        retention: int = 10_000,
        ttl_s: int = 7 * 24 * 3600,
        max_lag: int = 5_000,
        max_batch: int = 512,
        timeout_s: float = 2.0,
        fanout_rate: float = 0.0,
        pool_size: int = POOL_SIZE,
    ):
        # A connection that a Redis restart closed fails its next command before Redis runs it:
        # retry that once on a fresh connection. Only on ConnectionError: after a timeout the
        # append may have run, and running it again would log the batch twice.
        once = Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
        self._redis = pooled_client(url, timeout_s, once, pool_size)
        # The watch loop's XREAD blocks up to BLOCK_MS, so it gets its own connection and a
        # socket timeout past that: a hung Redis is noticed, a quiet one is not mistaken for it.
        self._blocking = aioredis.Redis.from_url(
            url,
            socket_timeout=BLOCK_MS / 1000 + timeout_s,
            socket_connect_timeout=timeout_s,
            retry=once,
            max_connections=1,
        )
        self._append_script = self._redis.register_script(_APPEND)
        self._keep_script = self._redis.register_script(_KEEP)
        self._reap_script = self._redis.register_script(_REAP)
        self._open_keys = [f"{prefix}events:open-turns", f"{prefix}events:open-turn-owners"]
        self.prefix, self.retention, self.ttl_s = prefix, retention, ttl_s
        self.max_lag, self.max_batch, self.fanout_rate = max_lag, max_batch, fanout_rate
        self._followers: dict[str, _Follower] = {}
        self._watch: asyncio.Task[None] | None = None
        # Adding a session wakes the loop's XREAD through this replica's own stream.
        self._wake_key, self._wake_after = f"{prefix}events:wake:{uuid.uuid4().hex}", "0-0"
        self._waking: asyncio.Task[None] | None = None
        self._unwoken = False  # a session was added after the last wake was sent

    def _keys(self, session_id: str) -> tuple[str, str]:
        stream = f"{self.prefix}events:{{{session_id}}}"  # braces: both keys share a cluster slot
        return stream, f"{stream}:seq"

    async def _redis_call(self, what: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except RedisError as exc:
            raise Unavailable(
                f"event log unavailable ({what}): {exc}", metadata={"dependency": "redis", "retryable": "true"}
            ) from exc

    async def append(
        self,
        session_id: str,
        events: Sequence[events_pb2.RuntimeEvent],
        opened: OpenTurn | None = None,
        batch_id: str = "",
    ) -> None:
        if not events:
            return
        stamp = now()
        for event in events:
            event.session_id = session_id
            if not event.HasField("create_time"):
                event.create_time.CopyFrom(stamp)
        payloads = [e.SerializeToString() for e in events]
        closed = next((e.turn_id for e in events if ends_stream(e)), "")
        args: list[str | int | bytes] = [
            self.retention,
            self.ttl_s,
            session_id,
            opened.owner if opened else "",
            int(opened.ttl_s * 1000) if opened else 0,
            closed,
            *payloads,
        ]
        keys = [*self._keys(session_id), *self._open_keys]
        first = await self._redis_call("append", self._append_script(keys=keys, args=args))
        for offset, event in enumerate(events):
            event.seq = int(first) + offset

    async def keep_turn(self, turn: OpenTurn) -> None:
        await self._redis_call(
            "keep turn",
            self._keep_script(keys=self._open_keys, args=[turn.session_id, turn.owner, int(turn.ttl_s * 1000)]),
        )

    async def expired_turns(self, limit: int = 100) -> list[OpenTurn]:
        """Turns whose driver stopped renewing their mark (by this host's clock; `reap` asks Redis's)."""
        expired_ms = int(time.time() * 1000)
        sessions: Any = await self._redis_call(
            "expired turns", self._redis.zrangebyscore(self._open_keys[0], "-inf", expired_ms, start=0, num=limit)
        )
        if not sessions:
            return []
        owners: Any = await self._redis_call("expired turns", self._redis.hmget(self._open_keys[1], sessions))
        found = []
        for session, owner in zip(sessions, owners, strict=True):
            if owner is not None:
                turn_id, _, tenant_id = owner.decode().partition("/")
                found.append(OpenTurn(session.decode(), turn_id, tenant_id))
        return found

    async def reap(self, turn: OpenTurn, event: events_pb2.RuntimeEvent) -> bool:
        event.session_id, event.turn_id = turn.session_id, turn.turn_id
        if not event.HasField("create_time"):
            event.create_time.CopyFrom(now())
        keys = [*self._keys(turn.session_id), *self._open_keys]
        args: list[str | int | bytes] = [self.retention, self.ttl_s, turn.session_id, turn.owner]
        args.append(event.SerializeToString())
        seq = await self._redis_call("reap", self._reap_script(keys=keys, args=args))
        event.seq = int(seq)
        return bool(seq)

    async def last_seq(self, session_id: str) -> int:
        value = await self._redis_call("last_seq", self._redis.get(self._keys(session_id)[1]))
        return int(value or 0)

    async def _first_seq(self, session_id: str, last: int) -> int:
        head = await self._redis_call("read", self._redis.xrange(self._keys(session_id)[0], count=1))
        return _seq(head[0][0]) if head else last + 1

    async def ends_with_turn_end(self, session_id: str) -> bool:
        entries = await self._redis_call("read", self._redis.xrevrange(self._keys(session_id)[0], count=1))
        return not entries or is_terminal(_decode(entries)[0])

    async def drop(self, session_id: str) -> None:
        await self._redis_call("drop", self._redis.delete(*self._keys(session_id)))
        follower = self._followers.get(session_id)
        if follower is not None:
            follower.mirror.close()

    async def read(self, session_id: str, after_seq: int, heartbeat_s: float) -> AsyncIterator[Batch | None]:
        last = await self.last_seq(session_id)
        check_cursor(session_id, after_seq, await self._first_seq(session_id, last), last)
        follower = self._attach(session_id, last)
        try:
            cursor = after_seq
            # Replay from Redis what the mirror does not hold, then tail the mirror.
            while cursor < follower.mirror.first_seq - 1:
                stop = min(cursor + self.max_batch, follower.mirror.first_seq - 1)
                entries = await self._redis_call(
                    "replay", self._redis.xrange(self._keys(session_id)[0], f"{cursor + 1}-0", f"{stop}-0")
                )
                batch = _decode(entries)
                if not batch or batch[0].seq != cursor + 1:
                    check_cursor(session_id, cursor, batch[0].seq if batch else last + 1, last)  # trimmed under us
                cursor = batch[-1].seq
                yield batch
            async for item in tail(session_id, follower.mirror, cursor, heartbeat_s, self.max_lag, self.max_batch):
                yield item
        finally:
            self._detach(session_id, follower)

    def _attach(self, session_id: str, last: int) -> _Follower:
        follower = self._followers.get(session_id)
        if follower is None or follower.mirror.closed:
            follower = _Follower(SessionLog(self.retention, last_seq=last, rate=self.fanout_rate))
            self._followers[session_id] = follower
            if self._watch is None or self._watch.done():
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

    async def _wake(self) -> None:
        """End the loop's XREAD: an entry it has not read yet makes its current or next XREAD return."""
        try:
            while self._unwoken:  # sessions added while a wake was on its way need one sent after them
                self._unwoken = False
                pipe = self._redis.pipeline(transaction=False)
                pipe.xadd(self._wake_key, {"w": 1}, maxlen=WAKE_LEN, approximate=False)
                pipe.expire(self._wake_key, 60)  # a replica that died leaves nothing behind
                await pipe.execute()
        except RedisError as exc:  # the XREAD still ends within BLOCK_MS
            log.warning("event log could not wake its watch loop", error=str(exc))
        finally:
            self._waking = None

    async def _watch_all(self) -> None:
        """Copy new entries of every watched session's stream into its mirror, in order, while any is watched.

        One XREAD covers them all: one connection however many sessions (a read per session
        held a connection each, and past redis-py's 100 they failed "Too many connections").
        """
        backoff = 0.05
        while True:
            watched = {self._keys(sid)[0]: f for sid, f in self._followers.items() if not f.mirror.closed}
            if not watched:
                return
            cursors: dict[KeyT, StreamIdT] = {stream: f.after for stream, f in watched.items()}
            cursors[self._wake_key] = self._wake_after
            try:
                reply: Any = await self._blocking.xread(cursors, count=self.max_batch, block=BLOCK_MS)
                backoff = 0.05
            except RedisError as exc:
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
                follower = watched[key]
                if not follower.mirror.closed:
                    follower.mirror.add(_decode(entries))

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
        with contextlib.suppress(RedisError):
            await self._redis.delete(self._wake_key)
        await self._redis.aclose()
        await self._blocking.aclose()
