-- RENEW (ARGV: lease token, lease ms, holder ('' keeps it), hand-over ('1')): extend the held lease and record who runs
-- the turn; hand-over expires it at once, still open.

local token, lease_ms, holder, hand_over = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[9], ARGV[10] == '1'
if not mine() then return {'not_found'} end
local l = live_lease()
if not l or l.token ~= token then return {'stale'} end
if hand_over then
  l.exp, l.holder = now, ''
elseif holder ~= '' then
  l.exp, l.holder = now + lease_ms, holder
else
  l.exp = now + lease_ms
end
put('lease_exp', l.exp, 'holder', l.holder)
keep()
return lease_reply('ok', l)
