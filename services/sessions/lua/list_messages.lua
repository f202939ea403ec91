-- LIST_MESSAGES (ARGV: offset, limit): the message count and that page of messages.

local offset, limit = tonumber(ARGV[7]), tonumber(ARGV[8])
if not mine() then return {'not_found'} end
return {'ok', redis.call('LLEN', M), redis.call('LRANGE', M, offset, offset + limit - 1)}
