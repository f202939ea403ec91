-- GET_CHECKPOINT (ARGV: interrupt id): the stored checkpoint and its decision ('' when none).

local id = ARGV[7]
if not mine() then return {'not_found'} end
local stored = redis.call('HGET', C, id)
if not stored then return {'no_checkpoint'} end
return {'ok', stored, redis.call('HGET', D, id) or ''}
