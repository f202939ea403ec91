-- UPDATE (ARGV: lease token (0: not fenced), the most labels a session may have, how many label changes follow,
-- then per change: key, '1' to set or '' to remove, value; then field, value pairs of the session's hash): sets them,
-- then applies the label changes to the labels (JSON) as they stand; returns the view, or 'too_many' with the count
-- when the labels would exceed the limit (nothing changed).

local token, max_labels, n = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
local first = 10 + 3 * n  -- the field, value pairs
local labels = nil
for i = first, #ARGV - 1, 2 do
  if ARGV[i] == 'labels' then labels = ARGV[i + 1] end
end
if n > 0 then
  labels = cjson.decode(labels or redis.call('HGET', S, 'labels') or '{}')
  for i = 0, n - 1 do
    local key, set, value = ARGV[10 + 3 * i], ARGV[11 + 3 * i], ARGV[12 + 3 * i]
    if set == '1' then labels[key] = value else labels[key] = nil end
  end
  local count = 0
  for _ in pairs(labels) do count = count + 1 end
  if count > max_labels then return {'too_many', count} end
  if count == 0 then labels = '{}' else labels = cjson.encode(labels) end
end
if #ARGV >= first then put(unpack(ARGV, first)) end
if n > 0 then put('labels', labels) end
touch()
return {'ok', view()}
