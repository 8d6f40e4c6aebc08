-- uses: _owner_check
local n = redis.call('SCARD', KEYS[3])
if n > 0 then
  redis.call('SUNIONSTORE', KEYS[2], KEYS[2], KEYS[3])
end
redis.call('DEL', KEYS[3])
return {n}
