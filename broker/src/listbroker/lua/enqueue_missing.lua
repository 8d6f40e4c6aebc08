-- uses: _index
-- KEYS: queue, jobs, counted. ARGV: job key field, payloads...
-- A reconciler's step: LPUSHes (and counts) each payload whose job key has no job alive
-- and no dead mark. Returns {job keys enqueued, job keys carrying a dead mark}; a dead mark
-- is first checked against another producer's jobs still waiting (count_waiting: counted, a
-- job of the key replaces its mark, and that job decides).
ensure_counted(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
local enqueued, dead, k = {}, {}, 0
for i = 2, #ARGV do
  local key = job_key(ARGV[i], ARGV[1])
  if key then
    local v = redis.call('HGET', KEYS[2], key)
    if not v then
      redis.call('LPUSH', KEYS[1], ARGV[i])
      track(KEYS[2], ARGV[1], ARGV[i])
      k = k + credit_new(KEYS[3], ARGV[1], ARGV[i])
      enqueued[#enqueued + 1] = key
    elseif not tonumber(v) then
      dead[#dead + 1] = key
    end
  end
end
credited(KEYS[3], k)
if #dead > 0 and count_waiting(KEYS[1], KEYS[2], KEYS[3], ARGV[1]) then
  local still = {}
  for _, key in ipairs(dead) do
    if not tonumber(redis.call('HGET', KEYS[2], key)) then still[#still + 1] = key end
  end
  dead = still
end
return {enqueued, dead}
