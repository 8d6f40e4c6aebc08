-- Prologue: track / untrack, one more / one fewer job alive for the payload's job key in
-- the index `Q:jobs`. Untracking never touches a 'dead' mark (scripts.DEAD_MARK) and
-- drops the field at zero; a payload whose key is not counted (another producer's) is
-- floored at zero. An empty pattern means the queue keeps no index.
local function track(jobs, pattern, payload)
  if pattern == '' then return end
  local key = string.match(payload, pattern)
  if not key then return end
  local n = tonumber(redis.call('HGET', jobs, key)) or 0
  redis.call('HSET', jobs, key, n + 1)
end
local function untrack(jobs, pattern, payload, mark)
  if pattern == '' then return end
  local key = string.match(payload, pattern)
  if not key then return end
  local n = tonumber(redis.call('HGET', jobs, key))
  if n and n > 1 then
    redis.call('HSET', jobs, key, n - 1)
  elseif mark then
    redis.call('HSET', jobs, key, 'dead')
  elseif n then
    redis.call('HDEL', jobs, key)
  end
end
