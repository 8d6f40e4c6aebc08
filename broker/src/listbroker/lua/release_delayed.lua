-- uses: _index
-- KEYS: delayed, queue, counted. ARGV: members... (each `<16 hex>|<payload>`).
-- Releases the named delayed messages now: each member still in the set is removed and its
-- payload (without the 17-character prefix, as promote.lua) LPUSHed to the queue. The job
-- lives on, so the index is unchanged (the payload is credited as counted). Returns a 0/1
-- per member (0: no longer delayed).
local out = {}
for i = 1, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    local payload = string.sub(ARGV[i], 18)
    redis.call('LPUSH', KEYS[2], payload)
    credit(KEYS[3], payload)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
