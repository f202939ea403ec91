-- SETTLE (KEYS as TAKE's; ARGV: holder, the delivery's seq, its JSON after the attempt, '1' when it is done): records
-- the attempt and frees the lease; 'lost' when the holder no longer holds it; else when the next delivery is due
-- ('next') or 'empty'.

if redis.call('GET', KEYS[3]) ~= ARGV[1] then return {'lost'} end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
if ARGV[4] == '1' then redis.call('ZREM', KEYS[2], ARGV[2]) end
redis.call('DEL', KEYS[3])
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if not head then return {'empty'} end
local record = redis.call('HGET', KEYS[1], head)
if not record then return {'next', '0'} end
return {'next', string.format('%.6f', cjson.decode(record)['next_at'])}
