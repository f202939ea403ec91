"""The event log on Redis Streams, shared by every gateway replica.

Each session is a stream whose entry ids are `<seq>-0`, so a cursor maps straight to
a stream id and seq is strictly increasing across replicas (a Lua script assigns it
and appends atomically). Retention: MAXLEN by count, and the whole log expires after
`ttl_s` without appends. Reads replay from Redis, then tail a local in-memory mirror
that this replica fills for every session it watches, with one blocking read per
Redis shard: on a standalone Redis (or Sentinel), one XREAD of every watched stream,
woken early by a stream of the replica's own when a session is added; on a cluster,
where one XREAD cannot span slots, one sharded pub/sub connection per primary
(SSUBSCRIBE to each watched session's channel, which the append script SPUBLISHes to
in the session's slot), after which the new entries are read with XRANGE. Either way a
thousand watched sessions cost one blocking connection per shard, not one per session,
and the fan-out itself stays in memory. Commands share a bounded pool: a burst waits
for a free connection instead of failing, and a Redis that is down or hung still fails
them within bounded time.

All keys of a session share its cluster slot (services/kit/redis_keys.py): the stream,
its seq counter, the tombstone `drop` leaves, the ids of its last appends, its open-turn
marks and its channel. The reaper finds expired marks through an index spread over
OPEN_TURN_BUCKETS slots; an entry there says when to look at a session, and is written
before the mark it points at, so a mark is never left without one.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
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
from services.kit.redis_keys import SessionKeys, check_prefix, open_turn_bucket, open_turn_buckets
from services.kit.redis_pool import (
    POOL_SIZE,
    REDIS_ERRORS,
    Client,
    ReplicaWait,
    closed_under_us,
    eval_then_wait,
    pooled_client,
)
from services.kit.redis_url import parse_redis_url

T = TypeVar("T")

BLOCK_MS = 1000  # longest wait of a watch loop's blocking read
WAKE_LEN = 16  # entries kept in a replica's wake stream
REMEMBERED_BATCHES = 16  # batch ids of a session's last appends, so a retried one is not logged twice
DROPPED_TTL_S = 24 * 3600  # a tombstone outlives any turn that could still append (turn_timeout_s)
DROP_WAKE_S = 600  # how long `drop`'s marker stays to end readers on every replica
DROP_RECHECK_S = 60.0  # how often a watch loop asks for tombstones of its sessions (it may miss a marker)
REPLAY_CHUNK = 1000  # entries per XRANGE when a replay fills the mirror
CURRENT = "current"  # the open-turn mark of the session's turn; one set aside by the next turn: "aside:<turn>"

# KEYS: stream, seq counter, tombstone, batch ids, marks (zset member -> expiry ms), their owners, channel.
# ARGV: maxlen, ttl seconds, notify ('1': SPUBLISH the last seq), opened owner or "", open ttl ms,
#       closed turn or "", batch id or "", owner of the lost turn to end first or "", that end's payload or "",
#       payload...
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
local now = 0
local lost = false
if ARGV[4] ~= '' then
  local t = redis.call('TIME')
  now = t[1] * 1000 + math.floor(t[2] / 1000)
  local held = redis.call('HGET', KEYS[6], 'CURRENT')
  if held and held ~= ARGV[4] then
    local expiry = tonumber(redis.call('ZSCORE', KEYS[5], 'CURRENT') or '0')
    if expiry > now then
      local aside = 'aside:' .. string.match(held, '^[^/]*')
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
if ARGV[4] ~= '' then
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[5]), 'CURRENT')
  redis.call('HSET', KEYS[6], 'CURRENT', ARGV[4])
end
if ARGV[6] ~= '' then
  local owner = redis.call('HGET', KEYS[6], 'CURRENT')
  if owner and string.sub(owner, 1, #ARGV[6] + 1) == ARGV[6] .. '/' then
    redis.call('ZREM', KEYS[5], 'CURRENT')
    redis.call('HDEL', KEYS[6], 'CURRENT')
  end
  redis.call('ZREM', KEYS[5], 'aside:' .. ARGV[6])
  redis.call('HDEL', KEYS[6], 'aside:' .. ARGV[6])
end
if ARGV[7] ~= '' then
  redis.call('ZADD', KEYS[4], first, ARGV[7])
  redis.call('ZREMRANGEBYRANK', KEYS[4], 0, -REMEMBERED - 1)
end
if tonumber(ARGV[2]) > 0 then
  for i = 1, 6 do if i ~= 3 then redis.call('EXPIRE', KEYS[i], ARGV[2]) end end
end
if ARGV[3] == '1' then redis.call('SPUBLISH', KEYS[7], last) end
return first
""".replace("REMEMBERED", str(REMEMBERED_BATCHES)).replace("CURRENT", CURRENT)

# KEYS: marks, owners. ARGV: owner, ttl ms, turn. Pushes the mark's expiry back while its turn runs.
# Returns 0 without a mark, 1, or 2 when the expiry moved earlier (a shorter ttl): the reaper's index
# must then look sooner.
_KEEP = """
local member = 'CURRENT'
if redis.call('HGET', KEYS[2], member) ~= ARGV[1] then
  member = 'aside:' .. ARGV[3]
  if redis.call('HGET', KEYS[2], member) ~= ARGV[1] then return 0 end
end
local t = redis.call('TIME')
local expiry = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2])
local before = tonumber(redis.call('ZSCORE', KEYS[1], member) or '0')
redis.call('ZADD', KEYS[1], expiry, member)
if expiry < before then return 2 end
return 1
""".replace("CURRENT", CURRENT)

# KEYS: marks, owners. Returns {now ms, {{member, owner, expiry ms}...}}: what the reaper looks at.
_MARKS = """
local t = redis.call('TIME')
local out = {}
local marks = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #marks, 2 do
  local owner = redis.call('HGET', KEYS[2], marks[i])
  if owner then table.insert(out, {marks[i], owner, marks[i + 1]}) end
end
return {t[1] * 1000 + math.floor(t[2] / 1000), out}
"""

# KEYS: stream, seq counter, tombstone, marks, owners, channel. ARGV: maxlen, ttl seconds, notify, owner, payload,
# turn. Ends an orphaned turn: only while its mark is still there and expired, so one replica wins.
# The mark of a dropped session's turn is removed without an event.
_REAP = """
local member = 'CURRENT'
if redis.call('HGET', KEYS[5], member) ~= ARGV[4] then
  member = 'aside:' .. ARGV[6]
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
if ARGV[3] == '1' then redis.call('SPUBLISH', KEYS[6], seq) end
return seq
""".replace("CURRENT", CURRENT)

# KEYS: stream, seq counter, tombstone, batch ids, marks, owners, channel. ARGV: tombstone ttl s, wake ttl s,
# notify. Deletes the log and leaves a tombstone that refuses appends. One entry after the last seq, marked
# `dropped`, ends every replica's readers of the session: their watch loop reads it like an event.
_DROP = """
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
redis.call('DEL', KEYS[1], KEYS[2], KEYS[4])
redis.call('SET', KEYS[3], '1', 'EX', ARGV[1])
redis.call('XADD', KEYS[1], (last + 1) .. '-0', 'dropped', '1')
redis.call('EXPIRE', KEYS[1], ARGV[2])
if redis.call('HGET', KEYS[6], 'CURRENT') then
  redis.call('ZREM', KEYS[5], 'CURRENT')
  redis.call('HDEL', KEYS[6], 'CURRENT')
end
if ARGV[3] == '1' then redis.call('SPUBLISH', KEYS[7], last + 1) end
return last
""".replace("CURRENT", CURRENT)

# The reaper's index, one bucket (KEYS: due zset session -> ms, generations hash) per slot.
# Before a turn opens: count a generation and look at the session no later than its mark's expiry.
_SCHEDULE = """
local t = redis.call('TIME')
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('ZADD', KEYS[1], 'LT', t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2]), ARGV[1])
return 1
"""

# The sessions due now (at most ARGV[1]), each with its generation.
_DUE = """
local t = redis.call('TIME')
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', t[1] * 1000 + math.floor(t[2] / 1000), 'LIMIT', 0, ARGV[1])
local out = {}
for _, sid in ipairs(due) do table.insert(out, {sid, redis.call('HGET', KEYS[2], sid) or '0'}) end
return out
"""

# After a look at the session: when to look next (ARGV[3] ms; 0: its marks are gone, forget it), unless a
# turn opened meanwhile (its generation moved on: the entry is due already, the next sweep looks again).
_RESCHEDULE = """
if (redis.call('HGET', KEYS[2], ARGV[1]) or '0') ~= ARGV[2] then return 0 end
if ARGV[3] == '0' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
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


class _LogKeys:
    """A session's keys in the event log, all in the session's slot (services/kit/redis_keys.py)."""

    __slots__ = ("batches", "channel", "dropped", "marks", "owners", "seq", "stream")

    def __init__(self, prefix: str, session_id: str):
        keys = SessionKeys(prefix, session_id)
        self.stream, self.seq, self.dropped = keys.key("events"), keys.key("events:seq"), keys.key("events:dropped")
        self.batches, self.marks = keys.key("events:batches"), keys.key("events:marks")
        self.owners, self.channel = keys.key("events:owners"), keys.key("events:news")


def _deliver(follower: _Follower, entries: Any) -> None:
    """Add the entries after the mirror's last seq to it; `drop`'s marker closes it."""
    fresh = [entry for entry in entries if _seq(entry[0]) > follower.mirror.last_seq]
    events = _decode(fresh)
    if events:
        follower.mirror.add(events)
    if len(events) < len(fresh):  # `drop`'s marker: the session is gone
        follower.mirror.close()


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
        wait: ReplicaWait | None = None,
    ):
        # A connection that a Redis restart closed fails its next command before Redis runs it:
        # retry that once on a fresh connection. Only on ConnectionError: after a timeout the
        # append may have run; a caller that retries it passes the same batch id.
        self._redis: Client = pooled_client(url, timeout_s, retry_timeouts=False, pool_size=pool_size)
        self._cluster = isinstance(self._redis, aioredis.RedisCluster)
        self._wait = wait  # after appends, reaps and drops: until that many replicas have them
        self._notify = "1" if self._cluster else ""  # scripts SPUBLISH to the session's channel for the shard watch
        self._append_script = self._redis.register_script(_APPEND)
        self._keep_script = self._redis.register_script(_KEEP)
        self._marks_script = self._redis.register_script(_MARKS)
        self._reap_script = self._redis.register_script(_REAP)
        self._drop_script = self._redis.register_script(_DROP)
        self._schedule_script = self._redis.register_script(_SCHEDULE)
        self._due_script = self._redis.register_script(_DUE)
        self._reschedule_script = self._redis.register_script(_RESCHEDULE)
        self.prefix, self.retention, self.ttl_s, self.dropped_ttl_s = (
            check_prefix(prefix),
            retention,
            ttl_s,
            dropped_ttl_s,
        )
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
        # Adding a session wakes the loop's XREAD through this replica's own stream.
        self._wake_key, self._wake_after = f"{prefix}events:wake:{uuid.uuid4().hex}", "0-0"
        self._waking: asyncio.Task[None] | None = None
        self._unwoken = False  # a session was added after the last wake was sent

    def _keys(self, session_id: str) -> _LogKeys:
        return _LogKeys(self.prefix, session_id)

    async def _write(self, script: AsyncScript, keys: list[str], args: Sequence[str | int | bytes]) -> Any:
        """Run a writing script, then wait for replicas when so configured (COGMESH_REDIS_WAIT_REPLICAS)."""
        if self._wait is None:
            return await script(keys=keys, args=args)
        return await eval_then_wait(self._redis, script, keys, list(args), self._wait)

    async def _redis_call(self, what: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except REDIS_ERRORS as exc:
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
        keys = self._keys(session_id)
        script_keys = [keys.stream, keys.seq, keys.dropped, keys.batches, keys.marks, keys.owners, keys.channel]
        if opened is not None:  # the reaper's index first: a mark is never without its entry
            await self._schedule(session_id, int(opened.mark_ttl_s * 1000))
        lost_owner, lost_payload = "", b""
        for _ in range(5):  # more than two rounds takes turns opening under one lease at once
            args: list[str | int | bytes] = [
                self.retention,
                self.ttl_s,
                self._notify,
                opened.owner if opened else "",
                int(opened.mark_ttl_s * 1000) if opened else 0,
                closed_turn(events),
                batch_id,
                lost_owner,
                lost_payload,
                *payloads,
            ]
            reply = await self._redis_call("append", self._write(self._append_script, script_keys, args))
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
        keys = self._keys(turn.session_id)
        ttl_ms = int(turn.mark_ttl_s * 1000)
        args: list[str | int] = [turn.owner, ttl_ms, turn.turn_id]
        kept = await self._redis_call("keep turn", self._keep_script(keys=[keys.marks, keys.owners], args=args))
        if kept == 2:
            await self._schedule(turn.session_id, ttl_ms)

    async def _schedule(self, session_id: str, ttl_ms: int) -> None:
        """Make the reaper's index look at the session within `ttl_ms` (or sooner, as it already would)."""
        due, gen = open_turn_bucket(self.prefix, session_id)
        await self._redis_call("open turn", self._schedule_script(keys=[due, gen], args=[session_id, ttl_ms]))

    async def expired_turns(self, limit: int = 100) -> list[OpenTurn]:
        """Turns whose driver stopped renewing their mark (by Redis's clock, which `reap` checks again).

        Looks at the sessions the index says are due: one whose marks are all live is looked at
        again when the first lapses, one with none left leaves the index.
        """
        buckets = open_turn_buckets(self.prefix)
        due: Any = await self._redis_call(
            "expired turns",
            asyncio.gather(*(self._due_script(keys=list(bucket), args=[limit]) for bucket in buckets)),
        )
        looks = [
            (bucket, sid.decode(), gen) for bucket, entries in zip(buckets, due, strict=True) for sid, gen in entries
        ]
        found = await self._redis_call(
            "expired turns", asyncio.gather(*(self._look(bucket, sid, gen) for bucket, sid, gen in looks[:limit]))
        )
        return [turn for turns in found for turn in turns][:limit]

    async def _look(self, bucket: tuple[str, str], session_id: str, gen: bytes) -> list[OpenTurn]:
        """The session's lapsed marks; sets when the index looks at the session next."""
        keys = self._keys(session_id)
        clock, marks = await self._marks_script(keys=[keys.marks, keys.owners])
        lapsed, live = [], []
        for _member, owner, expiry in marks:
            if int(float(expiry)) > clock:
                live.append(int(float(expiry)))
                continue
            turn_id, _, tenant_id = owner.decode().partition("/")
            lapsed.append(OpenTurn(session_id, turn_id, tenant_id))
        if not lapsed:  # due again when its first mark lapses; no marks: out of the index
            await self._reschedule_script(keys=list(bucket), args=[session_id, gen, min(live, default=0)])
        return lapsed

    async def reap(self, turn: OpenTurn, event: events_pb2.RuntimeEvent) -> bool:
        event.session_id, event.turn_id = turn.session_id, turn.turn_id
        if not event.HasField("create_time"):
            event.create_time.CopyFrom(now())
        keys = self._keys(turn.session_id)
        script_keys = [keys.stream, keys.seq, keys.dropped, keys.marks, keys.owners, keys.channel]
        args: list[str | int | bytes] = [self.retention, self.ttl_s, self._notify, turn.owner]
        args += [event.SerializeToString(), turn.turn_id]
        seq = await self._redis_call("reap", self._write(self._reap_script, script_keys, args))
        event.seq = int(seq)
        return bool(seq)

    async def last_seq(self, session_id: str) -> int:
        value = await self._redis_call("last_seq", self._redis.get(self._keys(session_id).seq))
        return int(value or 0)

    async def _head(self, session_id: str) -> tuple[int, int]:
        """The session's (last seq, first retained seq), in one round trip; NotFound once dropped."""
        keys = self._keys(session_id)
        pipe = self._redis.pipeline(transaction=False)
        pipe.get(keys.seq)
        pipe.xrange(keys.stream, count=1)
        pipe.exists(keys.dropped)
        value, head, gone = await self._redis_call("read", pipe.execute())
        if gone:
            raise session_gone(session_id)
        last = int(value or 0)
        return last, _seq(head[0][0]) if head else last + 1

    async def ends_with_turn_end(self, session_id: str) -> bool:
        entries = await self._redis_call("read", self._redis.xrevrange(self._keys(session_id).stream, count=1))
        ended = _decode(entries)
        return not ended or is_terminal(ended[0])  # empty, or dropped (its marker): nothing runs

    async def drop(self, session_id: str) -> None:
        keys = self._keys(session_id)
        script_keys = [keys.stream, keys.seq, keys.dropped, keys.batches, keys.marks, keys.owners, keys.channel]
        args: list[str | int] = [self.dropped_ttl_s, DROP_WAKE_S, self._notify]
        await self._redis_call("drop", self._write(self._drop_script, script_keys, args))
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
                    "replay", self._redis.xrange(self._keys(session_id).stream, f"{cursor + 1}-0", f"{stop}-0")
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
            stream, events = self._keys(session_id).stream, Batch()
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
                pipe.expire(self._wake_key, 60)  # a replica that died leaves nothing behind
                await pipe.execute()
        except REDIS_ERRORS as exc:  # the XREAD still ends within BLOCK_MS
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
        message = await pubsub.get_message(timeout=BLOCK_MS / 1000)
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
            message = await pubsub.get_message(timeout=0)
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
