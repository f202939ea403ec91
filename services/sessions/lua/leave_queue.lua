-- LEAVE_QUEUE (ARGV: turn): the turn leaves the queue (and withdraws its interrupt); waiters hear of it.

local turn = ARGV[7]
if not mine() then return {'not_found'} end
redis.call('ZREM', Q, turn)
redis.call('HDEL', W, turn)
if redis.call('HGET', S, 'int_by') == turn then redis.call('HSET', S, 'int_by', '') end
redis.call('PUBLISH', CHANNEL, sid)
return {'ok'}
