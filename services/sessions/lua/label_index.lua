-- LABEL_INDEX, on a tenant's label indexes (services/lib/redis_keys.py TenantKeys: one slot; not a session script).
-- KEYS = the tenant's index, the label-of hash, then n label indexes to add the session to, then the ones to take it
-- out of; ARGV = session id, n, the (key, value) pairs to record for it as a JSON list ('[]': none), the pairs
-- recorded now as JSON ('' when none are). Applies the change only while the recorded labels are still the ones given (a compare-and-set:
-- -1 otherwise, to read again) and the session is in the tenant's index (0 otherwise: a backfill or nobody takes
-- it); 1 when done. A label index holds the session under its score in the tenant's index.

local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return 0 end
if (redis.call('HGET', KEYS[2], ARGV[1]) or '') ~= ARGV[4] then return -1 end
local n = tonumber(ARGV[2])
for i = 3, 2 + n do redis.call('ZADD', KEYS[i], score, ARGV[1]) end
for i = 3 + n, #KEYS do redis.call('ZREM', KEYS[i], ARGV[1]) end
if ARGV[3] == '[]' then redis.call('HDEL', KEYS[2], ARGV[1]) else redis.call('HSET', KEYS[2], ARGV[1], ARGV[3]) end
return 1
