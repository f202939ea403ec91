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
from dataclasses import dataclass, field
from typing import Any, TypeVar

from redis.exceptions import RedisError
from redis.typing import KeyT, StreamIdT

from cogmesh.common.v1 import events_pb2
from gateway.event_log import (
    Batch,
    OpenTurn,
    SessionLog,
    check_cursor,
    closed_turn,
    is_terminal,
    lost_turn_event,
    session_gone,
    tail,
)
from services.kit.errors import Unavailable
from services.kit.logging import log
from services.kit.protos import now
from services.kit.redis_pool import POOL_SIZE, pooled_client

T = TypeVar("T")

BLOCK_MS = 1000  # longest wait of the watch loop's XREAD
WAKE_LEN = 16  # entries kept in a replica's wake stream
REMEMBERED_BATCHES = 16  # batch ids of a session's last appends, so a retried one is not logged twice
DROPPED_TTL_S = 24 * 3600  # a tombstone outlives any turn that could still append (turn_timeout_s)
DROP_WAKE_S = 600  # how long `drop`'s marker stays to end readers on every replica
DROP_RECHECK_S = 60.0  # how often a watch loop asks for tombstones of its sessions (it may miss a marker)
REPLAY_CHUNK = 1000  # entries per XRANGE when a replay fills the mirror

# Keys of one session share its hash tag (one cluster slot): the stream, the seq counter,
# the tombstone `drop` leaves, and the ids of its last appends. Open turns are two keys
# for every session: a zset (session -> expiry ms) and a hash (session -> "turn/tenant").
# A turn's mark set aside by the session's next turn (see gateway/event_log.py) is kept
# in both under "session/turn".

# KEYS: stream, seq counter, tombstone, batch ids, open turns, owners.
# ARGV: maxlen, ttl seconds, session, opened owner or "", open ttl ms, closed turn or "",
#       batch id or "", owner of the lost turn to end first or "", that end's payload or "", payload...
# Returns the first seq assigned to the payloads; {'dropped'} for a dropped session; {'lost', owner}
# when the session's mark belongs to a lapsed turn whose end the caller must send (ARGV 8, 9) first.
# Opening and closing marks happen with the events, atomically: a turn whose end is in the log is
# never reaped, a reaped one never gets a second end, and a lapsed one is ended before the next starts.
_APPEND = """
if redis.call('EXISTS', KEYS[3]) == 1 then return {'dropped'} end
if ARGV[7] ~= '' then
  local done = redis.call('ZSCORE', KEYS[4], ARGV[7])
  if done then return tonumber(done) end
end
local sid = ARGV[3]
local now = 0
local lost = false
if ARGV[4] ~= '' then
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
  local held = redis.call('HGET', KEYS[6], sid)
  if held and held ~= ARGV[4] then
    local expiry = tonumber(redis.call('ZSCORE', KEYS[5], sid) or '0')
    if expiry > now then
      local aside = sid .. '/' .. string.match(held, '^[^/]*')
      redis.call('ZADD', KEYS[5], expiry, aside)
      redis.call('HSET', KEYS[6], aside, held)
    elseif held ~= ARGV[8] then
      return {'lost', held}
    else
      lost = true
    end
  end
end
local n = #ARGV - 9
local last = redis.call('INCRBY', KEYS[2], lost and n + 1 or n)
local first = last - n + 1
if lost then
  redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[1], (first - 1) .. '-0', 'e', ARGV[9])
end
for i = 1, n do
  redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[1], (first + i - 1) .. '-0', 'e', ARGV[i + 9])
end
if tonumber(ARGV[2]) > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
if ARGV[4] ~= '' then
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[5]), sid)
  redis.call('HSET', KEYS[6], sid, ARGV[4])
end
if ARGV[6] ~= '' then
  local owner = redis.call('HGET', KEYS[6], sid)
  if owner and string.sub(owner, 1, #ARGV[6] + 1) == ARGV[6] .. '/' then
    redis.call('ZREM', KEYS[5], sid)
    redis.call('HDEL', KEYS[6], sid)
  end
  redis.call('ZREM', KEYS[5], sid .. '/' .. ARGV[6])
  redis.call('HDEL', KEYS[6], sid .. '/' .. ARGV[6])
end
if ARGV[7] ~= '' then
  redis.call('ZADD', KEYS[4], first, ARGV[7])
  redis.call('ZREMRANGEBYRANK', KEYS[4], 0, -REMEMBERED - 1)
  if tonumber(ARGV[2]) > 0 then redis.call('EXPIRE', KEYS[4], ARGV[2]) end
end
return first
""".replace("REMEMBERED", str(REMEMBERED_BATCHES))

# KEYS: open turns, owners. ARGV: session, owner, ttl ms, turn. Pushes the mark's expiry back while its turn runs.
_KEEP = """
local member = ARGV[1]
if redis.call('HGET', KEYS[2], member) ~= ARGV[2] then
  member = ARGV[1] .. '/' .. ARGV[4]
  if redis.call('HGET', KEYS[2], member) ~= ARGV[2] then return 0 end
end
local t = redis.call('TIME')
redis.call('ZADD', KEYS[1], t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[3]), member)
return 1
"""

# KEYS: stream, seq counter, tombstone, open turns, owners. ARGV: maxlen, ttl seconds, session, owner, payload, turn.
# Ends an orphaned turn: only while its mark is still there and expired, so one replica wins.
# The mark of a dropped session's turn is removed without an event.
_REAP = """
local sid = ARGV[3]
local member = sid
if redis.call('HGET', KEYS[5], member) ~= ARGV[4] then
  member = sid .. '/' .. ARGV[6]
  if redis.call('HGET', KEYS[5], member) ~= ARGV[4] then return 0 end
end
local expiry = redis.call('ZSCORE', KEYS[4], member)
if not expiry then return 0 end
local t = redis.call('TIME')
if tonumber(expiry) > t[1] * 1000 + math.floor(t[2] / 1000) then return 0 end
redis.call('ZREM', KEYS[4], member)
redis.call('HDEL', KEYS[5], member)
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
local seq = redis.call('INCR', KEYS[2])
redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[1], seq .. '-0', 'e', ARGV[5])
if tonumber(ARGV[2]) > 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
return seq
"""

# KEYS: stream, seq counter, tombstone, batch ids, open turns, owners. ARGV: session, tombstone ttl s, wake ttl s.
# Deletes the log and leaves a tombstone that refuses appends. One entry after the last seq, marked
# `dropped`, ends every replica's readers of the session: their watch loop reads it like an event.
_DROP = """
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
redis.call('DEL', KEYS[1], KEYS[2], KEYS[4])
redis.call('SET', KEYS[3], '1', 'EX', ARGV[2])
redis.call('XADD', KEYS[1], (last + 1) .. '-0', 'dropped', '1')
redis.call('EXPIRE', KEYS[1], ARGV[3])
if redis.call('HGET', KEYS[6], ARGV[1]) then
  redis.call('ZREM', KEYS[5], ARGV[1])
  redis.call('HDEL', KEYS[6], ARGV[1])
end
return last
"""


def _seq(entry_id: Any) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0])


def _decode(entries: Any) -> Batch:
    """Stream entries (id, {b'e': payload}) to events carrying their seq; `drop`'s marker is no event."""
    batch = Batch()
    for entry_id, fields in entries:
        payload = fields.get(b"e")
        if payload is None:
            continue
        event = events_pb2.RuntimeEvent.FromString(payload)
        event.seq = _seq(entry_id)
        batch.append(event)
    return batch


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
        dropped_ttl_s: int = DROPPED_TTL_S,
    ):
        # A connection that a Redis restart closed fails its next command before Redis runs it:
        # retry that once on a fresh connection. Only on ConnectionError: after a timeout the
        # append may have run; a caller that retries it passes the same batch id.
        self._redis = pooled_client(url, timeout_s, retry_timeouts=False, pool_size=pool_size)
        # The watch loop's XREAD blocks up to BLOCK_MS, so it gets its own connection and a
        # socket timeout past that: a hung Redis is noticed, a quiet one is not mistaken for it.
        self._blocking = pooled_client(
            url, timeout_s, retry_timeouts=False, pool_size=1, socket_timeout_s=BLOCK_MS / 1000 + timeout_s
        )
        self._append_script = self._redis.register_script(_APPEND)
        self._keep_script = self._redis.register_script(_KEEP)
        self._reap_script = self._redis.register_script(_REAP)
        self._drop_script = self._redis.register_script(_DROP)
        self._open_keys = [f"{prefix}events:open-turns", f"{prefix}events:open-turn-owners"]
        self.prefix, self.retention, self.ttl_s, self.dropped_ttl_s = prefix, retention, ttl_s, dropped_ttl_s
        self.max_lag, self.max_batch, self.fanout_rate = max_lag, max_batch, fanout_rate
        self._followers: dict[str, _Follower] = {}
        self._watch: asyncio.Task[None] | None = None
        # Adding a session wakes the loop's XREAD through this replica's own stream.
        self._wake_key, self._wake_after = f"{prefix}events:wake:{uuid.uuid4().hex}", "0-0"
        self._waking: asyncio.Task[None] | None = None
        self._unwoken = False  # a session was added after the last wake was sent

    def _keys(self, session_id: str) -> tuple[str, str, str, str]:
        """The session's stream, seq counter, tombstone and last batch ids: braces put them in one cluster slot."""
        stream = f"{self.prefix}events:{{{session_id}}}"
        return stream, f"{stream}:seq", f"{stream}:dropped", f"{stream}:batches"

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
        """Log `events` with the session's next seqs; stamps each with its seq, the session and a time.

        A non-empty `batch_id` that one of the session's last appends carried makes this one a
        no-op that stamps the seqs that append got: a retry after a timeout logs nothing twice.
        Raises NotFound (SESSION_NOT_FOUND) once the session was dropped.
        """
        if not events:
            return
        stamp = now()
        for event in events:
            event.session_id = session_id
            if not event.HasField("create_time"):
                event.create_time.CopyFrom(stamp)
        payloads = [e.SerializeToString() for e in events]
        keys = [*self._keys(session_id), *self._open_keys]
        lost_owner, lost_payload = "", b""
        for _ in range(5):  # more than two rounds takes turns opening under one lease at once
            args: list[str | int | bytes] = [
                self.retention,
                self.ttl_s,
                session_id,
                opened.owner if opened else "",
                int(opened.mark_ttl_s * 1000) if opened else 0,
                closed_turn(events),
                batch_id,
                lost_owner,
                lost_payload,
                *payloads,
            ]
            reply = await self._redis_call("append", self._append_script(keys=keys, args=args))
            if not isinstance(reply, list):
                for offset, event in enumerate(events):
                    event.seq = int(reply) + offset
                return
            if reply[0] == b"dropped":
                raise session_gone(session_id)
            # The session's mark belongs to a turn whose driver stopped: its end goes first.
            lost_owner = reply[1].decode()
            turn_id, _, tenant_id = lost_owner.partition("/")
            lost = lost_turn_event(OpenTurn(session_id, turn_id, tenant_id))
            lost.session_id = session_id
            lost.create_time.CopyFrom(stamp)
            lost_payload = lost.SerializeToString()
        raise Unavailable(
            "event log append kept meeting other turns' marks; try again",
            metadata={"dependency": "redis", "retryable": "true"},
        )

    async def keep_turn(self, turn: OpenTurn) -> None:
        args: list[str | int] = [turn.session_id, turn.owner, int(turn.mark_ttl_s * 1000), turn.turn_id]
        await self._redis_call("keep turn", self._keep_script(keys=self._open_keys, args=args))

    async def expired_turns(self, limit: int = 100) -> list[OpenTurn]:
        """Turns whose driver stopped renewing their mark (by this host's clock; `reap` asks Redis's)."""
        expired_ms = int(time.time() * 1000)
        members: Any = await self._redis_call(
            "expired turns", self._redis.zrangebyscore(self._open_keys[0], "-inf", expired_ms, start=0, num=limit)
        )
        if not members:
            return []
        owners: Any = await self._redis_call("expired turns", self._redis.hmget(self._open_keys[1], members))
        found = []
        for member, owner in zip(members, owners, strict=True):
            if owner is not None:
                turn_id, _, tenant_id = owner.decode().partition("/")
                session_id = member.decode().partition("/")[0]  # "session/turn": a mark set aside
                found.append(OpenTurn(session_id, turn_id, tenant_id))
        return found

    async def reap(self, turn: OpenTurn, event: events_pb2.RuntimeEvent) -> bool:
        event.session_id, event.turn_id = turn.session_id, turn.turn_id
        if not event.HasField("create_time"):
            event.create_time.CopyFrom(now())
        stream, seq_key, dropped, _ = self._keys(turn.session_id)
        keys = [stream, seq_key, dropped, *self._open_keys]
        args: list[str | int | bytes] = [self.retention, self.ttl_s, turn.session_id, turn.owner]
        args += [event.SerializeToString(), turn.turn_id]
        seq = await self._redis_call("reap", self._reap_script(keys=keys, args=args))
        event.seq = int(seq)
        return bool(seq)

    async def last_seq(self, session_id: str) -> int:
        value = await self._redis_call("last_seq", self._redis.get(self._keys(session_id)[1]))
        return int(value or 0)

    async def _head(self, session_id: str) -> tuple[int, int]:
        """The session's (last seq, first retained seq), in one round trip; NotFound once dropped."""
        stream, seq_key, dropped, _ = self._keys(session_id)
        pipe = self._redis.pipeline(transaction=False)
        pipe.get(seq_key)
        pipe.xrange(stream, count=1)
        pipe.exists(dropped)
        value, head, gone = await self._redis_call("read", pipe.execute())
        if gone:
            raise session_gone(session_id)
        last = int(value or 0)
        return last, _seq(head[0][0]) if head else last + 1

    async def ends_with_turn_end(self, session_id: str) -> bool:
        entries = await self._redis_call("read", self._redis.xrevrange(self._keys(session_id)[0], count=1))
        ended = _decode(entries)
        return not ended or is_terminal(ended[0])  # empty, or dropped (its marker): nothing runs

    async def drop(self, session_id: str) -> None:
        keys = [*self._keys(session_id), *self._open_keys]
        await self._redis_call("drop", self._drop_script(keys=keys, args=[session_id, self.dropped_ttl_s, DROP_WAKE_S]))
        follower = self._followers.get(session_id)
        if follower is not None:
            follower.mirror.close()

    async def read(self, session_id: str, after_seq: int, heartbeat_s: float) -> AsyncIterator[Batch | None]:
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
                entries = await self._redis_call(
                    "replay", self._redis.xrange(self._keys(session_id)[0], f"{cursor + 1}-0", f"{stop}-0")
                )
                batch = _decode(entries)
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
            stream, events = self._keys(session_id)[0], Batch()
            while (want := start + len(events)) <= stop:
                entries = await self._redis_call(
                    "replay", self._redis.xrange(stream, f"{want}-0", f"{stop}-0", count=REPLAY_CHUNK)
                )
                chunk = _decode(entries)
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

    async def _close_dropped(self, watched: dict[str, _Follower]) -> None:
        """End the readers of watched sessions that were dropped without the loop seeing their marker
        (it was away from Redis for longer than DROP_WAKE_S, say)."""
        pipe = self._redis.pipeline(transaction=False)
        for stream in watched:
            pipe.exists(f"{stream}:dropped")
        for follower, gone in zip(watched.values(), await pipe.execute(), strict=True):
            if gone:
                follower.mirror.close()

    async def _watch_all(self) -> None:
        """Copy new entries of every watched session's stream into its mirror, in order, while any is watched.

        One XREAD covers them all: one connection however many sessions (a read per session
        held a connection each, and past redis-py's 100 they failed "Too many connections").
        """
        backoff, checked = 0.05, asyncio.get_running_loop().time()
        while True:
            watched = {self._keys(sid)[0]: f for sid, f in self._followers.items() if not f.mirror.closed}
            if not watched:
                return
            cursors: dict[KeyT, StreamIdT] = {stream: f.after for stream, f in watched.items()}
            cursors[self._wake_key] = self._wake_after
            try:
                if asyncio.get_running_loop().time() - checked >= DROP_RECHECK_S:
                    await self._close_dropped(watched)
                    checked = asyncio.get_running_loop().time()
                    continue
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
                if follower.mirror.closed:
                    continue
                events = _decode(entries)
                if events:
                    follower.mirror.add(events)
                if len(events) < len(entries):  # `drop`'s marker: the session is gone
                    follower.mirror.close()

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
