-- Store an agent's next version.
-- KEYS: the tenant's latest-version hash (name -> version), the agent's versions hash (version -> record).
-- ARGV: name, create ("1" or "0"), expected latest version ("0": any), the record without its version.
-- Returns {"ok", version}, {"exists", latest}, {"missing", 0} or {"conflict", latest}.

local latest = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if ARGV[2] == '1' and latest > 0 then return {'exists', latest} end
if ARGV[2] ~= '1' and latest == 0 then return {'missing', 0} end
local expected = tonumber(ARGV[3])
if expected > 0 and expected ~= latest then return {'conflict', latest} end
local version = latest + 1
redis.call('HSET', KEYS[2], tostring(version), ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], version)
return {'ok', version}
