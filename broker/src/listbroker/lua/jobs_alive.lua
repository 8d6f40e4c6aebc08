-- uses: _index
-- KEYS: queue, jobs, counted. ARGV: job key field, job key.
-- How many jobs of the key are alive, whoever queued them (0 for none or a 'dead' mark).
-- When the queue holds more copies than are credited as counted (another producer LPUSHed
-- jobs not fetched yet), every such copy is counted and credited first: the one step that
-- reads the whole queue, taken only then (a dead letter's "was it the last job?").
local q, jobs, counted, field = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
if field ~= '' and redis.call('LLEN', q) > (tonumber(redis.call('HGET', counted, 'n')) or 0) then
  keeps_index(counted, field)
  local copies = {}
  for _, m in ipairs(redis.call('LRANGE', q, 0, -1)) do
    copies[m] = (copies[m] or 0) + 1
  end
  for m, k in pairs(copies) do
    for _ = (tonumber(redis.call('HGET', counted, '=' .. m)) or 0) + 1, k do
      track(jobs, field, m)
      credit(counted, m)
    end
  end
end
return tonumber(redis.call('HGET', jobs, ARGV[2])) or 0
