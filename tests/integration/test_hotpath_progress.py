"""Progress-state sync: Redis first, the LastUpdateTime guard in SQL."""

from __future__ import annotations

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from hotpath.progress_flusher import ProgressFlusher
from redis_adapters.autosave_store import RedisAutosaveStore
from redis_adapters.keyspace import AutosaveKeys
from services.domain.saved_answers import from_epoch_ms, to_epoch_ms
from services.persistence.progress import ProgressState, sync_progress
from tests.support.hotpath import insert_records, progress_row
from tests.support.redis_keys import clean_redis

KEYS = AutosaveKeys.default()
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def write_state(client: redis.Redis, record_id: int, question: int, count: int, updated_ms: int) -> None:
    client.hset(
        KEYS.progress.item(record_id), mapping={"q": question, "n": count, "a": updated_ms, "t": updated_ms}
    )
    client.sadd(KEYS.progress.dirty, record_id)


def test_saves_update_the_progress_state(
    engine: Engine, session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    store = RedisAutosaveStore(redis_client)
    (record_id,) = insert_records(engine, 1)
    store.prime(record_id, 1, 2)
    store.save(1, record_id, [(101, 3), (102, 4)])
    last = store.save(1, record_id, [(103, 1)]).saved_ms
    flusher = ProgressFlusher(redis_client, session_factory)
    assert flusher.run_once().rows == 1
    question, count, activity, updated = progress_row(engine, record_id)
    assert (question, count) == (103, 3)
    assert activity == updated == from_epoch_ms(last)
    assert not redis_client.exists(KEYS.progress.dirty, KEYS.progress.syncing)


def test_an_equal_or_older_state_is_skipped(
    engine: Engine, session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    (record_id,) = insert_records(engine, 1)
    flusher = ProgressFlusher(redis_client, session_factory)
    write_state(redis_client, record_id, 110, 10, BASE_MS)
    flusher.run_once()
    for stale_ms in (BASE_MS, BASE_MS - 1):
        write_state(redis_client, record_id, 101, 1, stale_ms)
        assert flusher.run_once().rows == 0
    assert progress_row(engine, record_id)[:2] == (110, 10)
    write_state(redis_client, record_id, 111, 11, BASE_MS + 1)
    assert flusher.run_once().rows == 1
    assert progress_row(engine, record_id)[:2] == (111, 11)


def test_missing_records_and_malformed_states_are_skipped(
    engine: Engine, session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    (record_id,) = insert_records(engine, 1)
    write_state(redis_client, record_id, 105, 5, BASE_MS)
    write_state(redis_client, record_id + 1000, 105, 5, BASE_MS)
    redis_client.hset(KEYS.progress.item(record_id + 1), mapping={"q": "x", "n": "?"})
    redis_client.sadd(KEYS.progress.dirty, record_id + 1)
    report = ProgressFlusher(redis_client, session_factory).run_once()
    assert (report.claimed, report.rows) == (3, 1)
    assert progress_row(engine, record_id)[:2] == (105, 5)


def test_sync_progress_keeps_the_newest_of_several_states(
    session_factory: sessionmaker[Session], engine: Engine
) -> None:
    (record_id,) = insert_records(engine, 1)
    states = [ProgressState(record_id, q, q - 100, BASE_MS + q, BASE_MS + q) for q in (105, 109, 102)]
    with session_factory() as session:
        assert sync_progress(session, states) == 1
        session.commit()
    assert progress_row(engine, record_id)[:2] == (109, 9)


# -- the property: a stale state never overwrites a newer one --------------------------------

states = st.lists(
    st.tuples(st.integers(0, 6), st.integers(101, 140), st.integers(0, 40), st.booleans()),
    min_size=1,
    max_size=6,
)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(db_ms=st.none() | st.integers(0, 6), written=states)
def test_property_a_stale_progress_state_never_overwrites_a_newer_one(
    db_ms: int | None,
    written: list[tuple[int, int, int, bool]],
    engine: Engine,
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
) -> None:
    """States are written to Redis with arbitrary LastUpdateTimes (older, equal, newer) and
    flushed or not in between; the database always holds the newest state it was offered,
    and never one older than, or as old as, what it had."""
    clean_redis(redis_client)
    (record_id,) = insert_records(engine, 1)
    flusher = ProgressFlusher(redis_client, session_factory)
    current: tuple[int | None, int | None, int | None] = (None, None, None)
    if db_ms is not None:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE assessment_records SET current_question_id = 100, answered_count = 0,"
                    " progress_updated_at = :t WHERE id = :id"
                ),
                {"t": from_epoch_ms(BASE_MS + db_ms), "id": record_id},
            )
        current = (100, 0, BASE_MS + db_ms)
    pending: tuple[int, int, int] | None = None
    for offset, question, count, flush in [*written, (0, 0, 0, True)]:
        if question:  # the sentinel only flushes
            write_state(redis_client, record_id, question, count, BASE_MS + offset)
            pending = (question, count, BASE_MS + offset)
        if flush:
            flusher.run_once()
            if pending is not None and (current[2] is None or pending[2] > current[2]):
                current = pending
            pending = None
            question_db, count_db, _, updated = progress_row(engine, record_id)
            assert (question_db, count_db) == current[:2]
            assert (to_epoch_ms(updated) if updated else None) == current[2]
