"""A Redis lease: one owner at a time, renewed by its owner, released only by its owner.

Taken with ``SET key token NX PX ttl`` (a random token naming the owner, and a
millisecond expiry); renewed with a compare-and-PEXPIRE and released with a
compare-and-DEL, both Lua, so an owner whose lease expired can never extend or delete
the lease of the process that took over. Every script that changes the data a lease
protects checks the token itself (the `_owner_check` prologue, redis_adapters/lua/), so a
stale owner cannot act even between its last renewal and the moment it notices.

While a cycle works, `kept_alive` renews the lease from a thread of its own every third
of its lifetime, so a batch never outlives its lease however long it takes, and a
standby still takes over within one lifetime of the owner's death (the thread dies
with it).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from listbroker import Backoff

from redis_adapters.lua_scripts import lua_source

logger = logging.getLogger(__name__)

_RENEW = lua_source("redis_adapters", "lease_renew")

_RELEASE = lua_source("redis_adapters", "lease_release")


def new_token() -> str:
    """host:pid:random, so an operator reading the lock sees who holds it."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


class RedisLock:
    def __init__(self, client: redis.Redis, key: str, *, token: str | None = None) -> None:
        self.client = client
        self.key = key
        self.token = token or new_token()
        self.held = False
        #: How many times the lock was (re)acquired: a new acquisition means recovery first.
        self.acquisitions = 0
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def ensure(self, ttl_ms: int) -> bool:
        """Renew the lease if held, else try to take it; whether this process holds it now."""
        if self.held and self.renew(ttl_ms):
            return True
        if self.client.set(self.key, self.token, nx=True, px=ttl_ms):
            if not self.held:
                logger.info("took the lock %s as %s", self.key, self.token)
            self.held = True
            self.acquisitions += 1
            return True
        self.held = False
        return False

    def renew(self, ttl_ms: int) -> bool:
        renewed = bool(self._renew(keys=[self.key], args=[self.token, ttl_ms]))
        if self.held and not renewed:
            logger.warning("lost the lock %s (it expired or was taken over)", self.key)
        self.held = renewed
        return renewed

    @contextmanager
    def kept_alive(self, ttl_ms: int) -> Iterator[None]:
        """Renew the lease every `ttl_ms` / 3 in a background thread while the block runs.

        The renewer stops for good once the lease is lost (`held` turns False and the
        owner's next guarded step or fence stops the cycle); a Redis error is logged and
        the next renewal tried, since two more chances remain before the lease lapses.
        """
        stop = threading.Event()
        every_s = ttl_ms / 3000
        failures = Backoff(f"renewal of the lock {self.key}", logger, first_s=every_s, max_s=every_s)

        def renew_until_stopped() -> None:
            while not stop.wait(every_s):
                try:
                    if not self.renew(ttl_ms):
                        return
                except redis.RedisError as exc:
                    failures.failed(exc)  # retried at the next third, logged once
                else:
                    failures.succeeded()

        renewer = threading.Thread(target=renew_until_stopped, name=f"lease:{self.key}", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join(timeout=ttl_ms / 1000)

    def release(self) -> bool:
        """Give the lease up, if still ours (a stale owner never deletes another's)."""
        self.held = False
        return bool(self._release(keys=[self.key], args=[self.token]))

    def holder(self) -> str | None:
        value = self.client.get(self.key)
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)
