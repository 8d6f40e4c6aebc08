-- uses: _index _started
-- KEYS: queue, processing, crashed, jobs, counted, started. ARGV: n, job key field,
-- acked payloads...
-- Removes the acknowledged payloads (and their started marks, start.lua), then moves up to
-- n messages queue -> processing, counting in the index each one no producer counted
-- (another producer's LPUSH).
-- Returns {payloads} or {payloads, crash counts} when any message ever lost a worker.
local q, p, crashed = KEYS[1], KEYS[2], KEYS[3]
for i = 3, #ARGV do
  if redis.call('LREM', p, -1, ARGV[i]) == 1 then
    untrack(KEYS[4], ARGV[2], ARGV[i], false)
    unstart(KEYS[6], ARGV[i])
  end
end
ensure_counted(q, KEYS[4], KEYS[5], ARGV[2])
local out, spent = {}, 0
for i = 1, tonumber(ARGV[1]) do
  local m = redis.call('LMOVE', q, p, 'RIGHT', 'LEFT')
  if not m then break end
  spent = spent + take(KEYS[5], KEYS[4], ARGV[2], m)
  out[i] = m
end
if spent > 0 then redis.call('HINCRBY', KEYS[5], 'n', -spent) end
if #out > 0 and redis.call('EXISTS', crashed) == 1 then
  return {out, redis.call('HMGET', crashed, unpack(out))}
end
return {out}
