-- uses: _now _index
-- KEYS: heartbeats, processing, queue, crashed, counted, started. ARGV: timeout ms.
-- If the consumer of this processing list is still silent for longer than the timeout
-- (it was listed by silent.lua; checked again here, in the same atomic step as the move),
-- returns its messages to the head of their queue (oldest first; credited as counted in
-- the job index, which counts them already), counts one lost delivery for each that had
-- started (start.lua; a message only prefetched goes back uncounted, as at a graceful
-- shutdown) and forgets the consumer and its marks. Returns the number of messages moved,
-- or -1 if the consumer beat meanwhile or another reaper got there first.
local p, q, crashed = KEYS[2], KEYS[3], KEYS[4]
local beat = redis.call('ZSCORE', KEYS[1], p)
if not beat or tonumber(beat) > now - tonumber(ARGV[1]) then
  return -1
end
local moved = 0
while true do
  local m = redis.call('LMOVE', p, q, 'LEFT', 'RIGHT')
  if not m then break end
  if (tonumber(redis.call('HGET', KEYS[6], m)) or 0) > 0 then
    redis.call('HINCRBY', KEYS[6], m, -1)
    redis.call('HINCRBY', crashed, m, 1)
  end
  credit(KEYS[5], m)
  moved = moved + 1
end
redis.call('ZREM', KEYS[1], p)
redis.call('DEL', KEYS[6])
return moved
