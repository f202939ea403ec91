-- CREATE (KEYS: the tenant's hooks, sealed secrets, order, its counter, then the index the hook is listed in (its
-- session's, or the tenant's for all sessions); ARGV: webhook id, its JSON, its sealed secret): stores the webhook,
-- newest last in the order.

redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[3], redis.call('INCR', KEYS[4]), ARGV[1])
redis.call('SADD', KEYS[5], ARGV[1])
return 1
