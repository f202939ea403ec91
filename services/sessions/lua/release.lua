-- RELEASE (ARGV: lease token): frees the lease while the token holds it (1; else 0).

local token = tonumber(ARGV[7])
if not mine() then return {'not_found'} end
local l = live_lease()
if not l or l.token ~= token then return {'ok', 0} end
free_lease()
touch()
return {'ok', 1}
