-- JOURNAL (ARGV: turn): the turn's journal entries, in order.

local turn = ARGV[7]
if not mine() then return {'not_found'} end
local count = tonumber(redis.call('HGET', J, turn) or '0')
if count == 0 then return {'ok', {}} end
local fields = {}
for n = 1, count do table.insert(fields, turn .. '|' .. n) end
return {'ok', redis.call('HMGET', J, unpack(fields))}
