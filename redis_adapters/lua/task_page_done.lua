-- One page of an admin task is done (redis_adapters/task_store.py): advance its cursor and add
-- the page's counts, only if the cursor is still where this page began. The task's message is
-- delivered at least once: a run whose message was redelivered while it still ran walks the
-- same page as the other run, and only the first to record it counts it.
-- KEYS[1] the task's hash
-- ARGV[1] the cursor the page began after   ARGV[2] the page's last id
-- ARGV[3] regenerated   ARGV[4] skipped   ARGV[5] the task's lifetime, s
-- Returns 1: recorded; 0: another run recorded this page (or the task is gone).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local current = redis.call('HGET', KEYS[1], 'cursor') or '0'
if current == '' then
  current = '0'
end
if current ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'cursor', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'pages', 1)
redis.call('HINCRBY', KEYS[1], 'regenerated', tonumber(ARGV[3]))
redis.call('HINCRBY', KEYS[1], 'skipped', tonumber(ARGV[4]))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))
return 1
