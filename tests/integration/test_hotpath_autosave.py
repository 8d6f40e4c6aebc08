"""Answer autosave on the real Redis and PostgreSQL: the store, the flusher and their faults."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from hotpath.answers_flusher import AnswersFlusher
from redis_adapters.autosave_store import RedisAutosaveStore
from redis_adapters.keyspace import AutosaveKeys
from services.domain.saved_answers import SaveOutcome
from services.persistence.db import make_engine, make_session_factory
from services.persistence.uow import UnitOfWork
from services.usecases import assessment
from tests.support.hotpath import QUESTION_IDS, insert_records, stored_answers
from tests.support.redis_keys import clean_redis
from tests.support.urls import CLOSED_DATABASE_URL

KEYS = AutosaveKeys.default()
USER = 1


@pytest.fixture
def store(redis_client: redis.Redis) -> RedisAutosaveStore:
    return RedisAutosaveStore(redis_client)


@pytest.fixture
def flusher(redis_client: redis.Redis, session_factory: sessionmaker[Session]) -> AnswersFlusher:
    return AnswersFlusher(redis_client, session_factory)


def started(store: RedisAutosaveStore, record_ids: list[int], user_id: int = USER) -> list[int]:
    for record_id in record_ids:
        store.prime(record_id, user_id, 2)
    return record_ids


def save(store: RedisAutosaveStore, record_id: int, answers: dict[int, int], user_id: int = USER) -> int:
    response = store.save(user_id, record_id, list(answers.items()))
    assert response.outcome is SaveOutcome.SAVED
    return response.saved_ms


# -- the store -----------------------------------------------------------------------------


def test_save_checks_the_cached_owner_and_status(
    store: RedisAutosaveStore, redis_client: redis.Redis
) -> None:
    answers = [(101, 3)]
    assert store.save(USER, 7, answers).outcome is SaveOutcome.CACHE_MISS
    assert not redis_client.exists(KEYS.answers.item(7))
    store.prime(7, USER, 2)
    store.prime(7, 99, 3)  # a later prime never overwrites what is cached
    assert store.save(99, 7, answers).outcome is SaveOutcome.NOT_OWNER
    saved = store.save(USER, 7, [(101, 3), (102, 5)])
    assert (saved.outcome, saved.answered_count) == (SaveOutcome.SAVED, 2)
    assert redis_client.smembers(KEYS.answers.dirty) == {b"7"}
    assert redis_client.smembers(KEYS.progress.dirty) == {b"7"}
    sealed = store.seal(7, USER)  # the answers saved until then come with the seal
    assert {q: a.value for q, a in sealed.items()} == {101: 3, 102: 5}
    assert sealed[102].saved_ms == saved.saved_ms
    assert store.save(USER, 7, answers).outcome is SaveOutcome.WRONG_STATUS
    assert store.load(7) == sealed


def test_save_times_strictly_increase_per_record(store: RedisAutosaveStore) -> None:
    started(store, [5])
    times = [save(store, 5, {101: 1 + i % 5}) for i in range(200)]
    assert times == sorted(set(times))
    loaded = store.load(5)
    assert loaded[101].saved_ms == times[-1]


def test_release_after_submission_drops_the_autosave(
    store: RedisAutosaveStore, redis_client: redis.Redis
) -> None:
    started(store, [3])
    save(store, 3, {101: 2})
    assert set(store.seal(3, USER)) == {101}
    store.release(3, submitted=True)
    assert store.load(3) == {}
    assert not redis_client.sismember(KEYS.answers.dirty, "3")
    assert store.save(USER, 3, [(101, 4)]).outcome is SaveOutcome.WRONG_STATUS
    store.release(3, submitted=False)  # a failed submission: the next save asks the database
    assert store.save(USER, 3, [(101, 4)]).outcome is SaveOutcome.CACHE_MISS


# -- the flusher ---------------------------------------------------------------------------


def test_flush_persists_in_bulk_and_clears_the_marks(
    engine: Engine, store: RedisAutosaveStore, flusher: AnswersFlusher, redis_client: redis.Redis
) -> None:
    records = started(store, insert_records(engine, 5))
    for i, record_id in enumerate(records):
        save(store, record_id, {101: 1 + i, 102: 5 - i})
    assert stored_answers(engine, records) == {r: {} for r in records}  # nothing before a flush
    report = flusher.run_once(batch=2)
    assert (report.claimed, report.persisted, report.rows) == (5, 5, 10)
    assert stored_answers(engine, records) == {r: {101: 1 + i, 102: 5 - i} for i, r in enumerate(records)}
    assert not redis_client.exists(KEYS.answers.dirty, KEYS.answers.syncing)
    assert flusher.run_once().claimed == 0  # nothing dirty: nothing to do


def test_save_during_a_flush_is_flushed_next_cycle(
    engine: Engine, store: RedisAutosaveStore, flusher: AnswersFlusher
) -> None:
    (record_id,) = started(store, insert_records(engine, 1))
    save(store, record_id, {101: 1})

    def between_rename_and_write(step: str) -> None:
        if step == "read":
            save(store, record_id, {101: 5, 102: 4})

    flusher.run_once(hook=between_rename_and_write)
    flusher.run_once()
    assert stored_answers(engine, [record_id]) == {record_id: {101: 5, 102: 4}}


def test_a_submitted_record_is_never_overwritten(
    engine: Engine, store: RedisAutosaveStore, flusher: AnswersFlusher, redis_client: redis.Redis
) -> None:
    live, submitted, deleted = started(store, insert_records(engine, 3))
    for record_id in (live, submitted, deleted):
        save(store, record_id, {101: 1})
    with engine.begin() as conn:
        conn.execute(text("UPDATE assessment_records SET status = 3 WHERE id = :id"), {"id": submitted})
        conn.execute(text("UPDATE assessment_records SET is_deleted = true WHERE id = :id"), {"id": deleted})
        conn.execute(
            text("INSERT INTO answers (record_id, question_id, value) VALUES (:id, 101, 4)"),
            {"id": submitted},
        )
    report = flusher.run_once()
    assert sorted(report.discarded) == sorted([submitted, deleted])
    assert stored_answers(engine, [live, submitted, deleted]) == {
        live: {101: 1},
        submitted: {101: 4},
        deleted: {},
    }
    # Their autosave is useless now: dropped, and the deleted record's next save asks the database.
    assert store.load(submitted) == store.load(deleted) == {}
    assert store.save(USER, deleted, [(101, 2)]).outcome is SaveOutcome.CACHE_MISS


def test_unknown_and_inactive_questions_are_skipped(
    engine: Engine, store: RedisAutosaveStore, flusher: AnswersFlusher, redis_client: redis.Redis
) -> None:
    (record_id,) = started(store, insert_records(engine, 1))
    save(store, record_id, {101: 2})
    redis_client.hset(KEYS.answers.item(record_id), mapping={"999999": "3:1", "junk": "x", "102": "9:1"})
    flusher.run_once()
    assert stored_answers(engine, [record_id]) == {record_id: {101: 2}}


def test_an_older_flush_never_replaces_a_newer_answer(
    engine: Engine, store: RedisAutosaveStore, flusher: AnswersFlusher, redis_client: redis.Redis
) -> None:
    (record_id,) = started(store, insert_records(engine, 1))
    save(store, record_id, {101: 5})
    flusher.run_once()
    # A stale value (an earlier save time), as a flusher that lost its lease would write it.
    redis_client.hset(KEYS.answers.item(record_id), "101", "1:1000")
    redis_client.sadd(KEYS.answers.dirty, record_id)
    flusher.run_once()
    assert stored_answers(engine, [record_id]) == {record_id: {101: 5}}


# -- faults --------------------------------------------------------------------------------


def test_database_down_loses_nothing(
    engine: Engine,
    store: RedisAutosaveStore,
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
) -> None:
    records = started(store, insert_records(engine, 3))
    for record_id in records:
        save(store, record_id, {101: 3, 205: 1})
    down_engine = make_engine(CLOSED_DATABASE_URL, pool_size=1)
    down = AnswersFlusher(redis_client, make_session_factory(down_engine))
    with pytest.raises(Exception, match=r"127\.0\.0\.1"):
        down.run_once()
    # The seed deleted the marks here; we put them back.
    assert redis_client.smembers(KEYS.answers.dirty) == {str(r).encode() for r in records}
    assert not redis_client.exists(KEYS.answers.syncing)
    down.close()
    down_engine.dispose()
    AnswersFlusher(redis_client, session_factory).run_once()
    assert stored_answers(engine, records) == {r: {101: 3, 205: 1} for r in records}
    assert not redis_client.exists(KEYS.answers.dirty)


def test_a_failing_write_after_some_chunks_puts_back_the_rest(
    engine: Engine, store: RedisAutosaveStore, flusher: AnswersFlusher, redis_client: redis.Redis
) -> None:
    records = started(store, insert_records(engine, 4))
    for record_id in records:
        save(store, record_id, {101: 2})
    reads = []

    def fail_on_second_chunk(step: str) -> None:
        if step == "read":
            reads.append(step)
            if len(reads) == 2:
                raise ConnectionError("database went away")

    with pytest.raises(ConnectionError):
        flusher.run_once(batch=2, hook=fail_on_second_chunk)
    assert redis_client.smembers(KEYS.answers.dirty) == {str(r).encode() for r in records[2:]}
    flusher.run_once(batch=2)
    assert stored_answers(engine, records) == {r: {101: 2} for r in records}


def test_a_syncing_set_left_by_a_crashed_flusher_is_merged_back(
    engine: Engine, store: RedisAutosaveStore, flusher: AnswersFlusher, redis_client: redis.Redis
) -> None:
    crashed, fresh = started(store, insert_records(engine, 2))
    save(store, crashed, {101: 4})
    save(store, fresh, {101: 5})
    # What a flusher killed after its RENAME leaves: the id only in the syncing set.
    redis_client.smove(KEYS.answers.dirty, KEYS.answers.syncing, str(crashed))
    report = flusher.run_once()
    assert report.claimed == 2
    assert stored_answers(engine, [crashed, fresh]) == {crashed: {101: 4}, fresh: {101: 5}}


def test_one_flusher_at_a_time_and_a_dead_owners_lock_expires(
    engine: Engine,
    store: RedisAutosaveStore,
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
) -> None:
    (record_id,) = started(store, insert_records(engine, 1))
    first = AnswersFlusher(redis_client, session_factory)
    second = AnswersFlusher(redis_client, session_factory)
    assert first.run_once(lock_ttl_ms=300).owner
    save(store, record_id, {101: 1})
    assert not second.run_once(lock_ttl_ms=300).owner  # standby: the dirty set is left alone
    assert redis_client.sismember(KEYS.answers.dirty, str(record_id))
    time.sleep(0.4)  # `first` died without releasing
    assert second.run_once(lock_ttl_ms=300).owner
    assert stored_answers(engine, [record_id]) == {record_id: {101: 1}}
    assert not first.run_once(lock_ttl_ms=300).owner
    second.close()
    assert first.run_once(lock_ttl_ms=300).owner  # released at shutdown: taken over at once


def test_a_flusher_that_lost_its_lock_does_not_commit(
    engine: Engine,
    store: RedisAutosaveStore,
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
) -> None:
    (record_id,) = started(store, insert_records(engine, 1))
    save(store, record_id, {101: 1})
    stale = AnswersFlusher(redis_client, session_factory)
    taker = AnswersFlusher(redis_client, session_factory)

    def lease_expires_and_is_taken(step: str) -> None:
        if step == "read":
            redis_client.delete(KEYS.answers.lock)
            save(store, record_id, {101: 5})
            assert taker.run_once().owner  # merges the syncing set back and persists 5

    report = stale.run_once(hook=lease_expires_and_is_taken)
    assert not report.owner
    assert stored_answers(engine, [record_id]) == {record_id: {101: 5}}
    assert not redis_client.exists(KEYS.answers.dirty, KEYS.answers.syncing)


# -- the property --------------------------------------------------------------------------

RECORDS = 3
PROPERTY_QUESTIONS = QUESTION_IDS[:5]
saves = st.tuples(
    st.integers(0, RECORDS - 1),
    st.dictionaries(st.sampled_from(PROPERTY_QUESTIONS), st.integers(1, 5), min_size=1, max_size=3),
)
steps = st.sampled_from(["claimed", "read", "written"])
operations = st.one_of(
    st.tuples(st.just("save"), saves),
    st.tuples(st.just("flush"), steps, st.lists(saves, max_size=2)),
    st.tuples(st.just("failing flush"), st.sampled_from(["claimed", "read"]), st.lists(saves, max_size=2)),
)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(operations, max_size=10))
def test_property_persisted_answers_are_the_last_saved(
    ops: list[tuple[Any, ...]],
    engine: Engine,
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
) -> None:
    """Any interleaving of saves and flush cycles (saves injected between the RENAME, the
    read and the write; writes that fail) ends with every record's stored answers equal to
    its last saved values once a final cycle has run."""
    clean_redis(redis_client)
    store = RedisAutosaveStore(redis_client)
    flusher = AnswersFlusher(redis_client, session_factory)
    records = started(store, insert_records(engine, RECORDS))
    expected: dict[int, dict[int, int]] = {r: {} for r in records}

    def do_save(item: tuple[int, dict[int, int]]) -> None:
        index, answers = item
        save(store, records[index], answers)
        expected[records[index]].update(answers)

    def at(point: str, injected: list[tuple[int, dict[int, int]]], fail: bool) -> Callable[[str], None]:
        def hook(step: str) -> None:
            if step == point:
                for item in injected:
                    do_save(item)
                if fail:
                    raise ConnectionError("write failed")

        return hook

    for op in ops:
        if op[0] == "save":
            do_save(op[1])
        elif op[0] == "flush":
            flusher.run_once(batch=2, hook=at(op[1], op[2], fail=False))
        else:
            with contextlib.suppress(ConnectionError):
                flusher.run_once(batch=2, hook=at(op[1], op[2], fail=True))
    flusher.run_once(batch=2)
    assert stored_answers(engine, records) == expected
    assert not redis_client.exists(KEYS.answers.dirty, KEYS.answers.syncing)


def test_autosave_read_before_a_submission_is_not_written_after_it(
    engine: Engine,
    store: RedisAutosaveStore,
    flusher: AnswersFlusher,
    session_factory: sessionmaker[Session],
    recording_queue: Any,
) -> None:
    (record_id,) = started(store, insert_records(engine, 1))
    save(store, record_id, {101: 1, 102: 1})
    final = {q: 4 for q in QUESTION_IDS}

    def submitted_meanwhile(step: str) -> None:
        if step == "read":  # the flusher holds the old values, not yet written
            assessment.submit_answers(
                UnitOfWork(session_factory),
                recording_queue,
                USER,
                record_id,
                list(final.items()),
                autosave=store,
            )

    report = flusher.run_once(hook=submitted_meanwhile)
    assert report.discarded == [record_id]
    assert stored_answers(engine, [record_id]) == {record_id: final}
