-- uses: _index
-- KEYS: queue, jobs, dead, counted. ARGV: job key field, payloads... (LPUSHed in this order).
-- The producer's enqueue (see enqueue.lua), and every dead letter whose job key is one of
-- the payloads' is dropped in the same step (a regenerated job supersedes its dead letter).
-- Returns the number of dead letters dropped.
local field = ARGV[1]
ensure_counted(KEYS[1], KEYS[2], KEYS[4], field)
local revived, k = {}, 0
for i = 2, #ARGV do
  redis.call('LPUSH', KEYS[1], ARGV[i])
  track(KEYS[2], field, ARGV[i])
  k = k + credit_new(KEYS[4], field, ARGV[i])
  local key = job_key(ARGV[i], field)
  if key then revived[key] = true end
end
credited(KEYS[4], k)
if next(revived) == nil then return 0 end
local dropped = 0
for _, entry in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  local key = job_key(entry, field)
  if key and revived[key] then
    dropped = dropped + redis.call('LREM', KEYS[3], 1, entry)
  end
end
return dropped
