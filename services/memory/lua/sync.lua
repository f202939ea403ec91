-- ARGV: epoch, version known to the caller, most changes to return
-- -> {"ok"|"reload", epoch, version, now, count, key1, record1, key2, record2...} ("" record: deleted)

purge()
local meta = redis.call('HMGET', META, 'epoch', 'ver', 'floor')
local epoch, ver, floor = meta[1] or '', tonumber(meta[2] or '0'), tonumber(meta[3] or '0')
local since = tonumber(ARGV[2])
local head = {'reload', epoch, ver, now, redis.call('HLEN', ITEMS)}
if epoch ~= ARGV[1] or since < floor or since > ver then return head end
local changed = redis.call('ZRANGEBYSCORE', LOG, '(' .. since, '+inf', 'LIMIT', 0, tonumber(ARGV[3]) + 1)
if #changed > tonumber(ARGV[3]) then return head end
head[1] = 'ok'
for _, key in ipairs(changed) do
  table.insert(head, key)
  table.insert(head, redis.call('HGET', ITEMS, key) or '')
end
return head
