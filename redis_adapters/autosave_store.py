"""Answer autosave on Redis: the store the web tier saves into (`services.usecases.autosave.AutosaveStore`).

A save is one Lua call: it checks the cached owner and status of the record, writes the
answers into `hotpath:answers:<id>` (question id -> "value:saved ms"), updates the
progress state `hotpath:progress:<id>`, and marks both dirty. The save time comes from
the Redis server's clock and is strictly increasing per record (a later save of the
same millisecond gets the next one), so "later" is well defined for the flushers'
guards. The hot path's flushers (hotpath/) persist what is saved here.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from redis_adapters.keyspace import AUTOSAVE_TTL_S, RECORD_CACHE_TTL_S, SEAL_TTL_S, AutosaveKeys
from redis_adapters.lua_scripts import lua_source
from redis_adapters.round_trip import ScriptCall
from services.domain.errors import AutosaveUnavailable
from services.domain.saved_answers import (
    MAX_QUESTION_ID,
    SavedAnswer,
    SaveOutcome,
    SaveResponse,
    parse_saved,
    plain_int,
)
from services.domain.status import RecordStatus

# KEYS: record cache, answers hash, progress hash, answers dirty, progress dirty.
# ARGV: record id, user id, ttl s, current question, then question, value pairs.
_SAVE = lua_source("redis_adapters", "autosave_save")

# KEYS: record cache. ARGV: user id, status, ttl s. Caches only what is not cached yet, so a
# lookup that raced with a submission can never overwrite the seal.
_PRIME = lua_source("redis_adapters", "autosave_prime")

# KEYS / ARGV: see each file. Scripts rather than MULTI pipelines: the same atomic steps, and
# for the client one command to pack and one reply to parse instead of each command's and
# MULTI/EXEC's (a submission runs both).
_SEAL = lua_source("redis_adapters", "autosave_seal")
_RELEASE = lua_source("redis_adapters", "autosave_release")


class RedisAutosaveStore:
    """`services.usecases.autosave.AutosaveStore` on Redis; every Redis error becomes AutosaveUnavailable."""

    def __init__(self, client: redis.Redis, keys: AutosaveKeys | None = None) -> None:
        self.client = client
        self.keys = keys or AutosaveKeys.default()
        self._save = client.register_script(_SAVE)
        self._prime = client.register_script(_PRIME)
        self._seal = client.register_script(_SEAL)
        self._release = client.register_script(_RELEASE)

    def save(self, user_id: int, record_id: int, answers: Sequence[tuple[int, int]]) -> SaveResponse:
        if not answers:
            raise ValueError("nothing to save")
        args: list[int | str] = [record_id, user_id, AUTOSAVE_TTL_S, answers[-1][0]]
        for question_id, value in answers:
            args += [question_id, value]
        try:
            reply = self._save(keys=self._save_keys(record_id), args=args)
        except redis.RedisError as exc:
            raise AutosaveUnavailable(f"autosave of record {record_id} failed: {exc}") from exc
        kind = bytes(reply[0]).decode()
        if kind == "ok":
            return SaveResponse(SaveOutcome.SAVED, saved_ms=int(reply[1]), answered_count=int(reply[2]))
        return SaveResponse(
            {"miss": SaveOutcome.CACHE_MISS, "owner": SaveOutcome.NOT_OWNER}.get(
                kind, SaveOutcome.WRONG_STATUS
            )
        )

    def _save_keys(self, record_id: int) -> list[str]:
        k = self.keys
        return [
            k.record(record_id),
            k.answers.item(record_id),
            k.progress.item(record_id),
            k.answers.dirty,
            k.progress.dirty,
        ]

    def prime(self, record_id: int, user_id: int, status: int) -> None:
        self.prepare_prime(record_id, user_id, status).run()

    def prepare_prime(self, record_id: int, user_id: int, status: int) -> ScriptCall:
        """`prime(...)` made ready, to send with other calls (redis_adapters/round_trip.py)."""

        def failed(exc: redis.RedisError) -> AutosaveUnavailable:
            return AutosaveUnavailable(f"could not cache record {record_id}: {exc}")

        keys, args = [self.keys.record(record_id)], [user_id, int(status), RECORD_CACHE_TTL_S]
        return ScriptCall(self._prime, keys, args, failed=failed)

    def seal(self, record_id: int, user_id: int) -> dict[int, SavedAnswer]:
        try:
            flat = self._seal(
                keys=[self.keys.record(record_id), self.keys.answers.item(record_id)],
                args=[user_id, int(RecordStatus.GENERATING), SEAL_TTL_S],
            )
        except redis.RedisError as exc:
            raise AutosaveUnavailable(f"could not seal record {record_id}: {exc}") from exc
        # HGETALL's reply inside a script is the flat list field, value, field, value, ...
        return parse_saved(dict(zip(flat[::2], flat[1::2], strict=True)), record_id=record_id)

    def load(self, record_id: int) -> dict[int, SavedAnswer]:
        try:
            raw = self.client.hgetall(self.keys.answers.item(record_id))
        except redis.RedisError as exc:
            raise AutosaveUnavailable(f"could not read the autosave of record {record_id}: {exc}") from exc
        return parse_saved(raw, record_id=record_id)

    def current_question(self, record_id: int) -> int | None:
        try:
            raw = self.client.hget(self.keys.progress.item(record_id), "q")
        except redis.RedisError as exc:
            raise AutosaveUnavailable(f"could not read the progress of record {record_id}: {exc}") from exc
        return None if raw is None else plain_int(raw, 1, MAX_QUESTION_ID)

    def release(self, record_id: int, *, submitted: bool) -> None:
        self.prepare_release(record_id, submitted=submitted).run()

    def prepare_release(self, record_id: int, *, submitted: bool) -> ScriptCall:
        """`release(...)` made ready, to send with other calls (redis_adapters/round_trip.py)."""
        args = [record_id, 1 if submitted else 0, int(RecordStatus.GENERATING), RECORD_CACHE_TTL_S]

        def failed(exc: redis.RedisError) -> AutosaveUnavailable:
            return AutosaveUnavailable(f"could not release the autosave of record {record_id}: {exc}")

        return ScriptCall(self._release, self._save_keys(record_id), args, failed=failed)
