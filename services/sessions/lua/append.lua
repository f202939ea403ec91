-- APPEND (ARGV: lease token, request id ('' for none), how many request ids to remember, the messages): appends the
-- messages within the lease; a request id seen before answers 'duplicate' with the count after it. Returns the message
-- count.

local token, request_id, remember = tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9])
if not mine() then return {'not_found'} end
local l = live_lease()
if not l or l.token ~= token then return {'stale'} end
local A, AL = K.a, K.al  -- recent request ids -> count after them, and their order
if request_id ~= '' then
  local seen = redis.call('HGET', A, request_id)
  if seen then return {'duplicate', tonumber(seen)} end
end
local count = push_messages(10, #ARGV)
if request_id ~= '' then
  redis.call('HSET', A, request_id, count)
  local remembered = redis.call('RPUSH', AL, request_id)
  if remembered == 1 then  -- the first request id made both keys
    table.insert(NEW, A)
    table.insert(NEW, AL)
  end
  if remembered > remember then redis.call('HDEL', A, redis.call('LPOP', AL)) end
end
keep()
return {'ok', count}
