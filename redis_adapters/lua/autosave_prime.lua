if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'user', ARGV[1], 'status', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
