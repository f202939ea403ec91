-- The session scripts' shared part (redis_lua.py `source`): every session script is this, then `local now = clock()`
-- (but for CLOCK_ON_DEMAND ones), then its own file. KEYS: the session's keys in redis_lua.SESSION_KEYS order, then its
-- identity's key. ARGV: tenant, the lease-free channel, session TTL (ms, 0 = none), session id, the clock's offset
-- (ms), '1' on a cluster; a script's own ARGV (which its file's comments list) follow from ARGV[7]. ${NAME}s are
-- redis_lua.py's constants.

local tenant, CHANNEL, ttl, sid = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local notify = ARGV[6] == '1'
-- One session's keys, from KEYS[at + 1].
local function keyset(at)
  return {${KEYSET}}
end
local K = keyset(0)
local KEYS_PER_SESSION = ${KEYS_PER_SESSION}
local S, M, G, C, CO, D, X, Q, W = K.s, K.m, K.g, K.c, K.co, K.d, K.x, K.q, K.w
local EV, J, JT, TR = K.events, K.j, K.jt, K.tr
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
local BATCHES = K['events:batches']  -- append ids before the slots (`r0`...): read, never written

-- The session hash's fields the scripts read, in one HMGET (`meta()`, loaded once per script); `put` writes
-- fields (and keeps this copy in step), `flush` sends what `put` gathered as one HSET.
local FIELDS = {'tenant_id', 'expires_at', 'ikey', 'lease_turn', 'lease_token', 'lease_exp', 'int_by',
  'lease_open', 'holder', 'takeovers', 'lstart', 'llast', 'eseq', 'jseq', 'jlast', 'ab', 'lease_resume', 'mc',
  'deleg_turn', 'deleg_turns', 'jn', 'pexp', 'rturn', 'ng', 'nq', 'jtn', 'last_token', 'ring'}
local H = nil
local PENDING = {}
local function meta()
  if not H then
    H = {}
    local values = redis.call('HMGET', S, unpack(FIELDS))
    for i, name in ipairs(FIELDS) do H[name] = values[i] end
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
-- the store reads back the same (services/lib/lease_holders.py); the scripts compare it as it is.
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

-- The next fencing token; the hash counts them (`last_token`). The caller's flush writes it, with the lease.
local function next_token()
  local token = tonumber(meta().last_token or '0') + 1
  put('last_token', token)
  return token
end

local function free_lease()
  put('lease_turn', '', 'lease_resume', '', 'lease_exp', 0, 'int_by', '', 'lease_open', '', 'holder', '',
    'takeovers', 0)
  -- Wake the turns queued for it, on any replica (none is while `nq` says so: a queued turn clears it).
  if meta().nq ~= '1' then redis.call('PUBLISH', CHANNEL, sid) end
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
    for _, k in ipairs({${DATA_KEYS}}) do redis.call('PERSIST', k) end
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
  if evict >= at and evict <= at + math.floor(ttl / ${EXPIRY_SLACK}) then
    flush()
    for _, k in ipairs(NEW) do redis.call('PEXPIREAT', k, evict) end
    NEW = {}
    return
  end
  evict = at + math.floor(ttl / ${EXPIRY_SLACK})
  put('pexp', evict)
  flush()
  for _, k in ipairs({${DATA_KEYS}}) do redis.call('PEXPIREAT', k, evict) end
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
  if meta().nq == '1' then return '' end  -- none waits, and none queued since (the common case: no command)
  if redis.call('EXISTS', Q) == 0 then
    put('nq', 1)
    return ''
  end
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
local function view_of(k, pending)
  local l_turn, count = '', nil
  if k.s == S then
    flush()
    local l = live_lease()
    if l then l_turn = l.turn end
    count = tonumber(meta().mc)  -- the message count the hash keeps (nil: a session written before `mc`)
  else
    local l = redis.call('HMGET', k.s, 'lease_turn', 'lease_exp', 'lease_open')
    if l[1] and l[1] ~= '' and (l[3] == '1' or tonumber(l[2]) > clock()) then l_turn = l[1] end
  end
  return {redis.call('HGETALL', k.s), count or redis.call('LLEN', k.m), l_turn, pending or pending_ids(k.c, k.co, k.d)}
end

-- `pending`: the session's pending interrupt ids when the script has just read them.
local function view(pending)
  return view_of(K, pending)
end

-- The session's goals: none, without a read, while it never had one (`ng`, set at create, cleared by the first).
local function goals()
  if meta().ng == '1' then return {} end
  return redis.call('HVALS', G)
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

-- Forget the journals of all but the last ${JOURNALS_KEPT} turns, keeping an open or paused turn's.
-- `turns`: how many turns the journal holds (ZCARD of JT, kept in `jtn`).
local function forget_journals(turns)
  put('jtn', turns)
  if turns <= ${JOURNALS_KEPT} then return end
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
  for i = 1, #ended - ${JOURNALS_KEPT} do
    local turn = ended[i]
    local count = tonumber(redis.call('HGET', J, turn) or '0')
    local fields = {turn}
    for n = 1, count do table.insert(fields, turn .. '|' .. n) end
    redis.call('HDEL', J, unpack(fields))
    redis.call('ZREM', JT, turn)
  end
  put('jtn', turns - math.max(0, #ended - ${JOURNALS_KEPT}))
end

-- Log events and journal entries read from ARGV[at]: n, then the events as k stream entries (k, then k x (a
-- lone event's payload, or up to ${ENTRY_EVENTS} events' StoredEvents encoding), each entry's id its last event's
-- seq), m, when the entries were recorded (ms, the sessions replica's clock, as the events' create_time), m x (kind,
-- position, state), then what the events change in the session: e, e x (name, value)
-- (model.effects_of: 'active_agent', 'plan', and 'delegated', which counts the turn in `deleg_turns` once).
-- Returns the last seq and the index of the ARGV after them (`after_log`). The session's fields it sets go out
-- with the script's next `flush`; the keys it creates are in NEW.
local function after_log(at)
  local k = tonumber(ARGV[at + 1])
  local q = at + 4 + k + 3 * tonumber(ARGV[at + 2 + k])
  return q + 1 + 2 * tonumber(ARGV[q])
end

local function log_events(turn, at, retention)
  local n, k = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  local first = last_seq() + 1
  local last = first + n - 1
  if n > 0 and first == 1 then table.insert(NEW, EV) end  -- the session's first event makes its stream
  -- The log keeps its last `retention` events: entries whose last seq is older go (an entry that holds the
  -- first kept event stays whole).
  local oldest = math.max(1, last - tonumber(retention) + 1) .. '-0'
  for i = 1, k do
    local size = math.min(${ENTRY_EVENTS}, n - (i - 1) * ${ENTRY_EVENTS})
    local id = (first - 1 + (i - 1) * ${ENTRY_EVENTS} + size) .. '-0'
    if size == 1 then
      redis.call('XADD', EV, 'MINID', oldest, id, 'e', ARGV[at + 1 + i])
    else
      redis.call('XADD', EV, 'MINID', oldest, id, 'n', size, 'b', ARGV[at + 1 + i])
    end
  end
  if n > 0 then put('eseq', last) end
  -- Where the turn's events start (ListTurns, rewinds): written once, when the log moves on to another turn.
  if n > 0 and turn ~= '' and meta().rturn ~= turn then
    -- The session's first turn makes the index (`rturn` unset; after a rewind, '' and it may be gone); a key
    -- already there takes the same expiry.
    local was = meta().rturn
    if redis.call('HSETNX', TR, turn, first) == 1 and (not was or (was == '' and redis.call('HLEN', TR) == 1)) then
      table.insert(NEW, TR)
    end
    put('rturn', turn)
  end
  local m, recorded = tonumber(ARGV[at + 2 + k]), ARGV[at + 3 + k]
  local p = at + 4 + k
  if m > 0 then
    local count = tonumber(meta().jn or '0')
    if meta().jlast ~= turn or not meta().jn then count = tonumber(redis.call('HGET', J, turn) or '0') end
    local entries = {}
    for i = 0, m - 1 do
      local kind, position, state = ARGV[p + 3 * i], tonumber(ARGV[p + 3 * i + 1]), ARGV[p + 3 * i + 2]
      count = count + 1
      local seq = first - 1 + math.min(position, n)
      table.insert(entries, turn .. '|' .. count)
      table.insert(entries, kind .. '|' .. seq .. '|' .. recorded .. '|' .. state)
    end
    redis.call('HSET', J, turn, count, unpack(entries))
    put('jn', count)
    -- The most recently written turn goes last (it is already, when it wrote the journal's last entry).
    if meta().jlast ~= turn then
      local jseq = tonumber(meta().jseq or '0') + 1
      put('jseq', jseq, 'jlast', turn)
      if redis.call('ZADD', JT, jseq, turn) == 1 then
        local turns = tonumber(meta().jtn or '')  -- a session written before `jtn` counts them once
        if turns then turns = turns + 1 else turns = redis.call('ZCARD', JT) end
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
  redis.call('DEL', S, M, G, C, CO, D, X, Q, W, K.a, K.al, EV, BATCHES, J, JT, TR)
  H, PENDING = nil, {}
  redis.call('SET', K['events:dropped'], '1', 'EX', ${DROPPED_TTL_S})
  redis.call('XADD', EV, (last + 1) .. '-0', 'dropped', '1')
  redis.call('EXPIRE', EV, wake_s)
  if notify then redis.call('SPUBLISH', K['events:news'], last + 1) end
  redis.call('PUBLISH', CHANNEL, sid)
end
