"""Lua scripts of the Redis session store: each store method is one script, so each is atomic.

Every script gets the session's keys (services/kit/redis_keys.py: all in the session's
cluster slot) through KEYS: the hash, messages, goals, checkpoints and their order,
decisions, consumed checkpoints, the lease queue and its heartbeats, the last append
ids and their order, and the key of the session's identity (KEYS[1..12], `SESSION_KEYS`);
CREATE gets a second session's twelve after them. ARGV = tenant, the lease-free channel,
session TTL (ms, 0 = none), session id, then the script's own arguments (ARGV[5]...).
Times come from Redis (TIME), so every replica agrees on lease expiry. A tenant's index
of sessions lives in a slot of its own and is kept by the store between scripts.

Replies are arrays whose first element is a status: "ok" or the name of a domain
error. Every script is safe to run twice (the client retries once on a dropped
connection): a create with the same id, an append with the same request id, an
acquire by the same turn, a consume with the same token all answer as the first did.
"""

from __future__ import annotations

# Scripts that write nothing (no WAIT after them; services/kit/redis_pool.py ReplicaWait).
READS = frozenset(
    {"GET", "LIST_MESSAGES", "LAST_MESSAGES", "LEASE_STATE", "LIST_GOALS", "GET_CHECKPOINT", "LIST_CHECKPOINTS"}
    | {"REHYDRATE"}
)

# The names (services/kit/redis_keys.py SessionKeys) of KEYS[1..11]; KEYS[12] is the identity key.
SESSION_KEYS = ("s", "m", "g", "c", "co", "d", "x", "q", "w", "a", "al")

# A tenant's index (not a session script: KEYS = the index, its counter; ARGV = session id, how many
# of the oldest entries to return for a check). Adds the session once, newest last; retried, it keeps its place.
INDEX_ADD = r"""
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[2]), ARGV[1])
end
return redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
"""

PREAMBLE = r"""
local tenant, CHANNEL, ttl, sid = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
-- The twelve keys of one session, from KEYS[at + 1].
local function keyset(at)
  return {s = KEYS[at + 1], m = KEYS[at + 2], g = KEYS[at + 3], c = KEYS[at + 4], co = KEYS[at + 5],
    d = KEYS[at + 6], x = KEYS[at + 7], q = KEYS[at + 8], w = KEYS[at + 9], a = KEYS[at + 10], al = KEYS[at + 11],
    i = KEYS[at + 12]}
end
local K = keyset(0)
local S, M, G, C, CO, D, X, Q, W = K.s, K.m, K.g, K.c, K.co, K.d, K.x, K.q, K.w
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local function mine()
  return redis.call('HGET', S, 'tenant_id') == tenant
end

local function live_lease()
  local l = redis.call('HMGET', S, 'lease_turn', 'lease_token', 'lease_exp', 'int_by')
  if l[1] and l[1] ~= '' and tonumber(l[3]) > now then
    return {turn = l[1], token = tonumber(l[2]), exp = tonumber(l[3]), int_by = l[4] or ''}
  end
  return nil
end

local function fenced(token)
  if token == 0 then return true end
  local l = live_lease()
  return l ~= nil and l.token == token
end

-- A write is activity: push eviction back, never before a live lease ends.
local function touch()
  local meta = redis.call('HMGET', S, 'expires_at', 'ikey', 'lease_turn', 'lease_exp')
  local named = meta[2] == '1' and redis.call('GET', K.i) == sid  -- the session its identity names
  if ttl <= 0 then
    redis.call('HSET', S, 'updated_at', now)
    if meta[1] == '0' then return end  -- already kept forever
    redis.call('HSET', S, 'expires_at', 0)
    for _, k in ipairs({S, M, G, C, CO, D, K.a, K.al}) do redis.call('PERSIST', k) end
    if named then redis.call('PERSIST', K.i) end
    return
  end
  local exp = now + ttl
  if meta[3] and meta[3] ~= '' and tonumber(meta[4]) > exp then exp = tonumber(meta[4]) end
  redis.call('HSET', S, 'updated_at', now, 'expires_at', exp)
  for _, k in ipairs({S, M, G, C, CO, D, K.a, K.al}) do redis.call('PEXPIREAT', k, exp) end
  if named then redis.call('PEXPIREAT', K.i, exp) end
end

local function pending_ids(cname, coname, dname)
  local out = {}
  for _, id in ipairs(redis.call('ZRANGE', coname, 0, -1)) do
    if redis.call('HEXISTS', dname, id) == 0 then table.insert(out, id) end
  end
  return out
end

-- The session as the store reports it: its hash plus what is derived at read time.
local function view_of(k)
  local l_turn = ''
  local l = redis.call('HMGET', k.s, 'lease_turn', 'lease_exp')
  if l[1] and l[1] ~= '' and tonumber(l[2]) > now then l_turn = l[1] end
  return {redis.call('HGETALL', k.s), redis.call('LLEN', k.m), l_turn, pending_ids(k.c, k.co, k.d)}
end

local function view()
  return view_of(K)
end

local function delete_session()
  if redis.call('HGET', S, 'ikey') == '1' and redis.call('GET', K.i) == sid then redis.call('DEL', K.i) end
  redis.call('DEL', S, M, G, C, CO, D, X, Q, W, K.a, K.al)
  redis.call('PUBLISH', CHANNEL, sid)
end
"""

CREATE = r"""
local user, topic, agent, role, skills, config, delegated_from, identity, reuse, expected =
  ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14]
if reuse == '1' and identity == '1' then
  local existing = redis.call('GET', K.i) or ''
  if existing == sid and mine() then return {'ok', sid, view()} end  -- a retried create
  if existing ~= expected then return {'moved'} end  -- the identity changed since the store read it
  if existing ~= '' then
    local E = keyset(12)  -- the keys of `expected`
    if redis.call('HGET', E.s, 'tenant_id') == tenant then return {'reused', existing, view_of(E)} end
  end
end
if redis.call('EXISTS', S) == 1 then
  if mine() then return {'ok', sid, view()} end  -- a retried create
  return {'collision'}
end
redis.call('HSET', S, 'session_id', sid, 'tenant_id', tenant, 'user_id', user, 'topic_id', topic,
  'agent', agent, 'role_id', role, 'skills', skills, 'prompt_hash', '', 'config', config,
  'deleg_from', delegated_from, 'deleg_count', 0, 'created_at', now, 'last_token', 0, 'ikey', identity)
if identity == '1' then redis.call('SET', K.i, sid) end  -- the newest session answers for its identity
touch()
return {'ok', sid, view()}
"""

GET = r"""
if not mine() then return {'not_found'} end
return {'ok', view()}
"""

UPDATE = r"""
local token = tonumber(ARGV[5])
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
if #ARGV > 5 then redis.call('HSET', S, unpack(ARGV, 6)) end
touch()
return {'ok', view()}
"""

DELETE = r"""
if not mine() then return {'not_found'} end
delete_session()
return {'ok'}
"""

CLOSE = r"""
local user = ARGV[5]
if not mine() then return {'not_found'} end
if user ~= '' and redis.call('HGET', S, 'user_id') ~= user then return {'kept'} end
delete_session()
return {'ok'}
"""

APPEND = r"""
local token, request_id, remember = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
if not mine() then return {'not_found'} end
local l = live_lease()
if not l or l.token ~= token then return {'stale'} end
local A, AL = K.a, K.al  -- recent request ids -> count after them, and their order
if request_id ~= '' then
  local seen = redis.call('HGET', A, request_id)
  if seen then return {'duplicate', tonumber(seen)} end
end
redis.call('RPUSH', M, unpack(ARGV, 8))
local count = redis.call('LLEN', M)
if request_id ~= '' then
  redis.call('HSET', A, request_id, count)
  if redis.call('RPUSH', AL, request_id) > remember then redis.call('HDEL', A, redis.call('LPOP', AL)) end
end
touch()
return {'ok', count}
"""

LIST_MESSAGES = r"""
local offset, limit = tonumber(ARGV[5]), tonumber(ARGV[6])
if not mine() then return {'not_found'} end
return {'ok', redis.call('LLEN', M), redis.call('LRANGE', M, offset, offset + limit - 1)}
"""

LAST_MESSAGES = r"""
local n = tonumber(ARGV[5])
if not mine() then return {'not_found'} end
if n <= 0 then return {'ok', {}} end
return {'ok', redis.call('LRANGE', M, -n, -1)}
"""

TRY_ACQUIRE = r"""
local turn, lease_ms, strategy, waiter_ms, base =
  ARGV[5], tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9])
if not mine() then return {'not_found'} end
local l = live_lease()
if l and l.turn == turn then return {'acquired', l.token, l.exp, pending_ids(C, CO, D)} end  -- a retried acquire
-- Waiters whose replica stopped polling lose their place.
local hearts = redis.call('HGETALL', W)
for i = 1, #hearts, 2 do
  if tonumber(hearts[i + 1]) <= now then
    redis.call('HDEL', W, hearts[i])
    redis.call('ZREM', Q, hearts[i])
  end
end
local head = ''
while true do
  local first = redis.call('ZRANGE', Q, 0, 0)
  if #first == 0 then break end
  if redis.call('HEXISTS', W, first[1]) == 1 then head = first[1] break end
  redis.call('ZREM', Q, first[1])
end
if not l and (head == '' or head == turn) then
  redis.call('ZREM', Q, turn)
  redis.call('HDEL', W, turn)
  local token = redis.call('HINCRBY', S, 'last_token', 1)
  redis.call('HSET', S, 'lease_turn', turn, 'lease_token', token, 'lease_exp', now + lease_ms, 'int_by', '')
  touch()
  return {'acquired', token, now + lease_ms, pending_ids(C, CO, D)}
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
local turn = ARGV[5]
if not mine() then return {'not_found'} end
redis.call('ZREM', Q, turn)
redis.call('HDEL', W, turn)
if redis.call('HGET', S, 'int_by') == turn then redis.call('HSET', S, 'int_by', '') end
redis.call('PUBLISH', CHANNEL, sid)
return {'ok'}
"""

RENEW = r"""
local token, lease_ms = tonumber(ARGV[5]), tonumber(ARGV[6])
if not mine() then return {'not_found'} end
local l = live_lease()
if not l or l.token ~= token then return {'stale'} end
redis.call('HSET', S, 'lease_exp', now + lease_ms)
touch()
return {'ok', l.turn, l.token, now + lease_ms, l.int_by}
"""

RELEASE = r"""
local token = tonumber(ARGV[5])
if not mine() then return {'not_found'} end
local l = live_lease()
if not l or l.token ~= token then return {'ok', 0} end
redis.call('HSET', S, 'lease_turn', '', 'lease_exp', 0, 'int_by', '')
touch()
redis.call('PUBLISH', CHANNEL, sid)
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
return {'ok', queued, l.turn, l.token, l.exp, l.int_by}
"""

UPDATE_SUMMARY = r"""
local token, text, covered = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
local count = redis.call('LLEN', M)
if covered > count then return {'invalid', count} end
redis.call('HSET', S, 'summary_text', text, 'summary_covered', covered, 'summary_at', now)
touch()
return {'ok', now}
"""

SAVE_GOAL = r"""
local token, goal_id, blob, max_goals = tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8])
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
local token, blob = tonumber(ARGV[5]), ARGV[6]
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
redis.call('HSET', S, 'phase', blob, 'phase_at', now)
touch()
return {'ok', now}
"""

WRITE_CHECKPOINT = r"""
local token, id, blob, max_pending = tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8])
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
local id = ARGV[5]
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
local id, blob = ARGV[5], ARGV[6]
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
local token, id, allow_undecided, keep_ms = tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8])
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

REHYDRATE = r"""
local n = tonumber(ARGV[5])
if not mine() then return {'not_found'} end
local last = {}
if n > 0 then last = redis.call('LRANGE', M, -n, -1) end
return {'ok', view(), last, redis.call('HVALS', G)}
"""
