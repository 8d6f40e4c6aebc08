"""The Procfile's hotpath line (`python -m hotpath`): SIGKILL mid-batch, SIGTERM, live settings."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psycopg
import pytest
import redis
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from hotpath.constants import SETTINGS_KEY
from redis_adapters.autosave_store import RedisAutosaveStore
from redis_adapters.event_sink import RedisEventSink
from redis_adapters.keyspace import AutosaveKeys, EventLogKeys
from scripts.processes import ProcfileProcess
from services.domain.events import Event, EventType
from tests.support.hotpath import insert_records, progress_row, stored_answers
from tests.support.processes import sessions_waiting_for_a_lock, wait_until

pytestmark = pytest.mark.slow

EVENTS = EventLogKeys()
AUTOSAVE = AutosaveKeys.default()


class HotpathProcess(ProcfileProcess):
    """The Procfile's hotpath line (read from the Procfile), with ARGS after it, in a session
    of its own, with short intervals and leases."""

    def __init__(self, log_path: Path, *args: str, env: dict[str, str] | None = None) -> None:
        full_env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "HOTPATH_ANSWERS_INTERVAL_MS": "50",
            "HOTPATH_PROGRESS_INTERVAL_MS": "50",
            "HOTPATH_EVENTS_INTERVAL_MS": "50",
            "HOTPATH_LOCK_TTL_MS": "1500",
            **(env or {}),
        }
        super().__init__("hotpath", env=full_env, log_path=log_path, args=args)

    def terminate(self, timeout: float = 30) -> int:
        self.signal(signal.SIGTERM)
        code = self.process.wait(timeout=timeout)
        self.log.close()
        return code


def events(count: int) -> list[Event]:
    return [Event.new(EventType.ANSWERS_SAVED, record_id=1, actor="user:1") for _ in range(count)]


def stored_events(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id::text, count(*) FROM event_log GROUP BY id")).all()
    return {row[0]: int(row[1]) for row in rows}


def test_consumer_killed_between_move_and_insert_loses_and_duplicates_nothing(
    redis_client: redis.Redis, event_log: Engine, tmp_path: Path
) -> None:
    database_url = os.environ["DATABASE_URL"]
    first = HotpathProcess(tmp_path / "first.log", "--only", "events")
    try:
        wait_until(lambda: bool(redis_client.exists(EVENTS.lock)), timeout=20, what="the consumer's lock")
        with psycopg.connect(database_url.replace("+psycopg", "")) as conn:
            # The insert will block on this lock: the consumer is stopped mid-batch.
            conn.execute("LOCK TABLE event_log IN ACCESS EXCLUSIVE MODE")
            # The garbage goes first: the consumer may take it alone (it is set aside at once,
            # nothing to insert) or with the 50 events the sink pushes in one step; pushed
            # last, a consumer that took the events first would leave it in the queue.
            redis_client.lpush(EVENTS.queue, b"garbage")
            sent = events(50)
            RedisEventSink(redis_client).emit_many(sent)
            wait_until(
                lambda: (
                    redis_client.llen(EVENTS.queue) == 0
                    and redis_client.llen(EVENTS.backup) + redis_client.llen(EVENTS.invalid) == 51
                ),
                timeout=20,
                what="the batch in the backup",
            )
            wait_until(
                lambda: sessions_waiting_for_a_lock(database_url) >= 1, timeout=20, what="a blocked insert"
            )
            first.kill()
            conn.rollback()
    finally:
        first.kill()
    assert redis_client.llen(EVENTS.queue) == 0
    assert stored_events(event_log) == {}
    second = HotpathProcess(tmp_path / "second.log", "--only", "events")
    try:
        # Its lease can only be taken once the dead consumer's expires (1.5 s), then the backup is replayed.
        wait_until(
            lambda: not redis_client.exists(EVENTS.backup), timeout=20, what="the replay of the backup"
        )
        assert stored_events(event_log) == {str(e.id): 1 for e in sent}
        assert redis_client.lrange(EVENTS.invalid, 0, -1) == [b"garbage"]
    finally:
        assert second.terminate() == 0, second.output()
    assert not redis_client.exists(EVENTS.lock), "a clean shutdown releases the lease"


def test_the_process_runs_every_loop_follows_live_settings_and_stops_on_sigterm(
    engine: Engine,
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
    event_log: Engine,
    tmp_path: Path,
) -> None:
    store = RedisAutosaveStore(redis_client)
    (record_id,) = insert_records(engine, 1)
    store.prime(record_id, 1, 2)
    # A very long answers interval to begin with: nothing is flushed until the setting changes.
    process = HotpathProcess(tmp_path / "hotpath.log", env={"HOTPATH_ANSWERS_INTERVAL_MS": "3600000"})
    try:
        wait_until(
            lambda: redis_client.exists(AUTOSAVE.answers.lock, AUTOSAVE.progress.lock, EVENTS.lock) == 3,
            timeout=20,
            what="all three loops to take their leases",
        )
        store.save(1, record_id, [(101, 4), (102, 2)])
        sent = events(3)
        RedisEventSink(redis_client).emit_many(sent)
        wait_until(lambda: len(stored_events(event_log)) == 3, timeout=20, what="the events")
        wait_until(lambda: progress_row(engine, record_id)[1] == 2, timeout=20, what="the progress")
        assert stored_answers(engine, [record_id]) == {record_id: {}}
        redis_client.hset(SETTINGS_KEY, mapping={"answers_interval_ms": "bogus"})  # logged, ignored
        redis_client.hset(SETTINGS_KEY, mapping={"answers_interval_ms": "-5"})
        redis_client.hset(SETTINGS_KEY, mapping={"answers_interval_ms": "50"})
        # The idle loop re-reads its settings about every second: the shorter interval applies at once.
        wait_until(
            lambda: stored_answers(engine, [record_id]) == {record_id: {101: 4, 102: 2}},
            timeout=30,
            what="the answers once the interval was shortened",
        )
    finally:
        code = process.terminate()
    assert code == 0, process.output()
    assert "hotpath stopped" in process.output()
    assert redis_client.exists(AUTOSAVE.answers.lock, AUTOSAVE.progress.lock, EVENTS.lock) == 0


def test_a_poison_entry_at_the_head_of_the_queue_does_not_stop_the_process(
    redis_client: redis.Redis, event_log: Engine, tmp_path: Path
) -> None:
    """Seen on main: a lone surrogate made every insert fail and the batch replay for ever."""
    surrogate = (
        b'{"id":"0b0f5c1e-7a3a-4c55-9a53-1f2e3d4c5b6a","type":"answers.saved",'
        b'"occurredAt":"2026-01-01T00:00:00+00:00","data":{"note":"\\ud800"}}'
    )
    not_utf8 = b'{"id":"\xff\xfe"}'
    redis_client.lpush(EVENTS.queue, surrogate, not_utf8)  # consumed first
    sent = events(3)
    RedisEventSink(redis_client).emit_many(sent)
    process = HotpathProcess(tmp_path / "hotpath.log", "--only", "events")
    try:
        wait_until(lambda: len(stored_events(event_log)) == 3, timeout=30, what="the events after the poison")
        assert stored_events(event_log) == {str(e.id): 1 for e in sent}
        assert sorted(redis_client.lrange(EVENTS.invalid, 0, -1)) == sorted([surrogate, not_utf8])
        assert not redis_client.exists(EVENTS.queue, EVENTS.backup)
    finally:
        code = process.terminate()
    assert code == 0, process.output()
    assert "hot path events loop:" not in process.output()  # no failure logged, nor a recovery
