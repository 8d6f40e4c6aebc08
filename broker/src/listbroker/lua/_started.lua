-- Prologue: unstart, one started delivery of the payload fewer in a consumer's `started`
-- hash (start.lua marks them), for a delivery whose outcome is recorded in the same step.
local function unstart(started, payload)
  local n = tonumber(redis.call('HGET', started, payload))
  if not n then return end
  if n > 1 then
    redis.call('HINCRBY', started, payload, -1)
  else
    redis.call('HDEL', started, payload)
  end
end
