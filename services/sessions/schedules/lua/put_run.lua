-- KEYS: rec, runs, runver, order. ARGV: expected version, run id, run, fire ms, kept.
-- Returns {status, version}: 1 written, 0 conflict, -1 no such schedule.

if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0} end
local ver = tonumber(redis.call('HGET', KEYS[3], ARGV[2]) or '0')
if ver ~= tonumber(ARGV[1]) then return {0, ver} end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[2], ver + 1)
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[2])
local extra = redis.call('ZCARD', KEYS[4]) - tonumber(ARGV[5])
if extra > 0 then
  local old = redis.call('ZRANGE', KEYS[4], 0, extra - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[4], 0, extra - 1)
  redis.call('HDEL', KEYS[2], unpack(old))
  redis.call('HDEL', KEYS[3], unpack(old))
end
return {1, ver + 1}
