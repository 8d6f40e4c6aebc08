-- uses: _now
-- KEYS: heartbeats. ARGV: timeout ms, limit.
-- The processing lists whose consumer has been silent for longer than the timeout (read
-- on the server's clock); the reaper then reaps each with reap.lua, its keys declared.
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]), 'LIMIT', 0, tonumber(ARGV[2]))
