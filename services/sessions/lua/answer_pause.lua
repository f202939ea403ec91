-- ANSWER_PAUSE (ARGV: interrupt id, the kind of pause the decision answers, the decision (base64, '' with none), '1'
-- when there is a decision, '1' to abandon, the resume's attempt id, lease ms): records the decision (the first wins;
-- the same again is accepted), then takes the lease for the resume (the same grant for a retry of the attempt), and
-- reads the turn's journal: DECIDE_CHECKPOINT, TRY_ACQUIRE and JOURNAL in one step. A lease held by another ('held':
-- its turn, '1' when it resumes this very turn) leaves the decision recorded.

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
  local token = next_token()
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
