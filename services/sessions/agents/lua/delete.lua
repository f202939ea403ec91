-- Delete an agent with its versions and aliases.
-- KEYS: the tenant's latest-version hash, the agent's versions hash, the agent's aliases hash.
-- ARGV: name. Returns how many versions went (0: there was no such agent).

local latest = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if latest == 0 then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2], KEYS[3])
return latest
