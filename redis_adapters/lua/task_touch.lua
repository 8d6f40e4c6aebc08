-- A task made progress or ended (redis_adapters/task_store.py): keep, or release, its hold on
-- its filter and its place among the active tasks.
-- KEYS[1] its filter's key (may be absent)   KEYS[2] the active tasks (zset)
-- ARGV[1] now, ms   ARGV[2] hold, ms   ARGV[3] the task id   ARGV[4] "1": it ended
if ARGV[4] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[3])
  if redis.call('GET', KEYS[1]) == ARGV[3] then
    redis.call('DEL', KEYS[1])
  end
  return 0
end
redis.call('ZADD', KEYS[2], 'XX', tonumber(ARGV[1]), ARGV[3])
if redis.call('GET', KEYS[1]) == ARGV[3] then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
end
return 1
