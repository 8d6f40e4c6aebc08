-- uses: _owner_check
local deleted = 0
for i = 2, #ARGV, 3 do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i + 1] then
    deleted = deleted + redis.call('HDEL', KEYS[2], ARGV[i])
  end
  redis.call('LPUSH', KEYS[3], ARGV[i + 2])
end
return {deleted}
