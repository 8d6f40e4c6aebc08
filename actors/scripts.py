"""The broker's Lua scripts: every step that moves a message is one atomic Redis call.

Layout of a queue `Q` (e.g. `report:queue`):
- `Q`                 list, producers LPUSH, consumers take from the right (FIFO);
- `Q:processing:<id>` list per consumer, newest on the left; a message stays here from
                      the moment it is taken until its outcome is recorded;
- `Q:delayed`         sorted set of `<16 hex>|<payload>` scored by due time in ms
                      (the prefix keeps equal payloads apart);
- `Q:dead`, `Q:invalid` lists; `Q:crashed` hash payload -> deliveries lost to dead workers;
- `broker:heartbeats` sorted set of processing lists scored by last heartbeat in ms.

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

# KEYS: queue, processing, crashed. ARGV: n, acked payloads...
# Removes the acknowledged payloads, then moves up to n messages queue -> processing.
# Returns {payloads} or {payloads, crash counts} when any message ever lost a worker.
FETCH = """
local q, p, crashed = KEYS[1], KEYS[2], KEYS[3]
for i = 2, #ARGV do
  redis.call('LREM', p, -1, ARGV[i])
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

# KEYS: processing, target, crashed. ARGV: payload, mode, new payload, delay ms, member prefix.
# Records the outcome of one message atomically, but only if this consumer still holds it
# (a reaper may have given it to someone else): mode 'ack' drops it, 'push' LPUSHes the new
# payload to the target list (dead letters, quarantine), 'delay' adds it to the target
# sorted set, due now + delay. Returns 1 if the outcome was recorded, 0 if not held.
SETTLE = (
    _NOW
    + """
local p, target, crashed = KEYS[1], KEYS[2], KEYS[3]
local raw, mode = ARGV[1], ARGV[2]
if redis.call('LREM', p, -1, raw) == 0 then
  return 0
end
redis.call('HDEL', crashed, raw)
if mode == 'push' then
  redis.call('LPUSH', target, ARGV[3])
elseif mode == 'delay' then
  redis.call('ZADD', target, now + tonumber(ARGV[4]), ARGV[5] .. ARGV[3])
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

# KEYS: processing, queue, heartbeats. ARGV: acked payloads...
# Closes a consumer with nothing in flight: drops the acknowledged payloads, returns
# anything left (a message whose BLMOVE reply was lost) to the head of the queue and
# forgets the consumer.
RELEASE = """
local p, q = KEYS[1], KEYS[2]
for i = 1, #ARGV do
  redis.call('LREM', p, -1, ARGV[i])
end
local n = 0
while redis.call('LMOVE', p, q, 'LEFT', 'RIGHT') do
  n = n + 1
end
redis.call('ZREM', KEYS[3], p)
return n
"""

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

# KEYS: delayed. ARGV: delay ms, member. Returns the due time (ms).
DELAY = (
    _NOW
    + """
local due = now + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], due, ARGV[2])
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
        )
