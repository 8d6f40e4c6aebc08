"""Server-side console sessions: the cookie names a session, Redis holds it.

A sign-in stores `console:session:<digest>` (a hash: the admin token's fingerprint, the
name given, the sign-in time) for `LIFETIME_S`, and puts the session's random id in
Flask's signed cookie. Each request reads the hash back: signing out deletes it, so a
copy of the cookie taken before sign-out opens nothing afterwards; removing a token from
ADMIN_TOKENS ends its sessions at the next request (the fingerprint is checked each
time, web/console/signin.py). The key holds a digest of the id, not the id itself: what
Redis shows (KEYS, a dump) cannot be replayed as a cookie.

The same hash keeps the outcomes of the session's last batch actions (`outcome:<id>` fields,
the newest `KEPT_OUTCOMES`): an action answers with a redirect to its outcome's page
(web/console/outcomes.py), so a reload shows the outcome again instead of acting again. They
end with the session.
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
#: Fields of the session's hash that name it; the others are outcomes.
SESSION_FIELDS = ("admin", "name", "since")
OUTCOME_FIELD = "outcome:"
#: Outcomes kept per session: the newest, for the pages an admin may still reload.
KEPT_OUTCOMES = 10


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
        admin, name, since = cast(
            list[bytes | None], self.client.hmget(self._key(session_id), list(SESSION_FIELDS))
        )
        if admin is None or name is None or since is None:
            return None
        try:
            return StoredSession(fingerprint=admin.decode(), name=name.decode(), since=int(since))
        except ValueError:  # UnicodeDecodeError included
            return None

    def keep_outcome(self, session_id: str, payload: str) -> str | None:
        """Keep an action's outcome (JSON) with the session; its id, None when the session ended."""
        key = self._key(session_id)
        outcome_id = f"{time.time_ns():x}{secrets.token_hex(4)}"  # in time order
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(key, OUTCOME_FIELD + outcome_id, payload)
        pipe.ttl(key)
        pipe.hkeys(key)
        _, ttl, fields = pipe.execute()
        if ttl == -1:  # the session ended meanwhile: this made a hash of its own, with no expiry
            self.client.delete(key)
            return None
        outcomes = sorted(f for f in cast(list[bytes], fields) if f.startswith(OUTCOME_FIELD.encode()))
        if len(outcomes) > KEPT_OUTCOMES:
            self.client.hdel(key, *outcomes[:-KEPT_OUTCOMES])
        return outcome_id

    def outcome(self, session_id: str, outcome_id: str) -> str | None:
        """An outcome this session keeps (JSON); None when it is not one of its last ones."""
        raw = self.client.hget(self._key(session_id), OUTCOME_FIELD + outcome_id)
        return None if raw is None else cast(bytes, raw).decode("utf-8", "replace")

    def end(self, session_id: str) -> None:
        self.client.delete(self._key(session_id))
