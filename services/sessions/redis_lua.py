"""Lua scripts of the Redis session store: each store method is one script, so each is atomic.

Every script gets the session's keys (services/kit/redis_keys.py: all in the session's
cluster slot) through KEYS, in the order of `SESSION_KEYS`, then the key of the
session's identity; CREATE gets a second session's keys after them. ARGV = tenant, the
lease-free channel, session TTL (ms, 0 = none), session id, the clock's offset (ms, 0
but in tests), "1" when the store is on a cluster (scripts SPUBLISH the session's news
for the gateways' shard watch), then the script's own arguments (ARGV[7]...).

Times come from Redis (TIME), so every replica agrees on lease expiry. What spans
sessions lives in slots of its own and is kept by the store between scripts: a
tenant's index of sessions and its scope indexes, and the index of open turns (`open_turn_bucket`) that
ClaimOrphanedTurns searches.

The session's event log is a stream with one entry per append, whose id is `<seq>-0` of its last
event (field `e`: a lone serialized RuntimeEvent without its seq; or `n` events as a StoredEvents in
field `b`, their seqs running up to the id); the hash keeps the last seq (`eseq`) and the
lease, including whether its turn is open (accepted, not ended or paused: its lease
waits, held, for a takeover instead of running out), who runs it and how often it was
taken over. A turn's journal is `j` (field `<turn>` = entry count, `<turn>|<n>` =
`kind|seq|ms|state`), the order its turns were written in is `jt` (the hash names the last one,
`jlast`, and its entry count, `jn`, so a journal write needs no read). The hash remembers the last
appends with an id in a ring of fields `r0`..`r<n-1>` (`<last seq>|<append id>`, slot `ab` mod n, `ab`
counting the appends with an id): the append script reads them with the hash's other fields, so
telling a retried append costs no command. (Sessions written before the ring kept their ids in the
sorted set `events:batches`; an append looks there while the ring is empty.)

A session is alive until the hash's `expires_at` (by Redis's clock): a turn's end or pause sets it (the
TTL from then), as do writes outside a turn (`touch`); the turn's start and its writes leave it while it
outlasts the lease by half the TTL or more, else set it to the lease's end plus the TTL (`keep`). Redis
evicts the keys a little later: all at once, at `pexp` (kept in the hash), which `touch` moves to
`expires_at` plus a tenth of the TTL only when `expires_at` has passed it, so an active session's keys are
re-expired once per tenth of the TTL, not at every turn's end; a key a write creates gets `pexp` too. The
scripts read the hash's fields they need in one HMGET and write them in one HSET (`meta`, `put`, `flush`).

Replies are arrays whose first element is a status: "ok" or the name of a domain
error. Every script is safe to run twice (the client retries once on a dropped
connection): a create with the same id, an append with the same request id, an
acquire by the same turn, a consume with the same token all answer as the first did.
"""

from __future__ import annotations

from services.kit.redis_event_log import DROPPED_TTL_S
from services.sessions.model import JOURNALS_KEPT

# Scripts that write nothing (no WAIT after them; services/kit/redis_pool.py ReplicaWait).
READS = frozenset(
    {"GET", "LIST_MESSAGES", "LAST_MESSAGES", "LEASE_STATE", "LIST_GOALS", "GET_CHECKPOINT", "LIST_CHECKPOINTS"}
    | {"REHYDRATE", "JOURNAL", "LOG_STATE"}
)

# Scripts over no session, run without the PREAMBLE: the open-turn index.
BARE = frozenset({"SCHEDULE", "DUE", "DUE_ALL", "RESCHEDULE"})
READS = READS | {"DUE", "DUE_ALL"}

# Scripts that read Redis's clock only when they need it (`clock()`); every other session script has it as `now`.
CLOCK_ON_DEMAND = frozenset({"APPEND_EVENTS"})


def source(name: str) -> str:
    """The whole Lua source of the script `name`: its PREAMBLE (but for BARE ones), then its own."""
    body = str(globals()[name])
    if name in BARE:
        return body
    return PREAMBLE + ("" if name in CLOCK_ON_DEMAND else "local now = clock()\n") + body


# The names (services/kit/redis_keys.py SessionKeys) of a session's keys, in KEYS order; the identity key follows.
SESSION_KEYS = (
    *("s", "m", "g", "c", "co", "d", "x", "q", "w", "a", "al"),
    *("events", "events:batches", "j", "jt", "events:dropped", "events:news"),
)

# Keys that live and expire with the session (the tombstone and the channel do not; `events:batches`, written
# only before the ring of append ids, keeps the expiry it had).
_DATA_KEYS = ("s", "m", "g", "c", "co", "d", "a", "al", "events", "j", "jt")
ENTRY_EVENTS = 32  # events per stream entry at most: a reader that needs one entry's first seq reads no more
EXPIRY_SLACK = 10  # the keys outlive `expires_at` by up to TTL / EXPIRY_SLACK: re-expired once per that


# A tenant's index and its scope indexes (services/kit/redis_keys.py TenantKeys: one slot). Not session
# scripts. INDEX_ADD (KEYS = the index, its counter, the scope-of hash, then the session's scope indexes;
# ARGV = session id, how many of the oldest entries to return for a check, its scope as JSON): adds the
# session once, newest last, to the tenant's index and under the same score to each of its scope indexes;
# retried, it keeps its place. A scoped session that opens the tenant's index marks the tenant indexed
# ('*' = 'done'): no session older than it needs the backfill.
INDEX_ADD = r"""
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  if #KEYS > 3 and redis.call('ZCARD', KEYS[1]) == 0 then redis.call('HSET', KEYS[3], '*', 'done') end
  score = redis.call('INCR', KEYS[2])
  redis.call('ZADD', KEYS[1], score, ARGV[1])
end
if #KEYS > 3 then
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
  for i = 4, #KEYS do redis.call('ZADD', KEYS[i], score, ARGV[1]) end
end
return redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
"""

# INDEX_REMOVE (KEYS = the index, the scope-of hash, then every scope index the sessions are in;
# ARGV = session ids): the sessions leave every index of their tenant.
INDEX_REMOVE = r"""
redis.call('ZREM', KEYS[1], unpack(ARGV))
redis.call('HDEL', KEYS[2], unpack(ARGV))
for i = 3, #KEYS do redis.call('ZREM', KEYS[i], unpack(ARGV)) end
return 1
"""

# INDEX_BACKFILL (KEYS = the index, the scope-of hash, then scope indexes; ARGV = how far the backfill
# has gone (a score, or 'done'), then per session: id, scope JSON, n, the n positions in KEYS of its scope
# indexes): puts sessions listed before scope indexes existed into them, under their index scores. A
# session no longer listed is left out; progress never moves back from 'done'.
INDEX_BACKFILL = r"""
local i = 2
while i <= #ARGV do
  local sid, scope, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local score = redis.call('ZSCORE', KEYS[1], sid)
  if score then
    redis.call('HSET', KEYS[2], sid, scope)
    for j = 1, n do redis.call('ZADD', KEYS[tonumber(ARGV[i + 2 + j])], score, sid) end
  end
  i = i + 3 + n
end
if redis.call('HGET', KEYS[2], '*') ~= 'done' then redis.call('HSET', KEYS[2], '*', ARGV[1]) end
return 1
"""

# The index of open turns, one bucket (KEYS: due zset session -> ms, generations hash) per slot. An entry
# says when to look at a session; it is written before the turn opens, so an open turn always has one.
# SCHEDULE (ARGV: session, ms from now, clock offset): count a generation, look no later than then.
SCHEDULE = r"""
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('ZADD', KEYS[1], 'LT', now + tonumber(ARGV[2]), ARGV[1])
return 1
"""

# DUE (ARGV: how many, clock offset): the sessions to look at now, each with its generation. An empty bucket
# (no open turn hashes to it) is no key: one command says so.
DUE = r"""
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[1])
local out = {}
for _, sid in ipairs(due) do table.insert(out, {sid, redis.call('HGET', KEYS[2], sid) or '0'}) end
return out
"""

# DUE_ALL: DUE of every bucket in one call, where they all live on one Redis (not Cluster).
# KEYS: the buckets' (due, gen) pairs; ARGV as DUE's. Returns {bucket index (0-based), session, generation}.
# With no open turn anywhere (an idle suite) it is one EXISTS over every bucket.
DUE_ALL = r"""
local dues = {}
for b = 0, #KEYS / 2 - 1 do table.insert(dues, KEYS[2 * b + 1]) end
if redis.call('EXISTS', unpack(dues)) == 0 then return {} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
local out = {}
for b = 0, #KEYS / 2 - 1 do
  local due = redis.call('ZRANGEBYSCORE', KEYS[2 * b + 1], '-inf', now, 'LIMIT', 0, ARGV[1])
  for _, sid in ipairs(due) do table.insert(out, {b, sid, redis.call('HGET', KEYS[2 * b + 2], sid) or '0'}) end
end
return out
"""

# RESCHEDULE (ARGV: session, generation, when to look next in ms or 0 to forget it): after a look, unless
# the turn was scheduled again meanwhile (its generation moved on: the entry stays due, the next look sees).
RESCHEDULE = r"""
if (redis.call('HGET', KEYS[2], ARGV[1]) or '0') ~= ARGV[2] then return 0 end
if ARGV[3] == '0' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
"""

PREAMBLE = (
    r"""
local tenant, CHANNEL, ttl, sid = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local notify = ARGV[6] == '1'
-- One session's keys, from KEYS[at + 1].
local function keyset(at)
  return {{KEYSET}}
end
local K = keyset(0)
local KEYS_PER_SESSION = {KEYS_PER_SESSION}
local S, M, G, C, CO, D, X, Q, W = K.s, K.m, K.g, K.c, K.co, K.d, K.x, K.q, K.w
local EV, J, JT = K.events, K.j, K.jt
-- Redis's clock (ms, plus the tests' offset), read when a script first needs it: every script but the append
-- takes it as `now` at its start (redis_store.py); an append within its open turn needs none.
local NOW = nil
local function clock()
  if not NOW then
    local t = redis.call('TIME')
    NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[5])
  end
  return NOW
end
local BATCHES = K['events:batches']  -- append ids before the ring (`r0`...): read, never written

-- The session hash's fields the scripts read, in one HMGET (`meta()`, loaded once per script); `put` writes
-- fields (and keeps this copy in step), `flush` sends what `put` gathered as one HSET.
local FIELDS = {'tenant_id', 'expires_at', 'ikey', 'lease_turn', 'lease_token', 'lease_exp', 'int_by',
  'lease_open', 'holder', 'takeovers', 'lstart', 'llast', 'eseq', 'jseq', 'jlast', 'ab', 'lease_resume', 'mc',
  'deleg_turn', 'deleg_turns', 'jn', 'pexp'}
local H = nil
local PENDING = {}
local RING = 0  -- the ring of append ids `meta` also reads: the append script sets its size first
local function meta()
  if not H then
    H = {}
    local names = FIELDS
    if RING > 0 then
      names = {unpack(FIELDS)}
      for i = 0, RING - 1 do table.insert(names, 'r' .. i) end
    end
    local values = redis.call('HMGET', S, unpack(names))
    for i, name in ipairs(names) do H[name] = values[i] end
  end
  return H
end

local function put(...)
  local h = meta()
  local args = {...}
  for i = 1, #args, 2 do
    h[args[i]] = tostring(args[i + 1])
    table.insert(PENDING, args[i])
    table.insert(PENDING, args[i + 1])
  end
end

local function flush()
  if #PENDING > 0 then
    redis.call('HSET', S, unpack(PENDING))
    PENDING = {}
  end
end

-- The session exists, is the caller's tenant's, and has not idled out (Redis expiry evicts it, a moment later).
local function alive(k)
  local owner, expires
  if k.s == S then
    owner, expires = meta().tenant_id, meta().expires_at
  else
    local h = redis.call('HMGET', k.s, 'tenant_id', 'expires_at')
    owner, expires = h[1], h[2]
  end
  if not owner then return false end
  local exp = tonumber(expires or '0')
  return exp <= 0 or exp > clock(), owner
end

local function mine()
  local ok, owner = alive(K)
  return ok and owner == tenant
end

-- The lease, while it is held: until it expires, or, for an open turn, until another replica claims it.
-- Its holder is a turn (`lease_turn`) or a resume of it (`lease_resume`: the attempt's id). A lease written
-- before `lease_resume` existed has a resume's holder as '<turn>:resume:<attempt>' in `lease_turn`, which
-- the store reads back the same (services/kit/lease_holders.py); the scripts compare it as it is.
local function live_lease()
  local h = meta()
  if h.lease_turn and h.lease_turn ~= '' and (h.lease_open == '1' or tonumber(h.lease_exp) > clock()) then
    return {turn = h.lease_turn, resume = h.lease_resume or '', token = tonumber(h.lease_token),
      exp = tonumber(h.lease_exp),
      int_by = h.int_by or '', open = h.lease_open == '1', holder = h.holder or '',
      takeovers = tonumber(h.takeovers or '0'), start = tonumber(h.lstart or '0'), last = tonumber(h.llast or '0')}
  end
  return nil
end

local function lease_reply(status, l)
  return {status, l.turn, l.token, l.exp, l.int_by, l.holder, l.takeovers, l.resume}
end

local function fenced(token)
  if token == 0 then return true end
  local l = live_lease()
  return l ~= nil and l.token == token
end

local function free_lease()
  put('lease_turn', '', 'lease_resume', '', 'lease_exp', 0, 'int_by', '', 'lease_open', '', 'holder', '',
    'takeovers', 0)
  redis.call('PUBLISH', CHANNEL, sid)
end

-- Keys a write created while the session's keys keep the expiry they have (`keep`): they get it too.
local NEW = {}

-- Set the session's expiry, on every one of its keys: `session_ttl` past now, or past the end of the lease
-- when one is held (a turn never outlives its session's keys). Run when a turn ends or pauses and by writes
-- outside a turn; a turn's start and its writes `keep` it.
local function touch()
  local h = meta()
  local now = clock()
  local function named()  -- the session its identity names
    return h.ikey == '1' and redis.call('GET', K.i) == sid
  end
  if ttl <= 0 then
    if h.expires_at == '0' then  -- already kept forever
      put('updated_at', now)
      flush()
      return
    end
    put('updated_at', now, 'expires_at', 0, 'pexp', 0)
    flush()
    for _, k in ipairs({{DATA_KEYS}}) do redis.call('PERSIST', k) end
    if named() then redis.call('PERSIST', K.i) end
    return
  end
  local exp = now + ttl
  local l = live_lease()
  if l and l.exp + ttl > exp then exp = l.exp + ttl end
  put('updated_at', now, 'expires_at', exp)
  -- Redis expires by its own clock: the offset (tests only) moves the logical expiry, not Redis's. The keys
  -- keep the eviction time they have while it falls within a tenth of the TTL after `expires_at`.
  local at = exp - tonumber(ARGV[5])
  local evict = tonumber(h.pexp or '0')
  if evict >= at and evict <= at + math.floor(ttl / EXPIRY_SLACK) then
    flush()
    for _, k in ipairs(NEW) do redis.call('PEXPIREAT', k, evict) end
    NEW = {}
    return
  end
  evict = at + math.floor(ttl / EXPIRY_SLACK)
  put('pexp', evict)
  flush()
  for _, k in ipairs({{DATA_KEYS}}) do redis.call('PEXPIREAT', k, evict) end
  if named() then redis.call('PEXPIREAT', K.i, evict) end
  NEW = {}
end

-- A turn's start (lease granted or claimed) and its writes: the session's keys keep their expiry while it
-- outlasts the lease by half the session TTL or more, else `touch` sets it (so a turn's first write after an
-- idle spell, or a renewal hours into a turn); a key this write created (`NEW`) gets that expiry too.
-- Outside a lease, or when the TTL setting changed, `touch`.
local function keep()
  local h = meta()
  local l = live_lease()
  local exp = tonumber(h.expires_at or '0')
  if not l or not h.expires_at or (ttl <= 0) ~= (exp == 0) then
    touch()
    return
  end
  -- An open turn's lease outlives `now` unless the turn is being taken over: its end is what counts then.
  local from = l.exp
  if not l.open then from = math.max(l.exp, clock()) end
  if ttl > 0 and exp - from < ttl / 2 then
    touch()
    return
  end
  flush()
  if ttl > 0 then
    local at = tonumber(h.pexp or '0')
    if at <= 0 then at = exp - tonumber(ARGV[5]) end  -- a session written before `pexp`
    for _, k in ipairs(NEW) do redis.call('PEXPIREAT', k, at) end
  end
  NEW = {}
end

local function pending_ids(cname, coname, dname)
  local out = {}
  for _, id in ipairs(redis.call('ZRANGE', coname, 0, -1)) do
    if redis.call('HEXISTS', dname, id) == 0 then table.insert(out, id) end
  end
  return out
end

-- The turn first in the session's queue ('' when none waits); waiters whose replica stopped polling lose
-- their place.
local function queue_head()
  local hearts = redis.call('HGETALL', W)
  for i = 1, #hearts, 2 do
    if tonumber(hearts[i + 1]) <= clock() then
      redis.call('HDEL', W, hearts[i])
      redis.call('ZREM', Q, hearts[i])
    end
  end
  while true do
    local first = redis.call('ZRANGE', Q, 0, 0)
    if #first == 0 then return '' end
    if redis.call('HEXISTS', W, first[1]) == 1 then return first[1] end
    redis.call('ZREM', Q, first[1])
  end
end

-- A stored checkpoint's fields (its blob: id, turn, kind, request, payload).
local function checkpoint_of(stored)
  return cjson.decode(string.match(stored, '^%d+|%-?%d+|(.*)$'))
end

-- The session as the store reports it: its hash plus what is derived at read time.
local function view_of(k)
  local l_turn = ''
  if k.s == S then
    flush()
    local l = live_lease()
    if l then l_turn = l.turn end
  else
    local l = redis.call('HMGET', k.s, 'lease_turn', 'lease_exp', 'lease_open')
    if l[1] and l[1] ~= '' and (l[3] == '1' or tonumber(l[2]) > clock()) then l_turn = l[1] end
  end
  return {redis.call('HGETALL', k.s), redis.call('LLEN', k.m), l_turn, pending_ids(k.c, k.co, k.d)}
end

local function view()
  return view_of(K)
end

-- The last seq of the session's log.
local function last_seq()
  return tonumber(meta().eseq or '0')
end

-- Append messages; the count after them, also kept in the hash (`mc`) so that a write can answer it
-- without an LLEN.
local function push_messages(first, last)
  local count = redis.call('RPUSH', M, unpack(ARGV, first, last))
  if count == last - first + 1 then table.insert(NEW, M) end  -- the session's first messages
  put('mc', count)
  return count
end

-- The session's message count: from the hash, or (a session written before `mc`) from the list.
local function message_count()
  local mc = meta().mc
  if mc then return tonumber(mc) end
  local count = redis.call('LLEN', M)
  put('mc', count)  -- kept from here on (the script's next flush writes it)
  return count
end

-- Forget the journals of all but the last JOURNALS_KEPT turns, keeping an open or paused turn's.
-- `turns`: how many turns the journal holds (ZCARD of JT).
local function forget_journals(turns)
  if turns <= JOURNALS_KEPT then return end
  local keep = {}
  for _, stored in ipairs(redis.call('HVALS', C)) do
    local blob = string.match(stored, '^%d+|%-?%d+|(.*)$')
    if blob then keep[cjson.decode(blob)['turn']] = true end
  end
  local held = meta().lease_turn or ''
  if held ~= '' then keep[held] = true end
  local ended = {}
  for _, turn in ipairs(redis.call('ZRANGE', JT, 0, -1)) do
    if not keep[turn] then table.insert(ended, turn) end
  end
  for i = 1, #ended - JOURNALS_KEPT do
    local turn = ended[i]
    local count = tonumber(redis.call('HGET', J, turn) or '0')
    local fields = {turn}
    for n = 1, count do table.insert(fields, turn .. '|' .. n) end
    redis.call('HDEL', J, unpack(fields))
    redis.call('ZREM', JT, turn)
  end
end

-- Log events and journal entries read from ARGV[at]: n, then the events as k stream entries (k, then k x (a
-- lone event's payload, or up to ENTRY_EVENTS events' StoredEvents encoding), each entry's id its last event's
-- seq), m, m x (kind, position, state), then what the events change in the session: e, e x (name, value)
-- (model.effects_of: 'active_agent', 'plan', and 'delegated', which counts the turn in `deleg_turns` once).
-- Returns the last seq and the index of the ARGV after them (`after_log`). The session's fields it sets go out
-- with the script's next `flush`; the keys it creates are in NEW.
local function after_log(at)
  local k = tonumber(ARGV[at + 1])
  local q = at + 3 + k + 3 * tonumber(ARGV[at + 2 + k])
  return q + 1 + 2 * tonumber(ARGV[q])
end

local function log_events(turn, at, retention)
  local n, k = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local first = last_seq() + 1
  local last = first + n - 1
  if n > 0 and first == 1 then table.insert(NEW, EV) end  -- the session's first event makes its stream
  for i = 1, k do
    local size = math.min(ENTRY_EVENTS, n - (i - 1) * ENTRY_EVENTS)
    local id = (first - 1 + (i - 1) * ENTRY_EVENTS + size) .. '-0'
    if size == 1 then
      redis.call('XADD', EV, 'MAXLEN', retention, id, 'e', ARGV[at + 1 + i])
    else
      redis.call('XADD', EV, 'MAXLEN', retention, id, 'n', size, 'b', ARGV[at + 1 + i])
    end
  end
  if n > 0 then put('eseq', last) end
  local m = tonumber(ARGV[at + 2 + k])
  local p = at + 3 + k
  if m > 0 then
    local count = tonumber(meta().jn or '0')
    if meta().jlast ~= turn or not meta().jn then count = tonumber(redis.call('HGET', J, turn) or '0') end
    local entries = {}
    for i = 0, m - 1 do
      local kind, position, state = ARGV[p + 3 * i], tonumber(ARGV[p + 3 * i + 1]), ARGV[p + 3 * i + 2]
      count = count + 1
      local seq = first - 1 + math.min(position, n)
      table.insert(entries, turn .. '|' .. count)
      table.insert(entries, kind .. '|' .. seq .. '|' .. clock() .. '|' .. state)
    end
    redis.call('HSET', J, turn, count, unpack(entries))
    put('jn', count)
    -- The most recently written turn goes last (it is already, when it wrote the journal's last entry).
    if meta().jlast ~= turn then
      local jseq = tonumber(meta().jseq or '0') + 1
      put('jseq', jseq, 'jlast', turn)
      if redis.call('ZADD', JT, jseq, turn) == 1 then
        local turns = redis.call('ZCARD', JT)
        if turns == 1 then  -- the journal's first turn made both keys
          table.insert(NEW, J)
          table.insert(NEW, JT)
        end
        forget_journals(turns)
      end
    end
  end
  local q = p + 3 * m
  local e = tonumber(ARGV[q])
  for i = 1, e do
    local name, value = ARGV[q + 2 * i - 1], ARGV[q + 2 * i]
    if name ~= 'delegated' then
      put(name, value)
    elseif meta().deleg_turn ~= turn then
      put('deleg_turns', tonumber(meta().deleg_turns or '0') + 1, 'deleg_turn', turn)
    end
  end
  if notify and n > 0 then redis.call('SPUBLISH', K['events:news'], last) end
  return last, q + 1 + 2 * e
end

-- `wake_s`: how long the marker stays (redis_event_log.DROP_WAKE_S).
local function delete_session(wake_s)
  if meta().ikey == '1' and redis.call('GET', K.i) == sid then redis.call('DEL', K.i) end
  -- Readers of its log on every gateway end at the marker after its last seq; the tombstone refuses more.
  local last = last_seq()
  redis.call('DEL', S, M, G, C, CO, D, X, Q, W, K.a, K.al, EV, BATCHES, J, JT)
  H, PENDING = nil, {}
  redis.call('SET', K['events:dropped'], '1', 'EX', DROPPED_TTL_S)
  redis.call('XADD', EV, (last + 1) .. '-0', 'dropped', '1')
  redis.call('EXPIRE', EV, wake_s)
  if notify then redis.call('SPUBLISH', K['events:news'], last + 1) end
  redis.call('PUBLISH', CHANNEL, sid)
end
""".replace(
        "{KEYSET}",
        ", ".join(f"[{name!r}] = KEYS[at + {i + 1}]" for i, name in enumerate(SESSION_KEYS))
        + f", i = KEYS[at + {len(SESSION_KEYS) + 1}]",
    )
    .replace("{DATA_KEYS}", ", ".join(f"K[{name!r}]" for name in _DATA_KEYS))
    .replace("{KEYS_PER_SESSION}", str(len(SESSION_KEYS) + 1))
    .replace("JOURNALS_KEPT", str(JOURNALS_KEPT))
    .replace("EXPIRY_SLACK", str(EXPIRY_SLACK))
    .replace("ENTRY_EVENTS", str(ENTRY_EVENTS))
    .replace("DROPPED_TTL_S", str(DROPPED_TTL_S))
)

CREATE = r"""
local user, topic, agent, role, skills, config, delegated_from, identity, reuse, expected, scope =
  ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14], ARGV[15], ARGV[16], ARGV[17]
if reuse == '1' and identity == '1' then
  local existing = redis.call('GET', K.i) or ''
  if existing == sid and mine() then return {'ok', sid, view()} end  -- a retried create
  if existing ~= expected then return {'moved'} end  -- the identity changed since the store read it
  if existing ~= '' then
    local E = keyset(KEYS_PER_SESSION)  -- the keys of `expected`
    if redis.call('HGET', E.s, 'tenant_id') == tenant then return {'reused', existing, view_of(E)} end
  end
end
if redis.call('EXISTS', S) == 1 then
  if mine() then return {'ok', sid, view()} end  -- a retried create
  return {'collision'}
end
redis.call('HSET', S, 'session_id', sid, 'tenant_id', tenant, 'user_id', user, 'topic_id', topic,
  'agent', agent, 'role_id', role, 'skills', skills, 'prompt_hash', '', 'config', config,
  'deleg_from', delegated_from, 'deleg_count', 0, 'created_at', now, 'last_token', 0, 'ikey', identity,
  'scope', scope)
H = nil  -- written above: `meta()` reads it again
if identity == '1' then redis.call('SET', K.i, sid) end  -- the newest session answers for its identity
touch()
return {'ok', sid, view()}
"""

GET = r"""
if not mine() then return {'not_found'} end
return {'ok', view()}
"""

UPDATE = r"""
local token = tonumber(ARGV[7])
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
if #ARGV > 7 then put(unpack(ARGV, 8)) end
touch()
return {'ok', view()}
"""

DELETE = r"""
if not mine() then return {'not_found'} end
delete_session(tonumber(ARGV[7]))
return {'ok'}
"""

CLOSE = r"""
local user, wake_s = ARGV[7], tonumber(ARGV[8])
if not mine() then return {'not_found'} end
if user ~= '' and redis.call('HGET', S, 'user_id') ~= user then return {'kept'} end
delete_session(wake_s)
return {'ok'}
"""

APPEND = r"""
local token, request_id, remember = tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9])
if not mine() then return {'not_found'} end
local l = live_lease()
if not l or l.token ~= token then return {'stale'} end
local A, AL = K.a, K.al  -- recent request ids -> count after them, and their order
if request_id ~= '' then
  local seen = redis.call('HGET', A, request_id)
  if seen then return {'duplicate', tonumber(seen)} end
end
local count = push_messages(10, #ARGV)
if request_id ~= '' then
  redis.call('HSET', A, request_id, count)
  local remembered = redis.call('RPUSH', AL, request_id)
  if remembered == 1 then  -- the first request id made both keys
    table.insert(NEW, A)
    table.insert(NEW, AL)
  end
  if remembered > remember then redis.call('HDEL', A, redis.call('LPOP', AL)) end
end
keep()
return {'ok', count}
"""

LIST_MESSAGES = r"""
local offset, limit = tonumber(ARGV[7]), tonumber(ARGV[8])
if not mine() then return {'not_found'} end
return {'ok', redis.call('LLEN', M), redis.call('LRANGE', M, offset, offset + limit - 1)}
"""

LAST_MESSAGES = r"""
local n = tonumber(ARGV[7])
if not mine() then return {'not_found'} end
if n <= 0 then return {'ok', {}} end
return {'ok', redis.call('LRANGE', M, -n, -1)}
"""

TRY_ACQUIRE = r"""
-- ARGV[12]: the resume attempt ('' for a turn that starts); ARGV[13..]: the opening (events and journal
-- entries, as log_events reads them), then the log's retention.
local turn, lease_ms, strategy, waiter_ms, base, resume =
  ARGV[7], tonumber(ARGV[8]), ARGV[9], tonumber(ARGV[10]), tonumber(ARGV[11]), ARGV[12]
if not mine() then return {'not_found'} end
local l = live_lease()
if l and l.turn == turn and l.resume == resume and l.takeovers == 0 then  -- a retried acquire: the same grant
  return {'acquired', l.token, l.exp, pending_ids(C, CO, D), l.start, l.last}
end
local head = queue_head()
if not l and (head == '' or head == turn) then
  redis.call('ZREM', Q, turn)
  redis.call('HDEL', W, turn)
  local token = redis.call('HINCRBY', S, 'last_token', 1)
  local start, last, open = last_seq(), 0, ''
  local pending = pending_ids(C, CO, D)
  local opening = tonumber(ARGV[13]) > 0 or tonumber(ARGV[15 + tonumber(ARGV[14])]) > 0
  if opening and #pending == 0 then  -- a paused turn still waits for its answer: nothing opens
    local retention = ARGV[#ARGV]
    last = log_events(turn, 13, retention)
    open = '1'
  end
  put('lease_turn', turn, 'lease_resume', resume, 'lease_token', token, 'lease_exp', now + lease_ms, 'int_by', '',
    'lease_open', open, 'holder', '', 'takeovers', 0, 'lstart', start, 'llast', last)
  keep()  -- the turn starts: its session's keys outlive its lease by half the TTL at least
  return {'acquired', token, now + lease_ms, pending, start, last}
end
local holder = head
if l then holder = l.turn end
if strategy == 'reject' then return {'held', holder} end
if not redis.call('ZSCORE', Q, turn) then
  redis.call('ZADD', Q, base + redis.call('HINCRBY', S, 'queue_seq', 1), turn)
end
redis.call('HSET', W, turn, now + waiter_ms)
redis.call('PEXPIRE', Q, waiter_ms * 4)
redis.call('PEXPIRE', W, waiter_ms * 4)
if strategy == 'interrupt' and l and l.int_by == '' then redis.call('HSET', S, 'int_by', turn) end
if l then return {'queued', l.turn, l.exp} end
return {'queued', '', 0}
"""

LEAVE_QUEUE = r"""
local turn = ARGV[7]
if not mine() then return {'not_found'} end
redis.call('ZREM', Q, turn)
redis.call('HDEL', W, turn)
if redis.call('HGET', S, 'int_by') == turn then redis.call('HSET', S, 'int_by', '') end
redis.call('PUBLISH', CHANNEL, sid)
return {'ok'}
"""

# RENEW: extend the held lease and record who runs the turn; hand-over ('1') expires it at once, still open.
RENEW = r"""
local token, lease_ms, holder, hand_over = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9], ARGV[10] == '1'
if not mine() then return {'not_found'} end
local l = live_lease()
if not l or l.token ~= token then return {'stale'} end
if hand_over then
  l.exp, l.holder = now, ''
elseif holder ~= '' then
  l.exp, l.holder = now + lease_ms, holder
else
  l.exp = now + lease_ms
end
put('lease_exp', l.exp, 'holder', l.holder)
keep()
return lease_reply('ok', l)
"""

RELEASE = r"""
local token = tonumber(ARGV[7])
if not mine() then return {'not_found'} end
local l = live_lease()
if not l or l.token ~= token then return {'ok', 0} end
free_lease()
touch()
return {'ok', 1}
"""

LEASE_STATE = r"""
if not mine() then return {'not_found'} end
local queued = {}
for _, turn in ipairs(redis.call('ZRANGE', Q, 0, -1)) do
  local heart = redis.call('HGET', W, turn)
  if heart and tonumber(heart) > now then table.insert(queued, turn) end
end
local l = live_lease()
if not l then return {'ok', queued} end
return {'ok', queued, lease_reply('held', l)}
"""

# ARGV: token, turn, append id, how many append ids to remember, release ('1'), the events and journal
# entries (log_events), the messages (count, payloads), the pause (interrupt id, checkpoint blob, max pending;
# '' when none), the checkpoint to consume (interrupt id, or ''; how long the consume is remembered, ms), the
# writing runtime replica ('' keeps the lease's holder), the log's retention. Logs everything or nothing,
# fenced by the lease; the consume is CONSUME_CHECKPOINT's with allow_undecided.
APPEND_EVENTS = r"""
local token, turn, append_id, remember, release = tonumber(ARGV[7]), ARGV[8], ARGV[9], tonumber(ARGV[10]),
  ARGV[11] == '1'
if append_id ~= '' then RING = remember end  -- the ring of the last append ids comes with the hash's fields
-- The caller's session, alive: within the open turn this append's token holds, that needs no clock (the turn's
-- writes keep the session alive half a TTL past its lease, and a lapsed open lease is taken over long before).
local h = meta()
local within = h.lease_open == '1' and h.lease_turn ~= '' and tonumber(h.lease_token) == token
if not (within and h.tenant_id == tenant) and not mine() then return {'not_found'} end
-- A retried append that landed: its id is in the ring, with the seq it ended at. Only a landed append
-- writes its id (at the end), so a refused one leaves nothing to let go.
if append_id ~= '' then
  local seen = false
  for i = 0, remember - 1 do
    local entry = H['r' .. i]
    if entry then
      seen = true
      local seq, id = string.match(entry, '^(%d+)|(.*)$')
      if id == append_id then return {'duplicate', tonumber(seq), message_count()} end
    end
  end
  if not seen and meta().ab then  -- ids written before the ring
    local seq = redis.call('ZSCORE', BATCHES, append_id)
    if seq then return {'duplicate', tonumber(seq), message_count()} end
  end
end
local l = live_lease()
if not l or l.token ~= token then return {'stale'} end
-- Where the messages and the pause start: past the events, journal entries and the session's changes.
local at = after_log(12)
local k = tonumber(ARGV[at])
local pause_id, pause_blob, max_pending = ARGV[at + k + 1], ARGV[at + k + 2], tonumber(ARGV[at + k + 3] or '0')
local consume_id, consume_ms = ARGV[at + k + 4], tonumber(ARGV[at + k + 5] or '0')
local consumed = nil  -- the checkpoint taken: {stored, decided}
if consume_id ~= '' then
  local done = redis.call('HGET', X, consume_id .. ':meta')
  local until_ms, by = string.match(done or '', '^(%d+)|(%d+)$')
  if not (until_ms and tonumber(until_ms) > clock() and tonumber(by) == token) then  -- else this lease took it
    local stored = redis.call('HGET', C, consume_id)
    if not stored then return {'no_checkpoint'} end
    local owner = checkpoint_of(stored)['turn']
    if owner ~= turn then return {'other_turn', owner} end
    consumed = {stored, redis.call('HGET', D, consume_id) or ''}
  end
end
if pause_id ~= '' then
  if redis.call('HEXISTS', C, pause_id) == 1 then return {'exists'} end
  if redis.call('HLEN', C) - redis.call('HLEN', D) >= max_pending then return {'limit'} end
end
local last = log_events(turn, 12, ARGV[#ARGV])
local count = nil
if k > 0 then count = push_messages(at + 1, at + k) end
if consumed then
  redis.call('HDEL', C, consume_id)
  redis.call('HDEL', D, consume_id)
  redis.call('ZREM', CO, consume_id)
  redis.call('HSET', X, consume_id .. ':meta', (clock() + consume_ms) .. '|' .. token, consume_id .. ':c', consumed[1],
    consume_id .. ':d', consumed[2])
  redis.call('PEXPIRE', X, consume_ms)
end
if pause_id ~= '' then
  redis.call('HSET', C, pause_id, clock() .. '|' .. token .. '|' .. pause_blob)
  redis.call('ZADD', CO, redis.call('HINCRBY', S, 'ck_seq', 1), pause_id)
end
if append_id ~= '' then
  -- `ab` counts the session's appends with an id; this one takes the ring's oldest slot.
  local appends = tonumber(meta().ab or '0') + 1
  put('ab', appends, 'r' .. (appends % remember), last .. '|' .. append_id)
end
count = count or message_count()  -- before the flush below: a count read from the list is kept
if release or pause_id ~= '' then
  free_lease()
  touch()  -- the turn ends (or pauses): its session lives `session_ttl` from now
else
  put('lease_open', '1')
  if ARGV[#ARGV - 1] ~= '' then put('holder', ARGV[#ARGV - 1]) end  -- who writes
  keep()
end
return {'ok', last, count}
"""

JOURNAL = r"""
local turn = ARGV[7]
if not mine() then return {'not_found'} end
local count = tonumber(redis.call('HGET', J, turn) or '0')
if count == 0 then return {'ok', {}} end
local fields = {}
for n = 1, count do table.insert(fields, turn .. '|' .. n) end
return {'ok', redis.call('HMGET', J, unpack(fields))}
"""

# The log's last seq, its first retained seq (as an entry id) and its last entry's fields (the store decodes them).
LOG_STATE = r"""
if not mine() then return {'not_found'} end
local head = redis.call('XRANGE', EV, '-', '+', 'COUNT', 1)
local tail = redis.call('XREVRANGE', EV, '+', '-', 'COUNT', 1)
local first, last_fields = '', {}
if #head > 0 then  -- an entry of several events starts `n - 1` before its id
  first = head[1][1]
  if head[1][2][1] == 'n' then
    first = (tonumber(string.match(first, '^(%d+)')) - tonumber(head[1][2][2]) + 1) .. '-0'
  end
end
if #tail > 0 then last_fields = tail[1][2] end
return {'ok', last_seq(), first, last_fields}
"""

# ARGV: holder, lease ms. Not a tenant's call: the runtime replica asks for any orphaned turn. Claims the
# session's open turn whose lease expired; otherwise says when to look again ('live') or that there is
# nothing to look for ('closed').
CLAIM = r"""
local holder, lease_ms = ARGV[7], tonumber(ARGV[8])
local ok, owner = alive(K)
if not ok then return {'closed'} end
local l = live_lease()
if not l or not l.open then return {'closed'} end
if l.exp > now then return {'live', l.exp} end
local token = redis.call('HINCRBY', S, 'last_token', 1)
put('lease_token', token, 'lease_exp', now + lease_ms, 'holder', holder, 'takeovers', l.takeovers + 1)
keep()  -- the turn starts again: its session's keys outlive the new lease by half the TTL at least
return {'claimed', owner, l.turn, token, l.takeovers + 1, last_seq(), now + lease_ms, l.holder, l.int_by,
  l.resume}
"""

# ARGV: turn ('' for whichever runs, a resume of it included), requested by. Asks the turn's runtime to stop.
INTERRUPT_TURN = r"""
local turn, by = ARGV[7], ARGV[8]
if not mine() then return {'not_found'} end
local l = live_lease()
if not l or (turn ~= '' and l.turn ~= turn) then return {'ok'} end
if l.int_by == '' then
  l.int_by = by
  redis.call('HSET', S, 'int_by', by)
end
return lease_reply('ok', l)
"""

UPDATE_SUMMARY = r"""
local token, text, covered = tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9])
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
local count = message_count()
if covered > count then return {'invalid', count} end
put('summary_text', text, 'summary_covered', covered, 'summary_at', now)
touch()
return {'ok', now}
"""

SAVE_GOAL = r"""
local token, goal_id, blob, max_goals = tonumber(ARGV[7]), ARGV[8], ARGV[9], tonumber(ARGV[10])
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
local old = redis.call('HGET', G, goal_id)
local created = now
if old then
  created = tonumber(string.match(old, '^(%d+)|'))
elseif redis.call('HLEN', G) >= max_goals then
  return {'limit'}
end
redis.call('HSET', G, goal_id, created .. '|' .. now .. '|' .. blob)
touch()
return {'ok', created, now}
"""

LIST_GOALS = r"""
if not mine() then return {'not_found'} end
return {'ok', redis.call('HVALS', G)}
"""

SET_PHASE = r"""
local token, blob = tonumber(ARGV[7]), ARGV[8]
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
put('phase', blob, 'phase_at', now)
touch()
return {'ok', now}
"""

WRITE_CHECKPOINT = r"""
local token, id, blob, max_pending = tonumber(ARGV[7]), ARGV[8], ARGV[9], tonumber(ARGV[10])
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
local old = redis.call('HGET', C, id)
if old then
  if string.match(old, '^%d+|%d+|(.*)$') == blob then return {'ok', old} end  -- a retried write
  return {'exists'}
end
if redis.call('HLEN', C) - redis.call('HLEN', D) >= max_pending then return {'limit'} end
local stored = now .. '|' .. token .. '|' .. blob
redis.call('HSET', C, id, stored)
redis.call('ZADD', CO, redis.call('HINCRBY', S, 'ck_seq', 1), id)
touch()
return {'ok', stored}
"""

GET_CHECKPOINT = r"""
local id = ARGV[7]
if not mine() then return {'not_found'} end
local stored = redis.call('HGET', C, id)
if not stored then return {'no_checkpoint'} end
return {'ok', stored, redis.call('HGET', D, id) or ''}
"""

LIST_CHECKPOINTS = r"""
if not mine() then return {'not_found'} end
local out = {}
for _, id in ipairs(redis.call('ZRANGE', CO, 0, -1)) do
  table.insert(out, {redis.call('HGET', C, id), redis.call('HGET', D, id) or ''})
end
return {'ok', out}
"""

DECIDE_CHECKPOINT = r"""
local id, blob = ARGV[7], ARGV[8]
if not mine() then return {'not_found'} end
local stored = redis.call('HGET', C, id)
if not stored then return {'no_checkpoint'} end
local decided = redis.call('HGET', D, id)
if decided then
  if string.match(decided, '^%d+|(.*)$') == blob then return {'ok', stored, decided} end
  return {'conflict'}
end
decided = now .. '|' .. blob
redis.call('HSET', D, id, decided)
touch()
return {'ok', stored, decided}
"""

CONSUME_CHECKPOINT = r"""
local token, id, allow_undecided, keep_ms = tonumber(ARGV[7]), ARGV[8], ARGV[9], tonumber(ARGV[10])
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
local done = redis.call('HGET', X, id .. ':meta')
if done then
  local until_ms, by = string.match(done, '^(%d+)|(%d+)$')
  if tonumber(until_ms) > now and tonumber(by) == token then  -- a retried consume
    return {'ok', redis.call('HGET', X, id .. ':c'), redis.call('HGET', X, id .. ':d')}
  end
end
local stored = redis.call('HGET', C, id)
if not stored then return {'no_checkpoint'} end
local decided = redis.call('HGET', D, id) or ''
if decided == '' and allow_undecided ~= '1' then return {'undecided'} end
redis.call('HDEL', C, id)
redis.call('HDEL', D, id)
redis.call('ZREM', CO, id)
redis.call('HSET', X, id .. ':meta', (now + keep_ms) .. '|' .. token, id .. ':c', stored, id .. ':d', decided)
redis.call('PEXPIRE', X, keep_ms)
touch()
return {'ok', stored, decided}
"""

# ARGV: interrupt id, the kind of pause the decision answers, the decision (base64, '' with none), '1' when
# there is a decision, '1' to abandon, the resume's attempt id, lease ms. Records the decision (the first
# wins; the same again is accepted), then takes the lease for the resume (the same grant for a retry of the
# attempt), and reads the turn's journal: DECIDE_CHECKPOINT, TRY_ACQUIRE and JOURNAL in one step. A lease
# held by another ('held': its turn, '1' when it resumes this very turn) leaves the decision recorded.
ANSWER_PAUSE = r"""
local id, kind, blob, has_decision, abandon, resume, lease_ms =
  ARGV[7], ARGV[8], ARGV[9], ARGV[10] == '1', ARGV[11] == '1', ARGV[12], tonumber(ARGV[13])
if not mine() then return {'not_found'} end
local stored = redis.call('HGET', C, id)
if not stored then return {'no_checkpoint'} end
local checkpoint = checkpoint_of(stored)
local turn = checkpoint['turn']
local decided = redis.call('HGET', D, id)
local recorded = false
if has_decision then
  if checkpoint['kind'] ~= kind then return {'misfit', checkpoint['kind']} end
  if decided then
    if string.match(decided, '^%d+|(.*)$') ~= blob then return {'conflict', decided} end
  else
    decided = now .. '|' .. blob
    redis.call('HSET', D, id, decided)
    recorded = true
  end
elseif not decided and not abandon then
  return {'undecided'}
end
local l = live_lease()
if not (l and l.turn == turn and l.resume == resume and l.takeovers == 0) then  -- else a retry: the same grant
  local head = queue_head()
  if l or head ~= '' then
    if recorded then touch() end
    if l then
      local resuming = ''
      if l.turn == turn and l.resume ~= '' then resuming = '1' end
      return {'held', l.turn, resuming}
    end
    return {'held', head, ''}
  end
  local token = redis.call('HINCRBY', S, 'last_token', 1)
  put('lease_turn', turn, 'lease_resume', resume, 'lease_token', token, 'lease_exp', now + lease_ms, 'int_by', '',
    'lease_open', '', 'holder', '', 'takeovers', 0, 'lstart', last_seq(), 'llast', 0)
  if recorded then touch() else keep() end  -- the resume starts: the keys outlive its lease
  l = live_lease()
end
local count = tonumber(redis.call('HGET', J, turn) or '0')
local entries = {}
if count > 0 then
  local fields = {}
  for n = 1, count do table.insert(fields, turn .. '|' .. n) end
  entries = redis.call('HMGET', J, unpack(fields))
end
return {'ok', stored, decided or '', l.token, l.start, entries}
"""

REHYDRATE = r"""
local n = tonumber(ARGV[7])
if not mine() then return {'not_found'} end
local last = {}
if n > 0 then last = redis.call('LRANGE', M, -n, -1) end
return {'ok', view(), last, redis.call('HVALS', G)}
"""
