-- uses: _index _started
-- KEYS: queue, processing, crashed, jobs, started. ARGV: n, job key pattern, acked payloads...
-- Removes the acknowledged payloads, then moves up to n messages queue -> processing.
-- An acknowledged payload's started mark (start.lua) goes with it.
-- Returns {payloads} or {payloads, crash counts} when any message ever lost a worker.
local q, p, crashed = KEYS[1], KEYS[2], KEYS[3]
for i = 3, #ARGV do
  if redis.call('LREM', p, -1, ARGV[i]) == 1 then
    untrack(KEYS[4], ARGV[2], ARGV[i], false)
    unstart(KEYS[5], ARGV[i])
  end
end
local out = {}
for i = 1, tonumber(ARGV[1]) do
  local m = redis.call('LMOVE', q, p, 'RIGHT', 'LEFT')
  if not m then break end
  out[i] = m
end
if #out > 0 and redis.call('EXISTS', crashed) == 1 then
  return {out, redis.call('HMGET', crashed, unpack(out))}
end
return {out}
