-- The memory scripts' shared part: each script is this, then its own file (redis_store.py). KEYS: the namespace's
-- items, meta, log, exp and tomb keys (the layout in redis_store.py's docstring). ${NAME}s are redis_store.py's
-- constants.

local ITEMS, META, LOG, EXP, TOMB = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local function body_size(record)
  local start = string.match(record, '^%d+|%d+|%d+|()')
  return #record - start + 1
end

local function bump()
  if redis.call('HEXISTS', META, 'epoch') == 0 then redis.call('HSET', META, 'epoch', now) end
  return redis.call('HINCRBY', META, 'ver', 1)
end

local function forget_oldest_deletions()
  local old = redis.call('ZRANGE', TOMB, 0, ${TOMB_FORGET_LAST}, 'WITHSCORES')
  for i = 1, #old, 2 do
    redis.call('ZREM', LOG, old[i])
    redis.call('ZREM', TOMB, old[i])
  end
  redis.call('HSET', META, 'floor', old[#old])
end

local function drop(key)
  local old = redis.call('HGET', ITEMS, key)
  if not old then return false end
  redis.call('HDEL', ITEMS, key)
  redis.call('HINCRBY', META, 'bytes', -body_size(old))
  if redis.call('ZREM', EXP, key) == 0 then redis.call('HINCRBY', META, 'perm', -1) end
  local ver = bump()
  redis.call('ZADD', LOG, ver, key)
  redis.call('ZADD', TOMB, ver, key)
  if redis.call('ZCARD', TOMB) > ${TOMB_MAX} then forget_oldest_deletions() end
  return true
end

local function purge()
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', EXP, '-inf', now, 'LIMIT', 0, ${PURGE_BATCH})) do drop(key) end
end

-- Memories without a TTL keep the namespace; once every one expires, so does the namespace.
local function keep_alive()
  if tonumber(redis.call('HGET', META, 'perm') or '0') > 0 then
    for _, k in ipairs(KEYS) do redis.call('PERSIST', k) end
    return
  end
  local last = redis.call('ZRANGE', EXP, -1, -1, 'WITHSCORES')
  local until_ms = now + ${IDLE_GRACE_MS}
  if #last > 0 then until_ms = tonumber(last[2]) + ${IDLE_GRACE_MS} end
  for _, k in ipairs(KEYS) do redis.call('PEXPIREAT', k, until_ms) end
end
