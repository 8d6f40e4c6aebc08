-- uses: _index
-- KEYS: queue, jobs, counted. ARGV: job key field, payloads...
-- A reconciler's step: LPUSHes (and counts) each payload whose job key has no job alive
-- and no dead mark. Returns {job keys enqueued, job keys carrying a dead mark}.
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
return {enqueued, dead}
