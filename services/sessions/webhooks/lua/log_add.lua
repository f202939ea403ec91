-- LOG_ADD (KEYS: the tenant's delivery log and its counter; ARGV: delivery id, how many the log keeps): lists the
-- delivery once, newest last, forgetting the oldest past the limit.

if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[2]), ARGV[1])
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[2]) + 1))
end
return 1
