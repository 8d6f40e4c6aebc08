-- uses: _owner_check
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('SUNIONSTORE', KEYS[2], KEYS[2], KEYS[3])
  redis.call('DEL', KEYS[3])
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {0}
end
redis.call('RENAME', KEYS[2], KEYS[3])
return {redis.call('SCARD', KEYS[3])}
