-- -> number of live memories (expired ones purged first)
purge()
return redis.call('HLEN', ITEMS)
