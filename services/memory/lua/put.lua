-- ARGV: key, body, ttl_ms, max_items, max_bytes -> {"ok", created, record} | {"items"|"bytes", current}

purge()
local key, body, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local old = redis.call('HGET', ITEMS, key)
local created, old_size = now, 0
if old then
  created = tonumber(string.match(old, '^(%d+)|'))
  old_size = body_size(old)
end
local count = redis.call('HLEN', ITEMS)
if not old and count >= tonumber(ARGV[4]) then return {'items', count} end
local bytes = tonumber(redis.call('HGET', META, 'bytes') or '0')
if bytes - old_size + #body > tonumber(ARGV[5]) then return {'bytes', bytes} end
local expire = 0
if ttl > 0 then expire = now + ttl end
local record = created .. '|' .. now .. '|' .. expire .. '|' .. body
local had_ttl = old and redis.call('ZSCORE', EXP, key)
redis.call('HSET', ITEMS, key, record)
redis.call('HINCRBY', META, 'bytes', #body - old_size)
if expire > 0 then
  redis.call('ZADD', EXP, expire, key)
  if old and not had_ttl then redis.call('HINCRBY', META, 'perm', -1) end
else
  redis.call('ZREM', EXP, key)
  if not old or had_ttl then redis.call('HINCRBY', META, 'perm', 1) end
end
redis.call('ZADD', LOG, bump(), key)
redis.call('ZREM', TOMB, key)
keep_alive()
if old then return {'ok', 0, record} end
return {'ok', 1, record}
