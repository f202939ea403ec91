-- KEYS[1] sorted set of call times (ms); ARGV: limit, window_ms, max_wait_ms, member.
-- Time comes from the Redis server so replicas with skewed clocks agree.

local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local max_wait = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local n = redis.call('ZCARD', key)
local at = now
if n >= limit then
  local nth = tonumber(redis.call('ZRANGE', key, -limit, -limit, 'WITHSCORES')[2])
  local last = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  at = math.max(now, nth + window, last)
end
local wait = at - now
if wait > max_wait then
  return {0, wait}
end
redis.call('ZADD', key, at, ARGV[4])
redis.call('PEXPIRE', key, wait + window + 1000)
return {1, wait}
