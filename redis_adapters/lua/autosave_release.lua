-- A submission ended. One script, not a MULTI: the same atomic step, a cheaper call for the client.
-- KEYS: record cache, answers hash, progress hash, answers dirty, progress dirty.
-- ARGV: record id, submitted ("1" or "0"), generating status (3), record cache ttl s.
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('SREM', KEYS[4], ARGV[1])
  redis.call('SREM', KEYS[5], ARGV[1])
  -- Keep the record closed to saves for as long as a stale "2" could be cached.
  redis.call('HSET', KEYS[1], 'status', ARGV[3])
  redis.call('EXPIRE', KEYS[1], ARGV[4])
else
  redis.call('DEL', KEYS[1])
end
return 1
