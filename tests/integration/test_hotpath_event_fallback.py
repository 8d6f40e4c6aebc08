"""Event-log entries survive a Redis outage: the sink writes them to PostgreSQL.

Seen on main: events emitted while Redis was down were dropped, uncounted. Now the sink
falls back to the consumer's idempotent insert (into the month's partition), and when
the database is unreachable too the events are held in memory and handed over again
every second until a server takes them (the soak, bench/soak.py, found them dropped then);
only events beyond the hold are counted in `dropped_events()`. Either way emitting
returns at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from flask import Flask
from sqlalchemy import Engine, text

import actors.report
from actors import bootstrap
from config import ConfigError
from config.settings import DEFAULT_EVENT_LOG_QUEUE_MAX, Settings
from hotpath.eventlog_consumer import EventLogConsumer
from redis_adapters import event_sink
from redis_adapters.event_sink import REDIS_RETRY_AFTER_S, RedisEventSink
from redis_adapters.keyspace import EventLogKeys
from services.domain.events import Event, EventType, dropped_events, emit
from services.persistence.event_store import DirectEventWriter
from services.persistence.partitions import month_of, partition_name
from tests.support.refuser import CountingRefuser
from tests.support.urls import CLOSED_REDIS_URL
from web import create_app

EVENTS = EventLogKeys()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def stored(engine: Engine) -> dict[str, str]:
    """id -> the partition that holds it."""
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id::text, tableoid::regclass::text FROM event_log")).all()
    return {row[0]: row[1] for row in rows}


@pytest.fixture
def refusing() -> Iterator[CountingRefuser]:
    """A server that is down and counts how often it is tried: emitting with a dead server
    must not stall a request, so it is tried once (no retries, no backoff), or not at all."""
    down = CountingRefuser()
    yield down
    down.close()


@pytest.fixture
def redis_down(refusing: CountingRefuser) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(refusing.redis_url(), socket_connect_timeout=1, socket_timeout=1)
    yield client
    client.close()


@pytest.fixture
def writer(settings: Settings, event_log: Engine) -> Iterator[DirectEventWriter]:
    writer = DirectEventWriter(settings.database_url)
    yield writer
    writer.dispose()


def test_an_event_emitted_while_redis_is_unreachable_lands_in_the_event_log(
    redis_down: redis.Redis,
    refusing: CountingRefuser,
    writer: DirectEventWriter,
    event_log: Engine,
) -> None:
    sink = RedisEventSink(redis_down, fallback=writer)
    event = Event.new(EventType.ANSWERS_SAVED, record_id=7, user_id=3, actor="user:3", data={"n": 2})
    before = dropped_events()
    assert emit(sink, event)
    assert refusing.attempts == 1  # tried once: no retry, no backoff
    assert stored(event_log) == {str(event.id): partition_name(month_of(event.occurred_at))}
    assert dropped_events() == before
    with event_log.connect() as conn:
        row = conn.execute(text("SELECT event_type, record_id, user_id, actor, data FROM event_log")).one()
    assert tuple(row) == ("answers.saved", 7, 3, "user:3", {"n": 2})


def test_the_same_event_through_redis_later_is_stored_once(
    redis_down: redis.Redis, redis_client: redis.Redis, writer: DirectEventWriter, event_log: Engine
) -> None:
    """The direct write is the consumer's idempotent insert: a copy arriving later is a no-op.
    And Redis is tried again once `REDIS_RETRY_AFTER_S` has passed."""
    clock = Clock()
    sink = RedisEventSink(redis_down, fallback=writer, clock=clock)
    first, second = (Event.new(EventType.REPORT_REQUEUED, record_id=n) for n in (1, 2))
    assert emit(sink, first)
    sink.client = redis_client  # Redis is back...
    assert emit(sink, second)  # ...but is not tried again at once: straight to the database
    assert not redis_client.exists(EVENTS.queue)
    clock.now += REDIS_RETRY_AFTER_S
    third = Event.new(EventType.REPORT_REQUEUED, record_id=3)
    assert emit(sink, first, third)
    assert redis_client.llen(EVENTS.queue) == 2
    consumer = EventLogConsumer(redis_client, writer._factory()[0])
    assert consumer.run_once().inserted == 1  # `first` was stored already
    consumer.close()
    assert set(stored(event_log)) == {str(e.id) for e in (first, second, third)}


def test_with_the_database_unreachable_too_the_events_are_held_until_a_server_takes_them(
    redis_down: redis.Redis,
    refusing: CountingRefuser,
    redis_client: redis.Redis,
    writer: DirectEventWriter,
    event_log: Engine,
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    database_down = CountingRefuser()
    unreachable = DirectEventWriter(database_down.database_url())
    sink = RedisEventSink(redis_down, fallback=unreachable, clock=clock)
    events = [Event.new(EventType.REPORT_GENERATION_FAILED, record_id=n, actor="worker") for n in (1, 2)]
    before = dropped_events()
    with caplog.at_level(logging.INFO, logger="redis_adapters.event_sink"):
        assert emit(sink, *events)  # held: nothing lost, nothing counted
        assert refusing.attempts == 1
        assert database_down.attempts >= 1  # tried (libpq may try twice: with SSL, then without)
        tried = database_down.attempts
        # Moments later neither server is even tried: held at once.
        late = Event.new(EventType.REPORT_GENERATION_FAILED, record_id=3, actor="worker")
        assert emit(sink, late)
        assert (refusing.attempts, database_down.attempts) == (1, tried)
        assert sink.held == 3
        assert dropped_events() == before
        assert caplog.text.count("holding them in memory") == 1
        # Redis is back: the sink's own thread hands them over, every one, once.
        sink.client = redis_client
        clock.now += REDIS_RETRY_AFTER_S
        deadline = time.monotonic() + 10
        while sink.held or redis_client.llen(EVENTS.queue) < 3:
            assert time.monotonic() < deadline, (sink.held, redis_client.llen(EVENTS.queue))
            time.sleep(0.05)
        consumer = EventLogConsumer(redis_client, writer._factory()[0])
        assert consumer.run_once().inserted == 3
        consumer.close()
    assert set(stored(event_log)) == {str(e.id) for e in (*events, late)}
    assert dropped_events() == before
    unreachable.dispose()
    database_down.close()


def test_events_beyond_the_hold_are_counted_as_dropped(
    redis_down: redis.Redis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(event_sink, "HOLD_MAX", 2)
    database_down = CountingRefuser()
    writer = DirectEventWriter(database_down.database_url())
    sink = RedisEventSink(redis_down, fallback=writer, clock=Clock())
    before = dropped_events()
    with caplog.at_level(logging.ERROR, logger="redis_adapters.event_sink"):
        assert not emit(sink, *(Event.new(EventType.REPORT_REQUEUED, record_id=n) for n in (1, 2, 3)))
    assert (sink.held, dropped_events()) == (2, before + 1)
    assert f"{before + 1} dropped by this process so far" in caplog.text
    writer.dispose()
    database_down.close()


def test_a_full_queue_sends_events_to_the_database_until_it_drains(
    redis_client: redis.Redis,
    writer: DirectEventWriter,
    event_log: Engine,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """EVENT_LOG_QUEUE_MAX: with the consumer stopped, the list stops growing at its bound and
    the events past it are stored directly, none lost; once it drains, Redis takes them again."""
    sink = RedisEventSink(redis_client, fallback=writer, max_queue=3)
    queued = [Event.new(EventType.REPORT_REQUEUED, record_id=n) for n in (1, 2)]
    assert emit(sink, *queued)
    before = dropped_events()
    with caplog.at_level(logging.INFO, logger="redis_adapters.event_sink"):
        # One fits; the other two of the call, and the next call's, go to PostgreSQL.
        over = [Event.new(EventType.REPORT_REQUEUED, record_id=n) for n in (3, 4, 5)]
        assert emit(sink, *over)
        late = Event.new(EventType.REPORT_REQUEUED, record_id=6)
        assert emit(sink, late)
        assert redis_client.llen(EVENTS.queue) == 3
        assert set(stored(event_log)) == {str(e.id) for e in (*over[1:], late)}
        assert caplog.text.count("writing events to PostgreSQL until it drains") == 1
        consumer = EventLogConsumer(redis_client, writer._factory()[0])
        assert consumer.run_once().inserted == 3
        consumer.close()
        again = Event.new(EventType.REPORT_REQUEUED, record_id=7)
        assert emit(sink, again)
        assert redis_client.llen(EVENTS.queue) == 1
        assert "takes events again; 3 event(s) went to PostgreSQL meanwhile" in caplog.text
    assert dropped_events() == before
    assert set(stored(event_log)) == {str(e.id) for e in (*queued, *over, late)}


def test_an_answer_of_another_shape_sends_the_events_to_the_database(
    redis_client: redis.Redis, writer: DirectEventWriter, event_log: Engine
) -> None:
    """Redis answering the bounded push with garbage (not the count it took) is Redis failing:
    the events go to PostgreSQL, none lost."""
    sink = RedisEventSink(redis_client, fallback=writer)
    sink._push = redis_client.register_script("return 'garbage'")
    event = Event.new(EventType.ANSWERS_SAVED, record_id=8, user_id=3, actor="user:3")
    assert emit(sink, event)
    assert set(stored(event_log)) == {str(event.id)}


def test_the_bound_is_a_setting() -> None:
    assert Settings.from_env({}).event_log_queue_max == DEFAULT_EVENT_LOG_QUEUE_MAX
    assert Settings.from_env({"EVENT_LOG_QUEUE_MAX": "10"}).event_log_queue_max == 10
    with pytest.raises(ConfigError, match="EVENT_LOG_QUEUE_MAX"):
        Settings.from_env({"EVENT_LOG_QUEUE_MAX": "0"})


def test_a_sink_that_raises_is_counted_as_dropped_by_emit() -> None:
    class Broken:
        def emit_many(self, events: object) -> None:
            raise RuntimeError("broken")

    before = dropped_events()
    assert not emit(Broken(), Event.new(EventType.REPORT_REQUEUED), Event.new(EventType.REPORT_REQUEUED))
    assert dropped_events() == before + 2


def test_the_web_tier_s_record_events_are_written_with_their_change_while_redis_is_down(
    redis_down_app: Flask, user_headers: Callable[[int], dict[str, str]], event_log: Engine
) -> None:
    """createRecord and startAssessment write their events in their own statements: Redis down
    changes nothing for them (the start's record cache fails; the first save looks it up)."""
    client = redis_down_app.test_client()
    record_id = client.post("/api/assessment/createRecord", headers=user_headers(5)).get_json()["data"]["id"]
    response = client.post(
        "/api/assessment/startAssessment", json={"recordId": record_id}, headers=user_headers(5)
    )
    assert response.status_code == 200
    assert response.get_json()["data"]["status"] == 2
    with event_log.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT e.event_type, e.record_id, e.user_id, e.actor, e.occurred_at ="
                " CASE e.event_type WHEN 'record.created' THEN r.created_at ELSE r.started_at END"
                " FROM event_log e JOIN assessment_records r ON r.id = e.record_id ORDER BY e.event_type"
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        ("record.created", record_id, 5, "user:5", True),
        ("record.started", record_id, 5, "user:5", True),
    ]


def test_the_web_tier_logs_a_save_to_postgresql_while_its_list_is_full(
    settings: Settings,
    redis_client: redis.Redis,
    user_headers: Callable[[int], dict[str, str]],
    event_log: Engine,
) -> None:
    """answers.saved, the web's event through the sink, past EVENT_LOG_QUEUE_MAX: straight into
    the table (the consumer stopped or behind)."""
    app = create_app(settings.with_overrides(event_log_queue_max=1), redis_client=redis_client)
    redis_client.lpush(EVENTS.queue, b"an entry the consumer has not taken yet")
    client = app.test_client()
    record_id = client.post("/api/assessment/createRecord", headers=user_headers(5)).get_json()["data"]["id"]
    client.post("/api/assessment/startAssessment", json={"recordId": record_id}, headers=user_headers(5))
    response = client.post(
        "/api/assessment/saveAnswers",
        json={"recordId": record_id, "answers": [{"questionId": 101, "value": 3}]},
        headers=user_headers(5),
    )
    assert response.status_code == 200
    assert redis_client.llen(EVENTS.queue) == 1
    with event_log.connect() as conn:
        rows = conn.execute(
            text("SELECT record_id, actor, data FROM event_log WHERE event_type = 'answers.saved'")
        ).all()
    assert [tuple(r) for r in rows] == [(record_id, "user:5", {"questionIds": [101], "answeredCount": 1})]


def test_the_worker_logs_to_postgresql_while_redis_is_down(
    event_log: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report worker's sink (actors/report.py) falls back to DATABASE_URL by default."""
    monkeypatch.setenv("REDIS_URL", CLOSED_REDIS_URL)
    # The worker process's services, as its boot builds them from the environment.
    monkeypatch.setattr(bootstrap, "_installed", bootstrap.build_services(Settings.from_env()))
    actors.report._log_event(EventType.REPORT_GENERATION_FAILED, 42, attempt=1)
    with event_log.connect() as conn:
        rows = conn.execute(text("SELECT event_type, record_id, actor FROM event_log")).all()
    assert [tuple(r) for r in rows] == [("report.generation_failed", 42, "worker")]
