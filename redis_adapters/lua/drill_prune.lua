local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = 0
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  local v = tonumber(flat[i + 1]) or 0
  if v <= now then redis.call('HDEL', KEYS[1], flat[i]) elseif v > last then last = v end
end
if last > 0 then redis.call('PEXPIREAT', KEYS[1], last) end
return redis.call('HGETALL', KEYS[1])
