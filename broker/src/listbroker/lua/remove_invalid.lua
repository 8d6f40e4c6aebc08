-- KEYS: invalid, invalid meta. ARGV: pairs of (entry, its meta field).
-- Removes one occurrence of each entry from the quarantine; an entry of which no copy is left
-- loses its meta field (why and when it was quarantined). Returns 1 or 0 per entry (0: it was
-- no longer there).
local invalid, meta = KEYS[1], KEYS[2]
local done = {}
for i = 1, #ARGV, 2 do
  local removed = redis.call('LREM', invalid, 1, ARGV[i])
  if removed > 0 and not redis.call('LPOS', invalid, ARGV[i]) then
    redis.call('HDEL', meta, ARGV[i + 1])
  end
  done[#done + 1] = removed
end
return done
