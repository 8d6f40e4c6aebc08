-- uses: _now _index _started
-- KEYS: processing, target, crashed, jobs, started. ARGV: payload, mode, new payload, delay ms,
-- member prefix, job key field, '1' if a dead letter's follow-up is unconfirmed.
-- Records the outcome of one message atomically, but only if this consumer still holds it
-- (a reaper may have given it to someone else): mode 'ack' drops it, 'push' LPUSHes the new
-- payload to the target list (dead letters, quarantine), 'delay' adds it to the target
-- sorted set, due now + delay (the job lives on: the index is unchanged). Returns 1 if the
-- outcome was recorded, 0 if not held.
local p, target, crashed, jobs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local raw, mode, field = ARGV[1], ARGV[2], ARGV[6]
if redis.call('LREM', p, -1, raw) == 0 then
  return 0
end
redis.call('HDEL', crashed, raw)
unstart(KEYS[5], raw)
if mode == 'push' then
  redis.call('LPUSH', target, ARGV[3])
  untrack(jobs, field, raw, ARGV[7] == '1')
elseif mode == 'delay' then
  redis.call('ZADD', target, now + tonumber(ARGV[4]), ARGV[5] .. ARGV[3])
  track(jobs, field, ARGV[3])
  untrack(jobs, field, raw, false)
else
  untrack(jobs, field, raw, false)
end
return 1
