-- KEYS: heartbeats, queue, dead, delayed, invalid, processing lists of the queue...
-- ARGV: processing-list prefix of the queue.
-- One consistent reading of where a queue's messages are: {queued, dead, delayed, invalid,
-- in flight}. Read in one script because a message moves on between separate reads (queue
-- -> processing -> delayed -> queue) and would be missed, or counted twice. The caller
-- declares the processing lists it believes live; if the heartbeat set says otherwise
-- (a consumer came or went), returns {-1, the live lists} and the caller asks again.
local prefix = ARGV[1]
local declared = {}
for i = 6, #KEYS do
  declared[KEYS[i]] = true
end
local live, same = {}, true
for _, p in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if string.sub(p, 1, #prefix) == prefix then
    live[#live + 1] = p
    if not declared[p] then same = false end
  end
end
if not same or #live ~= #KEYS - 5 then
  return {-1, live}
end
local in_flight = 0
for i = 6, #KEYS do
  in_flight = in_flight + redis.call('LLEN', KEYS[i])
end
return {redis.call('LLEN', KEYS[2]), redis.call('LLEN', KEYS[3]), redis.call('ZCARD', KEYS[4]),
        redis.call('LLEN', KEYS[5]), in_flight}
