-- CLAIM (ARGV: holder, lease ms). Not a tenant's call: the runtime replica asks for any orphaned turn. Claims the
-- session's open turn whose lease expired; otherwise says when to look again ('live') or that there is nothing to look
-- for ('closed'). The lease keeps its holder, the replica that last ran the turn: the claimer becomes the holder when it
-- runs the turn (its first append or renewal names it), so a claim that hands the turn back, or decides nothing, leaves
-- the next claimer asking the replica that may still run it.

local lease_ms = tonumber(ARGV[8])  -- ARGV[7], the claimer, is recorded by its first write, not here
local ok, owner = alive(K)
if not ok then return {'closed'} end
local l = live_lease()
if not l or not l.open then return {'closed'} end
if l.exp > now then return {'live', l.exp} end
local token = next_token()
put('lease_token', token, 'lease_exp', now + lease_ms, 'takeovers', l.takeovers + 1)
keep()  -- the turn starts again: its session's keys outlive the new lease by half the TTL at least
return {'claimed', owner, l.turn, token, l.takeovers + 1, last_seq(), now + lease_ms, l.holder, l.int_by,
  l.resume}
