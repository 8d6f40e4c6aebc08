-- uses: _index
-- KEYS: queue, jobs, counted. ARGV: job key field, payloads... (LPUSHed in this order).
-- A producer's LPUSH that also counts the jobs in the index (and credits them as counted).
ensure_counted(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
local k = 0
for i = 2, #ARGV do
  redis.call('LPUSH', KEYS[1], ARGV[i])
  track(KEYS[2], ARGV[1], ARGV[i])
  k = k + credit_new(KEYS[3], ARGV[1], ARGV[i])
end
credited(KEYS[3], k)
return #ARGV - 1
