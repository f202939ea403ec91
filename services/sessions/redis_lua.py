"""Lua scripts of the Redis session store: each store method is one script, so each is atomic.

Every script gets KEYS[1] = the session hash and ARGV = tenant, key prefix, session
TTL (ms, 0 = none), session id, then its own arguments (ARGV[5]...). Times come from
Redis (TIME), so every replica agrees on lease expiry. Keys of a session share the
session hash's name as a prefix (":m" messages, ":g" goals, ...); scripts derive them,
so the store needs a standalone Redis (or Sentinel), not Redis Cluster.

Replies are arrays whose first element is a status: "ok" or the name of a domain
error. Every script is safe to run twice (the client retries once on a dropped
connection): a create with the same id, an append with the same request id, an
acquire by the same turn, a consume with the same token all answer as the first did.
"""

from __future__ import annotations

PREAMBLE = r"""
local S = KEYS[1]
local tenant, prefix, ttl, sid = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local M, G, C, CO, D, X, Q, W = S .. ':m', S .. ':g', S .. ':c', S .. ':co', S .. ':d', S .. ':x', S .. ':q', S .. ':w'
local CHANNEL = prefix .. 'lease-free'
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
  if ttl <= 0 then
    redis.call('HSET', S, 'updated_at', now)
    if meta[1] == '0' then return end  -- already kept forever
    redis.call('HSET', S, 'expires_at', 0)
    for _, k in ipairs({S, M, G, C, CO, D, S .. ':a', S .. ':al'}) do redis.call('PERSIST', k) end
    if meta[2] and meta[2] ~= '' and redis.call('GET', meta[2]) == sid then redis.call('PERSIST', meta[2]) end
    return
  end
  local exp = now + ttl
  if meta[3] and meta[3] ~= '' and tonumber(meta[4]) > exp then exp = tonumber(meta[4]) end
  redis.call('HSET', S, 'updated_at', now, 'expires_at', exp)
  for _, k in ipairs({S, M, G, C, CO, D, S .. ':a', S .. ':al'}) do redis.call('PEXPIREAT', k, exp) end
  if meta[2] and meta[2] ~= '' and redis.call('GET', meta[2]) == sid then redis.call('PEXPIREAT', meta[2], exp) end
end

local function pending_ids(cname, coname, dname)
  local out = {}
  for _, id in ipairs(redis.call('ZRANGE', coname, 0, -1)) do
    if redis.call('HEXISTS', dname, id) == 0 then table.insert(out, id) end
  end
  return out
end

-- The session as the store reports it: its hash plus what is derived at read time.
local function view_of(sname)
  local l_turn = ''
  local l = redis.call('HMGET', sname, 'lease_turn', 'lease_exp')
  if l[1] and l[1] ~= '' and tonumber(l[2]) > now then l_turn = l[1] end
  return {
    redis.call('HGETALL', sname),
    redis.call('LLEN', sname .. ':m'),
    l_turn,
    pending_ids(sname .. ':c', sname .. ':co', sname .. ':d'),
  }
end

local function view()
  return view_of(S)
end

local function delete_session(sname, session_id, owner)
  local ikey = redis.call('HGET', sname, 'ikey')
  if ikey and ikey ~= '' and redis.call('GET', ikey) == session_id then redis.call('DEL', ikey) end
  for _, suffix in ipairs({'', ':m', ':g', ':c', ':co', ':d', ':x', ':q', ':w', ':a', ':al'}) do
    redis.call('DEL', sname .. suffix)
  end
  redis.call('ZREM', prefix .. 't:' .. owner, session_id)
  redis.call('PUBLISH', CHANNEL, session_id)
end

local function session_name(session_id)
  return prefix .. 's:{' .. session_id .. '}'
end
"""

CREATE = r"""
local user, topic, agent, role, skills, config, delegated_from, ikey, reuse =
  ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13]
local T = prefix .. 't:' .. tenant
if reuse == '1' and ikey ~= '' then
  local existing = redis.call('GET', ikey)
  if existing and redis.call('HGET', session_name(existing), 'tenant_id') == tenant then
    return {'reused', existing, view_of(session_name(existing))}
  end
end
if redis.call('EXISTS', S) == 1 then
  if mine() then return {'ok', sid, view()} end  -- a retried create
  return {'collision'}
end
-- Amortised cleanup: forget a few of the oldest index entries whose session expired.
for _, old in ipairs(redis.call('ZRANGE', T, 0, 4)) do
  if redis.call('EXISTS', session_name(old)) == 0 then redis.call('ZREM', T, old) end
end
local seq = redis.call('INCR', prefix .. 'seq')
redis.call('HSET', S, 'session_id', sid, 'tenant_id', tenant, 'user_id', user, 'topic_id', topic,
  'agent', agent, 'role_id', role, 'skills', skills, 'prompt_hash', '', 'config', config,
  'deleg_from', delegated_from, 'deleg_count', 0, 'created_at', now, 'seq', seq, 'last_token', 0, 'ikey', ikey)
redis.call('ZADD', T, seq, sid)
if ikey ~= '' then redis.call('SET', ikey, sid) end
touch()
return {'ok', sid, view()}
"""

GET = r"""
if not mine() then return {'not_found'} end
return {'ok', view()}
"""

LOOKUP = r"""
local ikey = ARGV[5]
local found = redis.call('GET', ikey)
if not found or redis.call('HGET', session_name(found), 'tenant_id') ~= tenant then return {'not_found'} end
return {'ok', view_of(session_name(found))}
"""

LIST = r"""
local cursor, limit = ARGV[5], tonumber(ARGV[6])
local T = prefix .. 't:' .. tenant
local max = '+inf'
if cursor ~= '' then max = '(' .. cursor end
local found = {}
while #found <= limit do
  local batch = redis.call('ZREVRANGEBYSCORE', T, max, '-inf', 'WITHSCORES', 'LIMIT', 0, limit + 1 - #found)
  if #batch == 0 then break end
  for i = 1, #batch, 2 do
    local name = session_name(batch[i])
    if redis.call('EXISTS', name) == 1 then
      table.insert(found, {name, batch[i + 1]})
    else
      redis.call('ZREM', T, batch[i])  -- evicted by its TTL
    end
    max = '(' .. batch[i + 1]
  end
end
local next_cursor = ''
if #found > limit then
  next_cursor = found[limit][2]
  found[limit + 1] = nil
end
local views = {}
for _, f in ipairs(found) do table.insert(views, view_of(f[1])) end
return {'ok', next_cursor, views}
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
delete_session(S, sid, tenant)
return {'ok'}
"""

CLOSE_ALL = r"""
local user, after, batch = ARGV[5], ARGV[6], tonumber(ARGV[7])
local T = prefix .. 't:' .. tenant
local page = redis.call('ZRANGEBYSCORE', T, '(' .. after, '+inf', 'WITHSCORES', 'LIMIT', 0, batch)
local closed, last = 0, ''
for i = 1, #page, 2 do
  local id, name = page[i], session_name(page[i])
  last = page[i + 1]
  if redis.call('HGET', name, 'tenant_id') == tenant then
    if user == '' or redis.call('HGET', name, 'user_id') == user then
      delete_session(name, id, tenant)
      closed = closed + 1
    end
  else
    redis.call('ZREM', T, id)
  end
end
return {'ok', closed, last}
"""

APPEND = r"""
local token, request_id, remember = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
if not mine() then return {'not_found'} end
local l = live_lease()
if not l or l.token ~= token then return {'stale'} end
local A, AL = S .. ':a', S .. ':al'  -- recent request ids -> count after them, and their order
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
