-- uses: _now _index
-- KEYS: delayed, jobs. ARGV: delay ms, member, job key field. Returns the due time (ms).
local due = now + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], due, ARGV[2])
track(KEYS[2], ARGV[3], string.sub(ARGV[2], 18))
return due
