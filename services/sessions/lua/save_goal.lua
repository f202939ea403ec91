-- SAVE_GOAL (ARGV: lease token (0: not fenced), goal id, goal blob, how many goals at most): writes the goal, keeping
-- when it was created; a new goal past the limit is refused ('limit').

local token, goal_id, blob, max_goals = tonumber(ARGV[7]), ARGV[8], ARGV[9], tonumber(ARGV[10])
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
local old = redis.call('HGET', G, goal_id)
local created = now
if old then
  created = tonumber(string.match(old, '^(%d+)|'))
elseif redis.call('HLEN', G) >= max_goals then
  return {'limit'}
end
redis.call('HSET', G, goal_id, created .. '|' .. now .. '|' .. blob)
if meta().ng then put('ng', '') end  -- the session has goals: its reads read them
touch()
return {'ok', created, now}
