-- Store an admin task and queue its one message, unless a task for the same filter is
-- queued or running, or too many tasks are (redis_adapters/task_store.py). One step, so two
-- concurrent calls with one filter cannot both start a task.
-- KEYS[1] the task's hash   KEYS[2] its filter's key   KEYS[3] the active tasks (zset)
-- KEYS[4] the admin queue
-- ARGV[1] now, ms   ARGV[2] how long a silent task holds its filter, ms
-- ARGV[3] most active tasks   ARGV[4] the task id   ARGV[5] its message
-- ARGV[6] its lifetime, s   ARGV[7..] the hash's fields and values
-- Returns {0, id}: created; {1, id}: the filter's task is still active; {2, n}: n are active.
local now = tonumber(ARGV[1])
local hold = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - hold)
local active = redis.call('GET', KEYS[2])
if active then
  return {1, active}
end
local count = redis.call('ZCARD', KEYS[3])
if count >= tonumber(ARGV[3]) then
  return {2, tostring(count)}
end
local fields = {}
for i = 7, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[6]))
redis.call('SET', KEYS[2], ARGV[4], 'PX', hold)
redis.call('ZADD', KEYS[3], now, ARGV[4])
redis.call('LPUSH', KEYS[4], ARGV[5])
return {0, ARGV[4]}
