-- uses: _now
-- KEYS: heartbeats. ARGV: processing lists...
for i = 1, #ARGV do
  redis.call('ZADD', KEYS[1], now, ARGV[i])
end
return now
