-- WRITE_CHECKPOINT (ARGV: lease token (0: not fenced), interrupt id, blob, how many undecided checkpoints at most):
-- stores a new checkpoint (the same blob again answers as the first did; another under its id is 'exists'); 'limit'
-- past the undecided ones' limit.

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
