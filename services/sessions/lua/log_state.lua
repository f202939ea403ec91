-- LOG_STATE: the log's last seq, its first retained seq (as an entry id) and its last entry's fields (the store decodes
-- them).

if not mine() then return {'not_found'} end
local head = redis.call('XRANGE', EV, '-', '+', 'COUNT', 1)
local tail = redis.call('XREVRANGE', EV, '+', '-', 'COUNT', 1)
local first, last_fields = '', {}
if #head > 0 then  -- an entry of several events starts `n - 1` before its id
  first = head[1][1]
  if head[1][2][1] == 'n' then
    first = (tonumber(string.match(first, '^(%d+)')) - tonumber(head[1][2][2]) + 1) .. '-0'
  end
end
if #tail > 0 then last_fields = tail[1][2] end
return {'ok', last_seq(), first, last_fields}
