-- uses: _owner_check
if #ARGV == 1 then
  return {redis.call('DEL', KEYS[2])}
end
return {redis.call('SREM', KEYS[2], unpack(ARGV, 2))}
