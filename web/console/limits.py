"""The console's sign-in limit: wrong tokens slow their address down and show; a right one signs in.

A right admin token always signs in, at once, whatever its address did before: it is
checked first and never counted. Only wrong tokens are, per client address
(`console:signin:address:<address>`, a hash of the `console` family,
redis_adapters/keyspace.py): the first `FREE_ATTEMPTS` - 1 are answered 401 at once, then
each one answered 401 makes the next wait twice as long, 1 s, 2 s, 4 s ... up to
`MAX_WAIT_MS`; a wrong token sent while its address waits is answered 429 with
Retry-After. An address left alone `FORGET_AFTER_MS` is forgotten.

What this is for, and what it is not (docs/security.md, "The sign-in"): it cannot stop a guesser
who ignores Retry-After from learning that each guess is wrong (a right token would have
signed in), and must not stop the admin; the barrier is the token's randomness (at least
128 bits: no rate of guessing finds it). The limit makes guessing visible (each wrong token
counted in `mi_console_signin_attempts_total`, audit rows, the console's alarm) and tells
a guesser to slow down.

Counting and deciding are one Lua step (lua/signin_attempt.lua): concurrent guesses are
each counted before any is answered, so no burst gets more 401s than a sequence would. The
same step counts the wrong tokens of every address in the alarm's hash
(`console:signin:guessing`), which also lives `FORGET_AFTER_MS` after the last one.
The address is `request.remote_addr`: the TCP peer, or, with TRUSTED_PROXIES set, what
that many proxies put in X-Forwarded-For (web/hosts.py, ProxyFix).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import cast

import redis

from redis_adapters.keyspace import ConsoleKeys
from redis_adapters.lua_scripts import lua_source

#: Wrong tokens of an address before the first wait (the one that reaches it sets a 1 s wait).
FREE_ATTEMPTS = 5
#: The first wait; each further wrong token answered 401 doubles it, up to `MAX_WAIT_MS`.
FIRST_WAIT_MS = 1_000
MAX_WAIT_MS = 60_000
#: An address (and the alarm) left alone this long is forgotten.
FORGET_AFTER_MS = 15 * 60_000
#: Wrong tokens of all addresses within FORGET_AFTER_MS that raise the alarm even when no
#: address was refused (guesses spread over many addresses).
ALARM_WRONG_TOKENS = 20

_SCRIPT = lua_source("web.console", "signin_attempt")


@dataclass(frozen=True)
class WrongToken:
    """How a wrong token was answered."""

    #: True: 401 (the token was wrong); False: 429, the address waits.
    answered: bool
    #: 429: how long until the address is answered again; 401: how long the next one waits.
    wait_s: float
    #: Wrong tokens of this address answered 401, and refused with 429, since it was last forgotten.
    failures: int
    refused: int


@dataclass(frozen=True)
class Guessing:
    """Wrong tokens of every address within FORGET_AFTER_MS of the last one."""

    wrong: int
    refused: int
    last_address: str
    last_ms: int

    @property
    def alarming(self) -> bool:
        return self.refused > 0 or self.wrong >= ALARM_WRONG_TOKENS


class SigninLimiter:
    """The buckets on one Redis client; raises `redis.RedisError` when Redis does not answer
    (the console then refuses the sign-in with 503: no session store without it)."""

    def __init__(self, client: redis.Redis, keys: ConsoleKeys) -> None:
        self.client = client
        self.keys = keys
        self.script = client.register_script(_SCRIPT)

    def wrong_token(self, address: str, *, now_ms: int | None = None) -> WrongToken:
        """Count a wrong token from `address`; how to answer it."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        reply = cast(
            list[int],
            self.script(
                keys=[self.keys.signin_address(address), self.keys.signin_guessing],
                args=[now_ms, FREE_ATTEMPTS, FIRST_WAIT_MS, MAX_WAIT_MS, FORGET_AFTER_MS, address],
            ),
        )
        answered, wait_ms, failures, refused = (int(value) for value in reply)
        return WrongToken(answered=answered == 1, wait_s=wait_ms / 1000, failures=failures, refused=refused)

    def guessing(self) -> Guessing | None:
        """The wrong tokens of the last FORGET_AFTER_MS, or None when there were none."""
        raw = cast(dict[bytes, bytes], self.client.hgetall(self.keys.signin_guessing))
        if not raw:
            return None
        try:
            return Guessing(
                wrong=int(raw.get(b"wrong", b"0")),
                refused=int(raw.get(b"refused", b"0")),
                last_address=raw.get(b"last_address", b"").decode("utf-8", "replace"),
                last_ms=int(raw.get(b"last_ms", b"0")),
            )
        except ValueError:  # an odd entry (docs/security.md: Redis entries are data) still alarms
            return Guessing(wrong=ALARM_WRONG_TOKENS, refused=0, last_address="?", last_ms=0)
