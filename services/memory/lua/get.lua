-- ARGV: key -> record, or "" when missing or expired

local record = redis.call('HGET', ITEMS, ARGV[1])
if not record then return '' end
local expire = tonumber(string.match(record, '^%d+|%d+|(%d+)|'))
if expire > 0 and expire <= now then return '' end
return record
