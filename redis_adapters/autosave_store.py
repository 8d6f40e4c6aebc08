"""Answer autosave on Redis: the store the web tier saves into (`services.usecases.autosave.AutosaveStore`).

A save is one Lua call: it checks the cached owner and status of the record, writes the
answers into `hotpath:answers:<id>` (question id -> "value:saved ms"), updates the
progress state `hotpath:progress:<id>`, and marks both dirty. The save time comes from
the Redis server's clock and is strictly increasing per record (a later save of the
same millisecond gets the next one), so "later" is well defined for the flushers'
guards. The hot path's flushers (hotpath/) persist what is saved here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import redis
from redis.exceptions import NoScriptError

from redis_adapters.keyspace import AUTOSAVE_TTL_S, RECORD_CACHE_TTL_S, SEAL_TTL_S, AutosaveKeys
from redis_adapters.lua_scripts import lua_source
from redis_adapters.report_queue import RedisReportQueue, unavailable
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
from services.usecases.ports import ReportQueue

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
        try:
            self._prime(keys=[self.keys.record(record_id)], args=[user_id, int(status), RECORD_CACHE_TTL_S])
        except redis.RedisError as exc:
            raise AutosaveUnavailable(f"could not cache record {record_id}: {exc}") from exc

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
        try:
            self._release(keys=self._save_keys(record_id), args=self._release_args(record_id, submitted))
        except redis.RedisError as exc:
            raise self._not_released(record_id, exc) from exc

    def _release_args(self, record_id: int, submitted: bool) -> list[int]:
        return [record_id, 1 if submitted else 0, int(RecordStatus.GENERATING), RECORD_CACHE_TTL_S]

    @staticmethod
    def _not_released(record_id: int, exc: redis.RedisError) -> AutosaveUnavailable:
        return AutosaveUnavailable(f"could not release the autosave of record {record_id}: {exc}")

    def release_and_enqueue(
        self, record_id: int, queue: ReportQueue
    ) -> tuple[Exception | None, Exception | None]:
        """`release(record_id, submitted=True)`, then `queue.enqueue(record_id)`: one pipeline
        without MULTI (one round trip; each step's outcome its own, as when sent alone) when the
        queue is a Redis one on this store's client, one after the other otherwise (another
        queue, or a Redis Cluster, where the two steps' keys are on other slots).

        The pipeline sends EVALSHA by hand: redis-py's, given a `Script`, asks the server whether
        it knows each script first (SCRIPT EXISTS), a round trip of its own. A script the server
        lacks (restarted or flushed since) is sent again alone, which loads it."""

        def release() -> None:
            self.release(record_id, submitted=True)

        def enqueue() -> None:
            queue.enqueue(record_id)

        if not (
            isinstance(queue, RedisReportQueue)
            and queue.client is self.client
            and isinstance(self.client, redis.Redis)
        ):
            return _error_of(release), _error_of(enqueue)
        keys, job = self._save_keys(record_id), queue.job(record_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.evalsha(self._release.sha, len(keys), *keys, *self._release_args(record_id, True))
        pipe.evalsha(job.script.sha, len(job.keys), *job.keys, *job.args)
        try:
            released, queued = pipe.execute(raise_on_error=False)
        except redis.RedisError as exc:  # the connection: neither step is known to have run
            return _caused(self._not_released(record_id, exc), exc), _caused(unavailable(exc), exc)
        return (
            _settled(released, release, lambda exc: self._not_released(record_id, exc)),
            _settled(queued, enqueue, unavailable),
        )


def _settled(
    reply: object, alone: Callable[[], None], failed: Callable[[redis.RedisError], Exception]
) -> Exception | None:
    """A pipelined step's outcome: None when done; sent `alone` when the server lacked its script."""
    if isinstance(reply, NoScriptError):
        return _error_of(alone)
    if isinstance(reply, redis.RedisError):
        return _caused(failed(reply), reply)
    return None


def _error_of(step: Callable[[], None]) -> Exception | None:
    try:
        step()
    except Exception as exc:
        return exc
    return None


def _caused(error: Exception, cause: BaseException) -> Exception:
    """`error`, caused by `cause` (as ``raise error from cause`` says)."""
    error.__cause__ = cause
    return error
