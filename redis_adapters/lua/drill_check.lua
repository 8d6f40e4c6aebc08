local ends = redis.call('HMGET', KEYS[1], unpack(ARGV))
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = {}
for i = 1, #ARGV do
  local v = ends[i]
  if v and tonumber(v) > now then held[#held + 1] = ARGV[i] end
end
return held
