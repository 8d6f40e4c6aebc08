-- A submission begins: the record closed to saves (status 3) for SEAL_TTL_S, and the answers
-- autosaved until then returned (no save can land after them: the seal refuses it).
-- One script, not a MULTI of HSET, EXPIRE and HGETALL: the same atomic step, one round trip.
-- KEYS: record cache, answers hash. ARGV: user id, status (3), ttl s.
redis.call('HSET', KEYS[1], 'user', ARGV[1], 'status', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return redis.call('HGETALL', KEYS[2])
