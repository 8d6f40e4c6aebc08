-- KEYS: jobs. ARGV: job keys... Drops the dead marks (scripts.DEAD_MARK) of these keys
-- (their follow-up is done).
local n = 0
for i = 1, #ARGV do
  if redis.call('HGET', KEYS[1], ARGV[i]) == 'dead' then
    redis.call('HDEL', KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n
