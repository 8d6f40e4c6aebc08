"""The broker's Lua scripts: every step that moves a message is one atomic Redis call.

Layout of a queue `Q` (e.g. `report:queue`):
- `Q`                 list, producers LPUSH, consumers take from the right (FIFO);
- `Q:processing:<id>` list per consumer, newest on the left; a message stays here from
                      the moment it is taken until its outcome is recorded;
- `Q:delayed`         sorted set of `<16 hex>|<payload>` scored by due time in ms
                      (the prefix keeps equal payloads apart);
- `Q:dead`, `Q:invalid` lists; `Q:crashed` hash payload -> deliveries lost to dead workers;
- `broker:heartbeats` sorted set of processing lists scored by last heartbeat in ms;
- `Q:jobs`            hash job key -> number of jobs alive for it (queued, in flight or
                      delayed), or `dead` (see below). Kept only for a queue whose codec
                      names a job key (a Lua pattern capturing it from the payload, passed
                      to the scripts; '' means no index). Every script that creates or
                      ends a job updates it in the same atomic step, so "does record 42
                      have a job?" is one HGET, and a Redis that lost its data lost the
                      index with the jobs. A dead letter whose follow-up (e.g. the record's
                      status) could not be confirmed leaves `dead` behind once no other job
                      is alive for the key, for a reconciler to finish.

All times come from the Redis server's clock (TIME), so workers on different hosts agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from redis.commands.core import Script

#: Length of the unique prefix of a delayed member, "0123456789abcdef|".
DELAYED_PREFIX_LEN = 17

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

#: Value of a job key in `Q:jobs` after a dead letter whose follow-up was not confirmed.
DEAD_MARK = "dead"

# track / untrack: one more / one fewer job alive for the payload's job key. Untracking
# never touches a `dead` mark and drops the field at zero; a payload whose key is not
# counted (another producer's) is floored at zero.
_INDEX = (
    """
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
    redis.call('HSET', jobs, key, '"""
    + DEAD_MARK
    + """')
  elseif n then
    redis.call('HDEL', jobs, key)
  end
end
"""
)

# KEYS: queue, processing, crashed, jobs. ARGV: n, job key pattern, acked payloads...
# Removes the acknowledged payloads, then moves up to n messages queue -> processing.
# Returns {payloads} or {payloads, crash counts} when any message ever lost a worker.
FETCH = (
    _INDEX
    + """
local q, p, crashed = KEYS[1], KEYS[2], KEYS[3]
for i = 3, #ARGV do
  if redis.call('LREM', p, -1, ARGV[i]) == 1 then
    untrack(KEYS[4], ARGV[2], ARGV[i], false)
  end
end
local out = {}
for i = 1, tonumber(ARGV[1]) do
  local m = redis.call('LMOVE', q, p, 'RIGHT', 'LEFT')
  if not m then break end
  out[i] = m
end
if #out > 0 and redis.call('EXISTS', crashed) == 1 then
  return {out, redis.call('HMGET', crashed, unpack(out))}
end
return {out}
"""
)

# KEYS: processing, target, crashed, jobs. ARGV: payload, mode, new payload, delay ms,
# member prefix, job key pattern, '1' if a dead letter's follow-up is unconfirmed.
# Records the outcome of one message atomically, but only if this consumer still holds it
# (a reaper may have given it to someone else): mode 'ack' drops it, 'push' LPUSHes the new
# payload to the target list (dead letters, quarantine), 'delay' adds it to the target
# sorted set, due now + delay (the job lives on: the index is unchanged). Returns 1 if the
# outcome was recorded, 0 if not held.
SETTLE = (
    _NOW
    + _INDEX
    + """
local p, target, crashed, jobs = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local raw, mode, pattern = ARGV[1], ARGV[2], ARGV[6]
if redis.call('LREM', p, -1, raw) == 0 then
  return 0
end
redis.call('HDEL', crashed, raw)
if mode == 'push' then
  redis.call('LPUSH', target, ARGV[3])
  untrack(jobs, pattern, raw, ARGV[7] == '1')
elseif mode == 'delay' then
  redis.call('ZADD', target, now + tonumber(ARGV[4]), ARGV[5] .. ARGV[3])
  track(jobs, pattern, ARGV[3])
  untrack(jobs, pattern, raw, false)
else
  untrack(jobs, pattern, raw, false)
end
return 1
"""
)

# KEYS: processing, queue. ARGV: payloads (oldest first).
# Puts messages this consumer holds but never started back at the head of the queue,
# in their original order, without counting an attempt.
REQUEUE = """
local n = 0
for i = #ARGV, 1, -1 do
  if redis.call('LREM', KEYS[1], -1, ARGV[i]) == 1 then
    redis.call('RPUSH', KEYS[2], ARGV[i])
    n = n + 1
  end
end
return n
"""

# KEYS: processing, queue, heartbeats, jobs. ARGV: job key pattern, acked payloads...
# Closes a consumer with nothing in flight: drops the acknowledged payloads, returns
# anything left (a message whose BLMOVE reply was lost) to the head of the queue and
# forgets the consumer.
RELEASE = (
    _INDEX
    + """
local p, q = KEYS[1], KEYS[2]
for i = 2, #ARGV do
  if redis.call('LREM', p, -1, ARGV[i]) == 1 then
    untrack(KEYS[4], ARGV[1], ARGV[i], false)
  end
end
local n = 0
while redis.call('LMOVE', p, q, 'LEFT', 'RIGHT') do
  n = n + 1
end
redis.call('ZREM', KEYS[3], p)
return n
"""
)

# KEYS: queue, jobs. ARGV: job key pattern, payloads... (LPUSHed in this order).
# A producer's LPUSH that also counts the jobs in the index.
ENQUEUE = (
    _INDEX
    + """
for i = 2, #ARGV do
  redis.call('LPUSH', KEYS[1], ARGV[i])
  track(KEYS[2], ARGV[1], ARGV[i])
end
return #ARGV - 1
"""
)

# KEYS: queue, jobs. ARGV: job key pattern, payloads...
# The reconciler's step: LPUSHes (and counts) each payload whose job key has no job alive
# and no dead mark. Returns {job keys enqueued, job keys carrying a dead mark}.
ENQUEUE_MISSING = (
    _INDEX
    + """
local enqueued, dead = {}, {}
for i = 2, #ARGV do
  local key = string.match(ARGV[i], ARGV[1])
  if key then
    local v = redis.call('HGET', KEYS[2], key)
    if not v then
      redis.call('LPUSH', KEYS[1], ARGV[i])
      track(KEYS[2], ARGV[1], ARGV[i])
      enqueued[#enqueued + 1] = key
    elseif not tonumber(v) then
      dead[#dead + 1] = key
    end
  end
end
return {enqueued, dead}
"""
)

# KEYS: jobs. ARGV: job keys... Drops the dead marks of these keys (their follow-up is done).
CLEAR_DEAD_MARKS = (
    """
local n = 0
for i = 1, #ARGV do
  if redis.call('HGET', KEYS[1], ARGV[i]) == '"""
    + DEAD_MARK
    + """' then
    redis.call('HDEL', KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n
"""
)

# KEYS: delayed, queue. ARGV: limit.
# Moves due messages to the queue (LPUSH, earliest due first). Returns
# {moved, server now ms, next due ms or -1}.
PROMOTE = (
    _NOW
    + """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, m in ipairs(due) do
  redis.call('LPUSH', KEYS[2], string.sub(m, """
    + str(DELAYED_PREFIX_LEN + 1)
    + """))
end
if #due > 0 then
  redis.call('ZREM', KEYS[1], unpack(due))
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {#due, now, tonumber(nxt[2] or -1)}
"""
)

# KEYS: delayed, jobs. ARGV: delay ms, member, job key pattern. Returns the due time (ms).
DELAY = (
    _NOW
    + _INDEX
    + """
local due = now + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], due, ARGV[2])
track(KEYS[2], ARGV[3], ARGV[2])
return due
"""
)

# KEYS: heartbeats, queue, dead, delayed, invalid. ARGV: processing-list prefix of the queue.
# One consistent reading of where a queue's messages are: {queued, dead, delayed, invalid,
# in flight}. Read in one script because a message moves on between separate reads (queue
# -> processing -> delayed -> queue) and would be missed, or counted twice.
FIGURES = """
local prefix = ARGV[1]
local in_flight = 0
for _, p in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if string.sub(p, 1, #prefix) == prefix then
    in_flight = in_flight + redis.call('LLEN', p)
  end
end
return {redis.call('LLEN', KEYS[2]), redis.call('LLEN', KEYS[3]), redis.call('ZCARD', KEYS[4]),
        redis.call('LLEN', KEYS[5]), in_flight}
"""

# KEYS: heartbeats. ARGV: processing lists...
HEARTBEAT = (
    _NOW
    + """
for i = 1, #ARGV do
  redis.call('ZADD', KEYS[1], now, ARGV[i])
end
return now
"""
)

# KEYS: heartbeats. ARGV: timeout ms, limit.
# Returns the messages of consumers silent for longer than the timeout to the head of
# their queues (oldest first) and counts one lost delivery for each. Returns
# {consumers reaped, messages returned}.
REAP = (
    _NOW
    + """
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]),
                        'LIMIT', 0, tonumber(ARGV[2]))
local moved = 0
for _, p in ipairs(dead) do
  local at = string.find(p, ':processing:', 1, true)
  if at then
    local q = string.sub(p, 1, at - 1)
    local crashed = q .. ':crashed'
    while true do
      local m = redis.call('LMOVE', p, q, 'LEFT', 'RIGHT')
      if not m then break end
      redis.call('HINCRBY', crashed, m, 1)
      moved = moved + 1
    end
  end
  redis.call('ZREM', KEYS[1], p)
end
return {#dead, moved}
"""
)


@dataclass(frozen=True)
class Scripts:
    """The scripts registered on one client (EVALSHA, loaded on first use)."""

    fetch: Script
    settle: Script
    requeue: Script
    release: Script
    promote: Script
    delay: Script
    heartbeat: Script
    reap: Script
    figures: Script
    enqueue: Script
    enqueue_missing: Script
    clear_dead_marks: Script

    @classmethod
    def register(cls, client: redis.Redis) -> Scripts:
        return cls(
            fetch=client.register_script(FETCH),
            settle=client.register_script(SETTLE),
            requeue=client.register_script(REQUEUE),
            release=client.register_script(RELEASE),
            promote=client.register_script(PROMOTE),
            delay=client.register_script(DELAY),
            heartbeat=client.register_script(HEARTBEAT),
            reap=client.register_script(REAP),
            figures=client.register_script(FIGURES),
            enqueue=client.register_script(ENQUEUE),
            enqueue_missing=client.register_script(ENQUEUE_MISSING),
            clear_dead_marks=client.register_script(CLEAR_DEAD_MARKS),
        )
