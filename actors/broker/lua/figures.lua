-- KEYS: heartbeats, queue, dead, delayed, invalid. ARGV: processing-list prefix of the queue.
-- One consistent reading of where a queue's messages are: {queued, dead, delayed, invalid,
-- in flight}. Read in one script because a message moves on between separate reads (queue
-- -> processing -> delayed -> queue) and would be missed, or counted twice.
local prefix = ARGV[1]
local in_flight = 0
for _, p in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if string.sub(p, 1, #prefix) == prefix then
    in_flight = in_flight + redis.call('LLEN', p)
  end
end
return {redis.call('LLEN', KEYS[2]), redis.call('LLEN', KEYS[3]), redis.call('ZCARD', KEYS[4]),
        redis.call('LLEN', KEYS[5]), in_flight}
