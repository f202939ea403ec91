-- LEASE_STATE: the turns in the queue whose replicas still poll, and the lease while it is held.

if not mine() then return {'not_found'} end
local queued = {}
for _, turn in ipairs(redis.call('ZRANGE', Q, 0, -1)) do
  local heart = redis.call('HGET', W, turn)
  if heart and tonumber(heart) > now then table.insert(queued, turn) end
end
local l = live_lease()
if not l then return {'ok', queued} end
return {'ok', queued, lease_reply('held', l)}
