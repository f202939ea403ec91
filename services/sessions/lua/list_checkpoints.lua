-- LIST_CHECKPOINTS: every checkpoint with its decision ('' when none), oldest first.

if not mine() then return {'not_found'} end
local out = {}
for _, id in ipairs(redis.call('ZRANGE', CO, 0, -1)) do
  table.insert(out, {redis.call('HGET', C, id), redis.call('HGET', D, id) or ''})
end
return {'ok', out}
