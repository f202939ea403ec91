-- DELETE (KEYS as CREATE's, without the counter; ARGV: webhook id): removes the webhook; 0 when there was none.

if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[1])
return 1
