-- uses: _index
-- KEYS: queue, jobs, dead. ARGV: job key pattern, payloads... (LPUSHed in this order).
-- The producer's enqueue (see enqueue.lua), and every dead letter whose job key is one of
-- the payloads' is dropped in the same step (a regenerated job supersedes its dead letter).
-- Returns the number of dead letters dropped.
local pattern = ARGV[1]
local revived = {}
for i = 2, #ARGV do
  redis.call('LPUSH', KEYS[1], ARGV[i])
  track(KEYS[2], pattern, ARGV[i])
  if pattern ~= '' then
    local key = string.match(ARGV[i], pattern)
    if key then revived[key] = true end
  end
end
if next(revived) == nil then return 0 end
local dropped = 0
for _, entry in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  local key = string.match(entry, pattern)
  if key and revived[key] then
    dropped = dropped + redis.call('LREM', KEYS[3], 1, entry)
  end
end
return dropped
