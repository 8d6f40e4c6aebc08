-- uses: _now _index
-- KEYS: processing, invalid, crashed, jobs, invalid meta. ARGV: payload, job key field,
-- meta field, reason.
-- Quarantines a payload no codec can read, atomically, if this consumer still holds it: it
-- leaves the processing list for the quarantine `Q:invalid`, and why and when (the server's
-- clock, ms) go into `Q:invalid:meta` under the field the caller names (a digest of the
-- payload), as JSON {"at", "reason"}. Returns 1 if quarantined, 0 if not held.
local p, invalid, crashed, jobs, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local raw = ARGV[1]
if redis.call('LREM', p, -1, raw) == 0 then
  return 0
end
redis.call('HDEL', crashed, raw)
redis.call('LPUSH', invalid, raw)
redis.call('HSET', meta, ARGV[3], cjson.encode({at = now, reason = ARGV[4]}))
untrack(jobs, ARGV[2], raw, false)
return 1
