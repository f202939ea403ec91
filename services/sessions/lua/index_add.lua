-- INDEX_ADD, on a tenant's index and its scope indexes (services/lib/redis_keys.py TenantKeys: one slot; not a session
-- script). KEYS = the index, its counter, the scope-of hash, then the session's scope indexes; ARGV = session id, how
-- many of the oldest entries to return for a check, its scope as JSON. Adds the session once, newest last, to the
-- tenant's index and under the same score to each of its scope indexes; retried, it keeps its place. A scoped session
-- that opens the tenant's index marks the tenant indexed ('*' = 'done'): no session older than it needs the backfill.

local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  if #KEYS > 3 and redis.call('ZCARD', KEYS[1]) == 0 then redis.call('HSET', KEYS[3], '*', 'done') end
  score = redis.call('INCR', KEYS[2])
  redis.call('ZADD', KEYS[1], score, ARGV[1])
end
if #KEYS > 3 then
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
  for i = 4, #KEYS do redis.call('ZADD', KEYS[i], score, ARGV[1]) end
end
return redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
