-- uses: _index
-- KEYS: delayed, jobs, queue, counted. ARGV: job key field, members... (each `<16 hex>|<payload>`).
-- Removes the named delayed messages: the job ends, so the index counts one fewer (another
-- producer's jobs still waiting counted first, see count_waiting), and the
-- last job of a key leaves the dead mark behind (its follow-up, e.g. a record's status, is
-- for the caller to confirm; a reconciler finishes it otherwise). Returns per member:
-- 0 no longer delayed, 1 removed (another job of its key lives on), 2 removed, its key marked.
local field = ARGV[1]
count_waiting(KEYS[3], KEYS[2], KEYS[4], field)
local out = {}
for i = 2, #ARGV do
  local m = ARGV[i]
  if redis.call('ZREM', KEYS[1], m) == 1 then
    local payload = string.sub(m, 18)
    untrack(KEYS[2], field, payload, true)
    local key = job_key(payload, field)
    if key and redis.call('HGET', KEYS[2], key) == 'dead' then
      out[#out + 1] = 2
    else
      out[#out + 1] = 1
    end
  else
    out[#out + 1] = 0
  end
end
return out
