-- KEYS: rec, runs, runver, order. ARGV: record.

if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'rec', ARGV[1], 'ver', 1)
return 1
