-- KEYS: rec, runs, runver, order. ARGV: expected version, record, run id ('' for none), run, fire ms, kept.
-- Returns {status, version, run added (0/1)}; status 1 written, 0 conflict, -1 no such schedule.

local ver = redis.call('HGET', KEYS[1], 'ver')
if not ver then return {-1, 0, 0} end
if tonumber(ver) ~= tonumber(ARGV[1]) then return {0, tonumber(ver), 0} end
local new = tonumber(ver) + 1
redis.call('HSET', KEYS[1], 'rec', ARGV[2], 'ver', new)
local added = 0
if ARGV[3] ~= '' and redis.call('HSETNX', KEYS[3], ARGV[3], 1) == 1 then
  redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
  redis.call('ZADD', KEYS[4], ARGV[5], ARGV[3])
  added = 1
  local extra = redis.call('ZCARD', KEYS[4]) - tonumber(ARGV[6])
  if extra > 0 then
    local old = redis.call('ZRANGE', KEYS[4], 0, extra - 1)
    redis.call('ZREMRANGEBYRANK', KEYS[4], 0, extra - 1)
    redis.call('HDEL', KEYS[2], unpack(old))
    redis.call('HDEL', KEYS[3], unpack(old))
  end
end
return {1, new, added}
