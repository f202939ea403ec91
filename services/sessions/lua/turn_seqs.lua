-- TURN_SEQS (ARGV: turn ids): the seq of each turn's first event, in order (nil for a turn the log has no start of).

if not mine() then return {'not_found'} end
if #ARGV < 7 then return {'ok', {}} end
return {'ok', redis.call('HMGET', TR, unpack(ARGV, 7))}
