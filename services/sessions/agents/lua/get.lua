-- Read one version of an agent, with every alias.
-- KEYS: the tenant's latest-version hash, the agent's versions hash, the agent's aliases hash (alias -> version).
-- ARGV: name, version ("0": the latest, or the alias's), alias ("": none).
-- Returns {"ok", version, record, alias, version, ...}, {"missing"}, {"no_alias"} or {"no_version"}.

local latest = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if latest == 0 then return {'missing'} end
local version = tonumber(ARGV[2])
if ARGV[3] ~= '' then
  local aliased = redis.call('HGET', KEYS[3], ARGV[3])
  if not aliased then return {'no_alias'} end
  version = tonumber(aliased)
end
if version == 0 then version = latest end
local record = redis.call('HGET', KEYS[2], tostring(version))
if not record then return {'no_version'} end
local out = {'ok', version, record}
for _, v in ipairs(redis.call('HGETALL', KEYS[3])) do out[#out + 1] = v end
return out
