-- SET_PHASE (ARGV: lease token (0: not fenced), the phase blob): sets the session's phase.

local token, blob = tonumber(ARGV[7]), ARGV[8]
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
put('phase', blob, 'phase_at', now)
touch()
return {'ok', now}
