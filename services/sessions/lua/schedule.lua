-- SCHEDULE (KEYS: a bucket of the open-turn index: its due zset, its generations hash; ARGV: session, ms from now,
-- clock offset): count a generation, look no later than then. Not a session script.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[3])
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('ZADD', KEYS[1], 'LT', now + tonumber(ARGV[2]), ARGV[1])
return 1
