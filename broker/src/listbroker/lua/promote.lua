-- uses: _now _index
-- KEYS: delayed, queue, counted. ARGV: limit.
-- Moves due messages to the queue (LPUSH, earliest due first), without the 17-character
-- unique prefix of a delayed member (scripts.DELAYED_PREFIX_LEN), credited as counted.
-- Returns {moved, server now ms, next due ms or -1}.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, m in ipairs(due) do
  local payload = string.sub(m, 18)
  redis.call('LPUSH', KEYS[2], payload)
  credit(KEYS[3], payload)
end
if #due > 0 then
  redis.call('ZREM', KEYS[1], unpack(due))
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {#due, now, tonumber(nxt[2] or -1)}
