-- APPEND_EVENTS (ARGV: lease token, turn, append id, how many append ids to remember, release ('1'), the events and
-- journal entries (log_events), the messages (count, payloads), the pause (interrupt id, checkpoint blob, max pending;
-- '' when none), the checkpoint to consume (interrupt id, or ''; how long the consume is remembered, ms), the writing
-- runtime replica ('' keeps the lease's holder), the log's retention): logs everything or nothing, fenced by the lease;
-- the consume is CONSUME_CHECKPOINT's with allow_undecided.

-- The ring's marks read from the slots `r0`..`r<remember - 1>` (`<last seq>|<append id>`, slot `ab` mod remember),
-- oldest first: for a session whose last appends the version before the ring wrote.
local function slot_ring(remember)
  local appends, names = tonumber(H.ab), {}
  for i = math.max(1, appends - remember + 1), appends do table.insert(names, 'r' .. (i % remember)) end
  if #names == 0 then return '' end
  local ring = ''
  for _, entry in ipairs(redis.call('HMGET', S, unpack(names))) do
    local seq, id = string.match(entry or '', '^(%d+)|(.*)$')
    if seq then ring = ring .. ',' .. string.sub(redis.sha1hex(id), 1, 16) .. ':' .. seq end
  end
  return ring
end

local token, turn, append_id, remember, release = tonumber(ARGV[7]), ARGV[8], ARGV[9], tonumber(ARGV[10]),
  ARGV[11] == '1'
-- The caller's session, alive: within the open turn this append's token holds, that needs no clock (the turn's
-- writes keep the session alive half a TTL past its lease, and a lapsed open lease is taken over long before).
local h = meta()
local within = h.lease_open == '1' and h.lease_turn ~= '' and tonumber(h.lease_token) == token
if not (within and h.tenant_id == tenant) and not mine() then return {'not_found'} end
-- A retried append that landed: its id's mark is in the ring, with the seq it ended at. Only a landed append
-- writes its mark (at the end), so a refused one leaves nothing to let go. The ring starts with the count of
-- appends (`ab`) it holds the last of: when another version has appended since, or before there was a ring, the
-- slots (which every version writes) are read instead.
local mark, ring = nil, nil
if append_id ~= '' then
  mark = ',' .. string.sub(redis.sha1hex(append_id), 1, 16) .. ':'
  local upto, marks = string.match(h.ring or '', '^(%d+)(.*)$')
  if upto and upto == h.ab then ring = marks elseif h.ab then ring = slot_ring(remember) end
  local at = string.find(ring or '', mark, 1, true)
  if at then return {'duplicate', tonumber(string.match(ring, '^%d+', at + #mark)), message_count()} end
  if (ring or '') == '' and h.ab then  -- ids written before the slots
    local seq = redis.call('ZSCORE', BATCHES, append_id)
    if seq then return {'duplicate', tonumber(seq), message_count()} end
  end
end
local l = live_lease()
if not l or l.token ~= token then return {'stale'} end
-- Where the messages and the pause start: past the events, journal entries and the session's changes.
local at = after_log(12)
local k = tonumber(ARGV[at])
local pause_id, pause_blob, max_pending = ARGV[at + k + 1], ARGV[at + k + 2], tonumber(ARGV[at + k + 3] or '0')
local consume_id, consume_ms = ARGV[at + k + 4], tonumber(ARGV[at + k + 5] or '0')
local consumed = nil  -- the checkpoint taken: {stored, decided}
if consume_id ~= '' then
  local done = redis.call('HGET', X, consume_id .. ':meta')
  local until_ms, by = string.match(done or '', '^(%d+)|(%d+)$')
  if not (until_ms and tonumber(until_ms) > clock() and tonumber(by) == token) then  -- else this lease took it
    local stored = redis.call('HGET', C, consume_id)
    if not stored then return {'no_checkpoint'} end
    local owner = checkpoint_of(stored)['turn']
    if owner ~= turn then return {'other_turn', owner} end
    consumed = {stored, redis.call('HGET', D, consume_id) or ''}
  end
end
if pause_id ~= '' then
  if redis.call('HEXISTS', C, pause_id) == 1 then return {'exists'} end
  if redis.call('HLEN', C) - redis.call('HLEN', D) >= max_pending then return {'limit'} end
end
local last = log_events(turn, 12, ARGV[#ARGV])
local count = nil
if k > 0 then count = push_messages(at + 1, at + k) end
if consumed then
  redis.call('HDEL', C, consume_id)
  redis.call('HDEL', D, consume_id)
  redis.call('ZREM', CO, consume_id)
  redis.call('HSET', X, consume_id .. ':meta', (clock() + consume_ms) .. '|' .. token, consume_id .. ':c', consumed[1],
    consume_id .. ':d', consumed[2])
  redis.call('PEXPIRE', X, consume_ms)
end
if pause_id ~= '' then
  redis.call('HSET', C, pause_id, clock() .. '|' .. token .. '|' .. pause_blob)
  redis.call('ZADD', CO, redis.call('HINCRBY', S, 'ck_seq', 1), pause_id)
end
if append_id ~= '' then
  -- The ring keeps the last `remember` marks. `ab` counts the session's appends with an id; this one also takes
  -- the oldest slot, which a sessions replica of the version before the ring reads (a rolling upgrade, a rollback).
  ring = (ring or '') .. mark .. last
  local _, marks = string.gsub(ring, ',', ',')
  for _ = remember + 1, marks do ring = string.sub(ring, (string.find(ring, ',', 2, true))) end
  local appends = tonumber(h.ab or '0') + 1
  put('ab', appends, 'ring', appends .. ring, 'r' .. (appends % remember), last .. '|' .. append_id)
end
count = count or message_count()  -- before the flush below: a count read from the list is kept
if release or pause_id ~= '' then
  free_lease()
  touch()  -- the turn ends (or pauses): its session lives `session_ttl` from now
else
  put('lease_open', '1')
  if ARGV[#ARGV - 1] ~= '' then put('holder', ARGV[#ARGV - 1]) end  -- who writes
  keep()
end
return {'ok', last, count}
