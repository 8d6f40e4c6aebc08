"""Leases fit the work: a batch never outlives its lease; settings must fit together.

Seen on main: `lock_ttl_ms 3000` with `answers_batch 5000` (each accepted alone) and a
5,000-record backlog: the chunk took longer than the lease, the flusher lost it before
every commit and started over, and nothing was persisted. Now a thread renews the lease
while a cycle works, and such a combination is refused (the previous values kept).
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from background.leased_loop import LeasedLoop
from hotpath.answers_flusher import AnswersFlusher
from hotpath.constants import SETTINGS_KEY
from hotpath.eventlog_consumer import EventLogConsumer
from hotpath.runner import build_loops
from hotpath.runner import logger as hotpath_logger
from hotpath.runtime_settings import HotpathSettings, SettingsSource, env_name
from redis_adapters.event_sink import RedisEventSink
from redis_adapters.keyspace import AutosaveKeys, EventLogKeys
from redis_adapters.lock import RedisLock
from services.domain.events import Event, EventType
from tests.support.hotpath import QUESTION_IDS, insert_records
from tests.support.processes import wait_until

pytestmark = pytest.mark.slow

KEYS = AutosaveKeys.default()
EVENTS = EventLogKeys()
BACKLOG = 5_000
ANSWERED = QUESTION_IDS[:5]
BASE_MS = 1_767_225_600_000


def backlog(engine: Engine, client: redis.Redis, count: int = BACKLOG) -> list[int]:
    """`count` records in status 2, each with five autosaved answers waiting in Redis."""
    records = insert_records(engine, count)
    pipe = client.pipeline(transaction=False)
    for record_id in records:
        pipe.hset(
            KEYS.answers.item(record_id),
            mapping={str(q): f"{1 + (record_id + q) % 5}:{BASE_MS + record_id}" for q in ANSWERED},
        )
    pipe.sadd(KEYS.answers.dirty, *records)
    pipe.execute()
    return records


def answer_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.scalar(text("SELECT count(*) FROM answers")) or 0)


def test_a_5000_record_backlog_with_a_6_s_lease_and_batches_of_5000_is_persisted(
    engine: Engine, session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    backlog(engine, redis_client)
    flusher = AnswersFlusher(redis_client, session_factory)
    standby = RedisLock(redis_client, KEYS.answers.lock)
    standby_took_over: list[bool] = []

    def slow_database(step: str) -> None:
        if step == "read":
            # Longer than the lease, before the write of a chunk that is slow by itself. The
            # lease is renewed every third of it: 6 s leaves the renewing thread 4 s of slack
            # (3 s, i.e. 2 s of slack, expired once under a load average of 35).
            time.sleep(6.5)
            standby_took_over.append(standby.ensure(6_000))

    report = flusher.run_once(batch=BACKLOG, lock_ttl_ms=6_000, hook=slow_database)
    flusher.close()
    assert standby_took_over == [False]
    assert (report.owner, report.claimed, report.persisted, report.rows) == (
        True,
        BACKLOG,
        BACKLOG,
        5 * BACKLOG,
    )
    assert answer_count(engine) == 5 * BACKLOG
    assert not redis_client.exists(KEYS.answers.dirty, KEYS.answers.syncing)


def test_the_event_consumer_keeps_its_lease_through_a_slow_batch(
    redis_client: redis.Redis, session_factory: sessionmaker[Session], event_log: Engine
) -> None:
    sent = [Event.new(EventType.ANSWERS_SAVED, record_id=1 + n % 50) for n in range(BACKLOG)]
    RedisEventSink(redis_client).emit_many(sent)
    consumer = EventLogConsumer(redis_client, session_factory)
    # The batch outlasts the lease (7 s against 5 s): only renewals keep it. A 1 s lease
    # renewed every 0.33 s expired when a loaded machine left the renewing thread unscheduled
    # for 0.7 s; 5 s leaves it 3.3 s.
    report = consumer.run_once(
        batch=BACKLOG, lock_ttl_ms=5_000, hook=lambda step: time.sleep(7) if step == "moved" else None
    )
    consumer.close()
    assert (report.owner, report.taken, report.inserted) == (True, BACKLOG, BACKLOG)
    assert not redis_client.exists(EVENTS.queue, EVENTS.backup)
    with event_log.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM event_log")) == BACKLOG


def test_the_settings_scenario_persists_the_whole_backlog(
    engine: Engine,
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The hot-path loop as the process runs it, with the settings of the report."""
    backlog(engine, redis_client)
    redis_client.hset(SETTINGS_KEY, mapping={"lock_ttl_ms": 3_000, "answers_batch": 5_000})
    source = SettingsSource(redis_client, env={})
    (spec,) = build_loops(redis_client, session_factory, ["answers"])
    stop = threading.Event()
    loop = LeasedLoop(spec, source.read, stop, logger=hotpath_logger)
    with caplog.at_level(logging.ERROR, logger="hotpath.runtime_settings"):
        loop.start()
        try:
            wait_until(lambda: answer_count(engine) == 5 * BACKLOG, timeout=120, what="the whole backlog")
        finally:
            stop.set()
            loop.join(timeout=60)
    assert not loop.is_alive()
    assert loop.failures == 0
    assert not redis_client.exists(KEYS.answers.dirty, KEYS.answers.syncing)
    assert caplog.text.count("refused") == 1, caplog.text
    assert source.read() == HotpathSettings()  # the previous values: the defaults here


def test_inconsistent_settings_are_refused_once_and_the_previous_values_kept(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    source = SettingsSource(redis_client, env={})
    with caplog.at_level(logging.ERROR, logger="hotpath.runtime_settings"):
        redis_client.hset(SETTINGS_KEY, "lock_ttl_ms", 3_000)
        accepted = source.read()
        assert (accepted.lock_ttl_ms, accepted.answers_batch) == (3_000, 500)
        redis_client.hset(SETTINGS_KEY, "answers_batch", 5_000)  # 5,000 items need a 5 s lease
        assert [source.read() for _ in range(3)] == [accepted] * 3
        assert caplog.text.count("refused") == 1
        assert "answers_batch=5000" in caplog.text
        assert "5000 ms" in caplog.text
        redis_client.hset(SETTINGS_KEY, "events_batch", 4_000)  # still refused: another line
        assert source.read() == accepted
        assert caplog.text.count("refused") == 2
        redis_client.hset(SETTINGS_KEY, "lock_ttl_ms", 6_000)  # now they fit
        assert source.read() == HotpathSettings(lock_ttl_ms=6_000, answers_batch=5_000, events_batch=4_000)


def test_inconsistent_settings_at_start_up_fall_back_to_the_environment(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    redis_client.hset(SETTINGS_KEY, mapping={"lock_ttl_ms": 1_000, "progress_batch": 2_000})
    source = SettingsSource(
        redis_client, env={env_name("lock_ttl_ms"): "2000", env_name("events_batch"): "900"}
    )
    with caplog.at_level(logging.ERROR, logger="hotpath.runtime_settings"):
        assert source.read() == HotpathSettings(lock_ttl_ms=2_000, events_batch=900)
    assert caplog.text.count("refused") == 1
