-- One console sign-in attempt against one bucket (web/console/limits.py): check the backoff
-- and count the attempt in one step, so concurrent guesses cannot all pass a check made
-- before any of them is counted.
-- KEYS[1]  the bucket: console:signin:address:<address> or console:signin:credential:<fp>
-- ARGV[1]  now, ms          ARGV[2]  free attempts (the first ones wait for nothing)
-- ARGV[3]  first wait, ms   ARGV[4]  longest wait, ms   ARGV[5]  forget the bucket after, ms
-- Returns {1, wait_ms}: evaluate the attempt (counted now; a success resets a credential's
-- bucket), the next one waits wait_ms; or {0, wait_ms}: refused unevaluated, retry after.
local now = tonumber(ARGV[1])
local state = redis.call('HMGET', KEYS[1], 'n', 'until')
local n = tonumber(state[1]) or 0
local not_before = tonumber(state[2]) or 0
if now < not_before then
  return {0, not_before - now}
end
n = n + 1
local free = tonumber(ARGV[2])
local wait = 0
if n >= free then
  wait = math.floor(math.min(tonumber(ARGV[3]) * 2 ^ (n - free), tonumber(ARGV[4])))
end
redis.call('HSET', KEYS[1], 'n', n, 'until', now + wait)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[5]))
return {1, wait}
