-- INDEX_BACKFILL (KEYS = the index, the scope-of hash, then scope indexes; ARGV = how far the backfill
-- has gone (a score, or 'done'), then per session: id, scope JSON, n, the n positions in KEYS of its scope
-- indexes): puts sessions listed before scope indexes existed into them, under their index scores. A
-- session no longer listed is left out; progress never moves back from 'done'.

local i = 2
while i <= #ARGV do
  local sid, scope, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local score = redis.call('ZSCORE', KEYS[1], sid)
  if score then
    redis.call('HSET', KEYS[2], sid, scope)
    for j = 1, n do redis.call('ZADD', KEYS[tonumber(ARGV[i + 2 + j])], score, sid) end
  end
  i = i + 3 + n
end
if redis.call('HGET', KEYS[2], '*') ~= 'done' then redis.call('HSET', KEYS[2], '*', ARGV[1]) end
return 1
