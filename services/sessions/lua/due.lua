-- DUE (KEYS as SCHEDULE's; ARGV: how many, clock offset): the sessions to look at now, each with its generation. An
-- empty bucket (no open turn hashes to it) is no key: one command says so, answered -1 (NONE_OPEN).

if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[1])
local out = {}
for _, sid in ipairs(due) do table.insert(out, {sid, redis.call('HGET', KEYS[2], sid) or '0'}) end
return out
