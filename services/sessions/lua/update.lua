-- UPDATE (ARGV: lease token (0: not fenced), then field, value pairs of the session's hash): sets them; returns the
-- view.

local token = tonumber(ARGV[7])
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
if #ARGV > 7 then put(unpack(ARGV, 8)) end
touch()
return {'ok', view()}
