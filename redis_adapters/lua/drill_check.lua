local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(v) > now then return 1 end
return 0
