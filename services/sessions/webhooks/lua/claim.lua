-- CLAIM (KEYS: a schedule bucket; ARGV: now, how many, when the claim lapses): the queues due now, moved to the claim's
-- end so no other dispatcher takes them meanwhile, and the bucket's first time after ('' when empty).

local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, member in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[3], member) end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {due, first[2] or ''}
