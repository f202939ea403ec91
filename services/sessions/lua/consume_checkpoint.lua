-- CONSUME_CHECKPOINT (ARGV: lease token (0: not fenced), interrupt id, '1' to take an undecided checkpoint, how long
-- the consume is remembered, ms): removes the checkpoint and returns it with its decision; the same token's retry
-- within that time gets the same answer.

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
