"""The console's sign-in limit: failed guesses slow their source down, the right admin gets in.

Two kinds of bucket, each a Redis hash of the `console` family (redis_adapters/keyspace.py):

* per client address (`console:signin:address:<address>`), for browsers that never signed
  in: the first `FREE_ATTEMPTS` - 1 attempts wait for nothing, then each one makes the
  next wait twice as long, 1 s, 2 s, 4 s ... up to `MAX_WAIT_MS`; an attempt made while
  its bucket waits is refused unevaluated (429 with Retry-After), so a guesser gets about
  one guess a minute, never a lock-out of minutes;
* per credential (`console:signin:credential:<fingerprint>`), for browsers holding the
  device cookie (web/console/devices.py) that a successful sign-in with that admin token
  left: their attempts are counted there, not against the address. Behind a proxy every
  admin shares one address; a stranger hammering it slows that address down, not the
  admins whose browser signed in before (OWASP's "device cookies").

Checking the wait and counting the attempt are one Lua step (lua/signin_attempt.lua):
concurrent guesses are each counted before any of them is evaluated. Every attempt is
counted when it is admitted; a success resets a credential's bucket (the device proved
it holds the token); an address bucket is forgotten `FORGET_AFTER_MS` after its last
attempt. The address is `request.remote_addr`: the TCP peer, or, with TRUSTED_PROXIES
set, what that many proxies put in X-Forwarded-For (web/__init__.py, ProxyFix).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import cast

import redis

from redis_adapters.lua_scripts import lua_source

#: Attempts of a bucket before the first wait (the one that reaches it sets a 1 s wait).
FREE_ATTEMPTS = 5
#: The first wait; each further attempt doubles it, up to `MAX_WAIT_MS`.
FIRST_WAIT_MS = 1_000
MAX_WAIT_MS = 60_000
#: A bucket left alone this long is forgotten (its count starts again from zero).
FORGET_AFTER_MS = 15 * 60_000

_SCRIPT = lua_source("web.console", "signin_attempt")


@dataclass(frozen=True)
class Admission:
    #: Evaluate the attempt (True), or refuse it unevaluated (False).
    allowed: bool
    #: When refused: how long until the bucket admits an attempt again.
    retry_after_s: float


class SigninLimiter:
    """The buckets on one Redis client; raises `redis.RedisError` when Redis does not answer
    (the console then refuses the sign-in with 503: no limit, no sign-in)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.script = client.register_script(_SCRIPT)

    def admit(self, bucket: str, *, now_ms: int | None = None) -> Admission:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        reply = cast(
            list[int],
            self.script(
                keys=[bucket], args=[now_ms, FREE_ATTEMPTS, FIRST_WAIT_MS, MAX_WAIT_MS, FORGET_AFTER_MS]
            ),
        )
        allowed, wait_ms = int(reply[0]), int(reply[1])
        return Admission(allowed=allowed == 1, retry_after_s=0.0 if allowed else wait_ms / 1000)

    def reset(self, bucket: str) -> None:
        self.client.delete(bucket)
