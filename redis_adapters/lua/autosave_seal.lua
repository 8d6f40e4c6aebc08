-- A submission begins: the record closed to saves (status 3) for SEAL_TTL_S.
-- One script, not a MULTI of HSET and EXPIRE: the same atomic step, a cheaper call for the client.
-- KEYS: record cache. ARGV: user id, status (3), ttl s.
redis.call('HSET', KEYS[1], 'user', ARGV[1], 'status', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
