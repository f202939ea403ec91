-- ENQUEUE (KEYS: a queue's items hash and pending zset; ARGV: the delivery's seq, its JSON, the queue's TTL ms): adds
-- the delivery once (by seq) and keeps the queue alive.

if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then redis.call('ZADD', KEYS[2], ARGV[1], ARGV[1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
