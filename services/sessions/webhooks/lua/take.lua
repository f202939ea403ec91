-- TAKE (KEYS: a queue's items, pending and lease; ARGV: holder, now, lease ms): the queue's first delivery, leased to
-- the holder when due ('head'); else when it is due ('later'), that the queue is empty ('empty') or another holds it
-- ('busy').

local held = redis.call('GET', KEYS[3])
if held and held ~= ARGV[1] then return {'busy'} end
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if not head then
  redis.call('DEL', KEYS[3])
  return {'empty'}
end
local record = redis.call('HGET', KEYS[1], head)
if not record then
  redis.call('ZREM', KEYS[2], head)
  return {'later', ARGV[2]}
end
local next_at = cjson.decode(record)['next_at']
if next_at > tonumber(ARGV[2]) then return {'later', string.format('%.6f', next_at)} end
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3])
return {'head', record}
