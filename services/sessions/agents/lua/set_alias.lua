-- Point an alias at an existing version.
-- KEYS: the tenant's latest-version hash, the agent's versions hash, the agent's aliases hash.
-- ARGV: name, alias, version.
-- Returns {"ok", previous version (0: new), record}, {"missing"} or {"no_version"}.

if not redis.call('HGET', KEYS[1], ARGV[1]) then return {'missing'} end
local record = redis.call('HGET', KEYS[2], ARGV[3])
if not record then return {'no_version'} end
local previous = tonumber(redis.call('HGET', KEYS[3], ARGV[2]) or '0')
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
return {'ok', previous, record}
