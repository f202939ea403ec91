-- RESCHEDULE (KEYS as SCHEDULE's; ARGV: session, generation, when to look next in ms or 0 to forget it): after a look,
-- unless the turn was scheduled again meanwhile (its generation moved on: the entry stays due, the next look sees).

if (redis.call('HGET', KEYS[2], ARGV[1]) or '0') ~= ARGV[2] then return 0 end
if ARGV[3] == '0' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
