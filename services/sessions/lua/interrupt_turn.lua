-- INTERRUPT_TURN (ARGV: turn ('' for whichever runs, a resume of it included), requested by): asks the turn's runtime
-- to stop.

local turn, by = ARGV[7], ARGV[8]
if not mine() then return {'not_found'} end
local l = live_lease()
if not l or (turn ~= '' and l.turn ~= turn) then return {'ok'} end
if l.int_by == '' then
  l.int_by = by
  redis.call('HSET', S, 'int_by', by)
end
return lease_reply('ok', l)
