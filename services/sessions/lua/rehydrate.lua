-- REHYDRATE (ARGV: n): the session's view, its last n messages and its goals, in one read.

local n = tonumber(ARGV[7])
if not mine() then return {'not_found'} end
local last = {}
if n > 0 then last = redis.call('LRANGE', M, -n, -1) end
return {'ok', view(), last, goals()}
