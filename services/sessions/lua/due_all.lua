-- DUE_ALL: DUE of every bucket in one call, where they all live on one Redis (not Cluster).
-- KEYS: the buckets' (due, gen) pairs; ARGV as DUE's. Returns {bucket index (0-based), session, generation}.
-- With no open turn anywhere (an idle suite) it is one EXISTS over every bucket, answered -1 (NONE_OPEN).

local dues = {}
for b = 0, #KEYS / 2 - 1 do table.insert(dues, KEYS[2 * b + 1]) end
if redis.call('EXISTS', unpack(dues)) == 0 then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
local out = {}
for b = 0, #KEYS / 2 - 1 do
  local due = redis.call('ZRANGEBYSCORE', KEYS[2 * b + 1], '-inf', now, 'LIMIT', 0, ARGV[1])
  for _, sid in ipairs(due) do table.insert(out, {b, sid, redis.call('HGET', KEYS[2 * b + 2], sid) or '0'}) end
end
return out
