-- REDELIVER (KEYS: a queue's items and pending; ARGV: the delivery's seq, its JSON, the queue's TTL ms): puts the
-- delivery back in its queue to be sent again.

redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
