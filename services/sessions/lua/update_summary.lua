-- UPDATE_SUMMARY (ARGV: lease token (0: not fenced), summary text, how many messages it covers): sets the summary;
-- 'invalid' when it covers more messages than there are.

local token, text, covered = tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9])
if not mine() then return {'not_found'} end
if not fenced(token) then return {'stale'} end
local count = message_count()
if covered > count then return {'invalid', count} end
put('summary_text', text, 'summary_covered', covered, 'summary_at', now)
touch()
return {'ok', now}
