-- DELETE (ARGV: how long the deleted log's marker stays, s): deletes the session and ends its log's readers.

if not mine() then return {'not_found'} end
delete_session(tonumber(ARGV[7]))
return {'ok'}
