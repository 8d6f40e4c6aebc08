local room = tonumber(ARGV[1]) - redis.call('LLEN', KEYS[1])
local n = #ARGV - 1
if room <= 0 then return 0 end
if room < n then n = room end
redis.call('LPUSH', KEYS[1], unpack(ARGV, 2, n + 1))
return n
