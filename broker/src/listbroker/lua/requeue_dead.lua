-- uses: _index
-- KEYS: dead, queue, jobs, counted. ARGV: job key field, then pairs (dead entry, fresh payload).
-- For each pair whose entry is still in the dead list: remove it and LPUSH the fresh
-- payload, counted in the index (which replaces a 'dead' mark). Returns a 0/1 per pair.
ensure_counted(KEYS[2], KEYS[3], KEYS[4], ARGV[1])
local out, k = {}, 0
for i = 2, #ARGV, 2 do
  if redis.call('LREM', KEYS[1], 1, ARGV[i]) == 1 then
    redis.call('LPUSH', KEYS[2], ARGV[i + 1])
    track(KEYS[3], ARGV[1], ARGV[i + 1])
    k = k + credit_new(KEYS[4], ARGV[1], ARGV[i + 1])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
credited(KEYS[4], k)
return out
