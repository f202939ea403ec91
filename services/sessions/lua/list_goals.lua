-- LIST_GOALS: the session's goals.

if not mine() then return {'not_found'} end
return {'ok', goals()}
