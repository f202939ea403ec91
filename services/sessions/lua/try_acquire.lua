-- TRY_ACQUIRE (ARGV: turn, lease ms, strategy when the lease is held ('reject', 'queue', 'interrupt'), waiter heartbeat
-- ms, its queue's base score, then as the script's first lines say): grants the turn the lease (opening its turn with
-- the events given), or queues the turn ('queued') or refuses it ('held').

-- ARGV[12]: the resume attempt ('' for a turn that starts); ARGV[13..]: the opening (events and journal
-- entries, as log_events reads them), then how many messages a grant's rehydration carries (0: none, as
-- REHYDRATE's reply, when no paused turn waits), then the log's retention.
local turn, lease_ms, strategy, waiter_ms, base, resume =
  ARGV[7], tonumber(ARGV[8]), ARGV[9], tonumber(ARGV[10]), tonumber(ARGV[11]), ARGV[12]
if not mine() then return {'not_found'} end
local l = live_lease()
if l and l.turn == turn and l.resume == resume and l.takeovers == 0 then  -- a retried acquire: the same grant
  return {'acquired', l.token, l.exp, pending_ids(C, CO, D), l.start, l.last}
end
local head = queue_head()
if not l and (head == '' or head == turn) then
  if head == turn then  -- it waited in the queue: it leaves it
    redis.call('ZREM', Q, turn)
    redis.call('HDEL', W, turn)
  end
  local token = next_token()
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
  local n = tonumber(ARGV[#ARGV - 1])
  if n > 0 and #pending == 0 then  -- the session as the turn starts from it: no REHYDRATE call after
    return {'acquired', token, now + lease_ms, pending, start, last, view(pending), redis.call('LRANGE', M, -n, -1),
      goals()}
  end
  return {'acquired', token, now + lease_ms, pending, start, last}
end
local holder = head
if l then holder = l.turn end
if strategy == 'reject' then return {'held', holder} end
if not redis.call('ZSCORE', Q, turn) then
  put('nq', '')  -- a turn waits: grants look at the queue again
  flush()
  redis.call('ZADD', Q, base + redis.call('HINCRBY', S, 'queue_seq', 1), turn)
end
redis.call('HSET', W, turn, now + waiter_ms)
redis.call('PEXPIRE', Q, waiter_ms * 4)
redis.call('PEXPIRE', W, waiter_ms * 4)
if strategy == 'interrupt' and l and l.int_by == '' then redis.call('HSET', S, 'int_by', turn) end
if l then return {'queued', l.turn, l.exp} end
return {'queued', '', 0}
