-- One wrong console sign-in token from one client address (web/console/limits.py): count it
-- and decide its answer in one step, so concurrent guesses cannot all pass a check made
-- before any of them is counted. A right token never comes here.
-- KEYS[1]  the address's bucket (console:signin:address:<address>)
-- KEYS[2]  the alarm (console:signin:guessing): wrong and refused tokens of every address
-- ARGV[1]  now, ms          ARGV[2]  free failures (the first ones wait for nothing)
-- ARGV[3]  first wait, ms   ARGV[4]  longest wait, ms   ARGV[5]  forget a bucket after, ms
-- ARGV[6]  the address
-- Returns {answered, wait_ms, failures, refused}: answered 1 (401; the next wrong token waits
-- wait_ms) or 0 (429: the address waits, retry after wait_ms); failures answered 401 and
-- refused 429 of this address since its bucket was last forgotten.
local now = tonumber(ARGV[1])
local forget = tonumber(ARGV[5])
local state = redis.call('HMGET', KEYS[1], 'n', 'until', 'refused')
local n = tonumber(state[1]) or 0
local not_before = tonumber(state[2]) or 0
local refused = tonumber(state[3]) or 0
redis.call('HINCRBY', KEYS[2], 'wrong', 1)
redis.call('HSET', KEYS[2], 'last_ms', now, 'last_address', ARGV[6])
redis.call('PEXPIRE', KEYS[2], forget)
if now < not_before then
  refused = refused + 1
  redis.call('HSET', KEYS[1], 'refused', refused)
  redis.call('PEXPIRE', KEYS[1], forget)
  redis.call('HINCRBY', KEYS[2], 'refused', 1)
  return {0, not_before - now, n, refused}
end
n = n + 1
local free = tonumber(ARGV[2])
local wait = 0
if n >= free then
  wait = math.floor(math.min(tonumber(ARGV[3]) * 2 ^ (n - free), tonumber(ARGV[4])))
end
redis.call('HSET', KEYS[1], 'n', n, 'until', now + wait)
redis.call('PEXPIRE', KEYS[1], forget)
return {1, wait, n, refused}
