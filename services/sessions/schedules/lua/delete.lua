-- KEYS: rec, runs, runver, order. Returns the run ids it had, or false when there was no schedule.

if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local runs = redis.call('HKEYS', KEYS[3])
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
return runs
