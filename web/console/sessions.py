"""Server-side console sessions: the cookie names a session, Redis holds it.

A sign-in stores `console:session:<digest>` (a hash: the admin token's fingerprint, the
name given, the sign-in time) for `LIFETIME_S`, and puts the session's random id in
Flask's signed cookie. Each request reads the hash back: signing out deletes it, so a
copy of the cookie taken before sign-out opens nothing afterwards; removing a token from
ADMIN_TOKENS ends its sessions at the next request (the fingerprint is checked each
time, web/console/signin.py). The key holds a digest of the id, not the id itself: what
Redis shows (KEYS, a dump) cannot be replayed as a cookie.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import cast

import redis

from redis_adapters.keyspace import ConsoleKeys

#: A console session lasts a working day from its sign-in; then the admin signs in again.
LIFETIME_S = 8 * 3600
#: Bytes of randomness of a session id.
ID_BYTES = 32


@dataclass(frozen=True)
class StoredSession:
    fingerprint: str
    name: str
    since: int


class SessionStore:
    def __init__(self, client: redis.Redis, keys: ConsoleKeys) -> None:
        self.client = client
        self.keys = keys

    def _key(self, session_id: str) -> str:
        return self.keys.session(hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).hexdigest())

    def create(self, fingerprint: str, name: str) -> str:
        """A new session; its id, for the cookie."""
        session_id = secrets.token_urlsafe(ID_BYTES)
        key = self._key(session_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, mapping={"admin": fingerprint, "name": name, "since": int(time.time())})
        pipe.expire(key, LIFETIME_S)
        pipe.execute()
        return session_id

    def get(self, session_id: str) -> StoredSession | None:
        """The live session of `session_id`; None when it ended (signed out, expired) or is unreadable."""
        raw = cast(dict[bytes, bytes], self.client.hgetall(self._key(session_id)))
        try:
            return StoredSession(
                fingerprint=raw[b"admin"].decode(), name=raw[b"name"].decode(), since=int(raw[b"since"])
            )
        except (KeyError, ValueError):  # ValueError: UnicodeDecodeError included
            return None

    def end(self, session_id: str) -> None:
        self.client.delete(self._key(session_id))
