-- uses: _index _started
-- KEYS: processing, queue, counted, started. ARGV: payloads (oldest first).
-- Puts messages this consumer holds but never started back at the head of the queue,
-- in their original order, without counting an attempt (credited as counted; a message
-- that could not begin, DependencyUnavailable, loses its started mark).
local n = 0
for i = #ARGV, 1, -1 do
  if redis.call('LREM', KEYS[1], -1, ARGV[i]) == 1 then
    redis.call('RPUSH', KEYS[2], ARGV[i])
    credit(KEYS[3], ARGV[i])
    unstart(KEYS[4], ARGV[i])
    n = n + 1
  end
end
return n
