-- REWIND (ARGV: lease token (0: nobody may hold the lease), messages kept, the message count and the log's last seq
-- the caller read, the turn the event is logged under ('' outside a turn), the log's retention, how many turns are
-- dropped, their ids, then the SessionRewound event as log_events reads it): drops the messages from the kept count
-- on, the summary when it covers more, the dropped turns' first seqs, and logs the event, as one step. 'busy' (with the
-- turn) while a turn holds the lease, waits in the queue or is paused; 'moved' when the count or the log moved since
-- the caller read them; 'stale' when the token no longer holds the lease. The turns' journals stay (an audit).

local token, kept, expected, head, turn, retention =
  tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), ARGV[11], ARGV[12]
local dropped = tonumber(ARGV[13])
if not mine() then return {'not_found'} end
local l = live_lease()
if token ~= 0 then
  if not l or l.token ~= token then return {'stale'} end
else
  if l then return {'busy', l.turn} end
  local waiting = queue_head()
  if waiting ~= '' then return {'busy', waiting} end
  local paused = redis.call('HVALS', C)  -- a checkpoint not consumed yet: its turn is paused
  if #paused > 0 then return {'busy', checkpoint_of(paused[1])['turn']} end
end
if message_count() ~= expected or last_seq() ~= head then return {'moved'} end
if kept == 0 then redis.call('DEL', M) else redis.call('LTRIM', M, 0, kept - 1) end
put('mc', kept, 'rturn', '', 'outcome', '')  -- how a dropped turn ended no longer says anything
if tonumber(redis.call('HGET', S, 'summary_covered') or '0') > kept then
  redis.call('HDEL', S, 'summary_text', 'summary_covered', 'summary_at')
end
if dropped > 0 then redis.call('HDEL', TR, unpack(ARGV, 14, 13 + dropped)) end
local last = log_events(turn, 14 + dropped, retention)
if token ~= 0 then keep() else touch() end
return {'ok', last, view()}
