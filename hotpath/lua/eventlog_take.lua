-- uses: _owner_check
local held = redis.call('LRANGE', KEYS[3], 0, -1)
if #held > 0 then
  return {1, held}
end
local out = {}
for i = 1, tonumber(ARGV[2]) do
  local item = redis.call('LMOVE', KEYS[2], KEYS[3], 'RIGHT', 'LEFT')
  if not item then
    break
  end
  out[i] = item
end
return {0, out}
