-- LAST_MESSAGES (ARGV: n): the session's last n messages.

local n = tonumber(ARGV[7])
if not mine() then return {'not_found'} end
if n <= 0 then return {'ok', {}} end
return {'ok', redis.call('LRANGE', M, -n, -1)}
