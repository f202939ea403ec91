-- INDEX_REMOVE (KEYS = the index, the scope-of hash, the label-of hash, then every scope and label index the
-- sessions are in; ARGV = session ids): the sessions leave every index of their tenant.

redis.call('ZREM', KEYS[1], unpack(ARGV))
redis.call('HDEL', KEYS[2], unpack(ARGV))
redis.call('HDEL', KEYS[3], unpack(ARGV))
for i = 4, #KEYS do redis.call('ZREM', KEYS[i], unpack(ARGV)) end
return 1
