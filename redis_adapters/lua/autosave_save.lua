local cached = redis.call('HMGET', KEYS[1], 'user', 'status')
if not cached[1] then
  return {'miss'}
end
if cached[1] ~= ARGV[2] then
  return {'owner'}
end
if cached[2] ~= '2' then
  return {'status'}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local last = tonumber(redis.call('HGET', KEYS[3], 't') or '0')
if now <= last then
  now = last + 1
end
local stamp = string.format('%d', now)
local fields = {}
for i = 5, #ARGV, 2 do
  fields[#fields + 1] = ARGV[i]
  fields[#fields + 1] = ARGV[i + 1] .. ':' .. stamp
end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('SADD', KEYS[4], ARGV[1])
local n = redis.call('HLEN', KEYS[2])
redis.call('HSET', KEYS[3], 'q', ARGV[4], 'n', n, 'a', stamp, 't', stamp)
redis.call('EXPIRE', KEYS[3], ARGV[3])
redis.call('SADD', KEYS[5], ARGV[1])
return {'ok', stamp, n}
