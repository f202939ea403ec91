-- DECIDE_CHECKPOINT (ARGV: interrupt id, the decision): records the checkpoint's decision; the first wins, the same
-- again is accepted, another is a 'conflict'.

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
