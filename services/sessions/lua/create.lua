-- CREATE (ARGV: user, topic, agent, role, skills, config, delegated from, '1' when the session has an identity, '1' to
-- reuse the identity's session, the session the store read for the identity (`expected`, whose keys follow the
-- session's in KEYS), scope as JSON, labels as JSON, the origin of a fork as JSON ('' for none), the stored agent's version ('0': a built-in)): creates the session, or answers the identity's session ('reused'); 'moved' when
-- the identity changed since the store read it, 'collision' when the id is taken.

local user, topic, agent, role, skills, config, delegated_from, identity, reuse, expected, scope, labels =
  ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13], ARGV[14], ARGV[15], ARGV[16], ARGV[17], ARGV[18]
local forked_from = ARGV[19] or ''
local agent_version = ARGV[20] or '0'
if reuse == '1' and identity == '1' then
  local existing = redis.call('GET', K.i) or ''
  if existing == sid and mine() then return {'ok', sid, view()} end  -- a retried create
  if existing ~= expected then return {'moved'} end  -- the identity changed since the store read it
  if existing ~= '' then
    local E = keyset(KEYS_PER_SESSION)  -- the keys of `expected`
    if redis.call('HGET', E.s, 'tenant_id') == tenant then return {'reused', existing, view_of(E)} end
  end
end
if redis.call('EXISTS', S) == 1 then
  if mine() then return {'ok', sid, view()} end  -- a retried create
  return {'collision'}
end
redis.call('HSET', S, 'session_id', sid, 'tenant_id', tenant, 'user_id', user, 'topic_id', topic,
  'agent', agent, 'role_id', role, 'skills', skills, 'prompt_hash', '', 'config', config,
  'deleg_from', delegated_from, 'deleg_count', 0, 'created_at', now, 'last_token', 0, 'ikey', identity,
  'scope', scope, 'labels', labels or '{}', 'mc', 0, 'ng', 1, 'nq', 1, 'jtn', 0)
-- `mc`: the message count, kept so reads need no LLEN; `ng`: no goal yet, `nq`: no turn queued since the queue
-- was last found empty, so a turn's start reads neither; `jtn`: the turns the journal holds (no ZCARD)
if forked_from ~= '' then redis.call('HSET', S, 'forked_from', forked_from) end
if agent_version ~= '0' then redis.call('HSET', S, 'av', agent_version) end
H = nil  -- written above: `meta()` reads it again
if identity == '1' then redis.call('SET', K.i, sid) end  -- the newest session answers for its identity
touch()
return {'ok', sid, view()}
