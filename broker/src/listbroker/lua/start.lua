-- KEYS: processing, started. ARGV: payloads (a message, or a batch's messages).
-- Marks deliveries as started, before their actor runs: should the consumer die, the reaper
-- (reap.lua) counts a lost delivery for these only, not for those merely prefetched. A
-- payload this consumer no longer holds (a reaper gave it back meanwhile) is not marked.
-- Returns the number marked.
local p, started = KEYS[1], KEYS[2]
local n = 0
for i = 1, #ARGV do
  if redis.call('LPOS', p, ARGV[i], 'RANK', -1) then
    redis.call('HINCRBY', started, ARGV[i], 1)
    n = n + 1
  end
end
return n
