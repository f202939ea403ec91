-- GET: the session's view.

if not mine() then return {'not_found'} end
return {'ok', view()}
