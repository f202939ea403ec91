-- Remove an alias.
-- KEYS: the tenant's latest-version hash, the agent's aliases hash. ARGV: name, alias.
-- Returns the version it pointed at, -1 when there is no such agent, 0 when no such alias.

if not redis.call('HGET', KEYS[1], ARGV[1]) then return -1 end
local previous = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
if previous > 0 then redis.call('HDEL', KEYS[2], ARGV[2]) end
return previous
