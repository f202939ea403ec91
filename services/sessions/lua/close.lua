-- CLOSE (ARGV: user ('' for any), how long the deleted log's marker stays, s): deletes the session, unless it is
-- another user's ('kept').

local user, wake_s = ARGV[7], tonumber(ARGV[8])
if not mine() then return {'not_found'} end
if user ~= '' and redis.call('HGET', S, 'user_id') ~= user then return {'kept'} end
delete_session(wake_s)
return {'ok'}
