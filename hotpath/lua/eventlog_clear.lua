-- uses: _owner_check
if #ARGV > 1 then
  redis.call('LPUSH', KEYS[3], unpack(ARGV, 2))
end
redis.call('DEL', KEYS[2])
return {1}
