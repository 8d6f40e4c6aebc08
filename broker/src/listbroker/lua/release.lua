-- uses: _index
-- KEYS: processing, queue, heartbeats, jobs, counted, started. ARGV: job key field, acked
-- payloads...
-- Closes a consumer with nothing in flight: drops the acknowledged payloads, returns
-- anything left (a message whose fetch reply was lost) to the head of the queue, credited
-- as counted, and forgets the consumer (and its started marks).
local p, q = KEYS[1], KEYS[2]
for i = 2, #ARGV do
  if redis.call('LREM', p, -1, ARGV[i]) == 1 then
    untrack(KEYS[4], ARGV[1], ARGV[i], false)
  end
end
local n = 0
while true do
  local m = redis.call('LMOVE', p, q, 'LEFT', 'RIGHT')
  if not m then break end
  credit(KEYS[5], m)
  n = n + 1
end
redis.call('ZREM', KEYS[3], p)
redis.call('DEL', KEYS[6])
return n
