-- uses: _now
-- KEYS: heartbeats. ARGV: timeout ms, limit.
-- Returns the messages of consumers silent for longer than the timeout to the head of
-- their queues (oldest first) and counts one lost delivery for each. Returns
-- {consumers reaped, messages returned}.
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]),
                        'LIMIT', 0, tonumber(ARGV[2]))
local moved = 0
for _, p in ipairs(dead) do
  local at = string.find(p, ':processing:', 1, true)
  if at then
    local q = string.sub(p, 1, at - 1)
    local crashed = q .. ':crashed'
    while true do
      local m = redis.call('LMOVE', p, q, 'LEFT', 'RIGHT')
      if not m then break end
      redis.call('HINCRBY', crashed, m, 1)
      moved = moved + 1
    end
  end
  redis.call('ZREM', KEYS[1], p)
end
return {#dead, moved}
