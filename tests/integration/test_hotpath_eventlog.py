"""The event log: sink, consumer, crash recovery, one consumer at a time, monthly partitions."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime

import pytest
import redis
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from hotpath.eventlog_consumer import EventLogConsumer
from redis_adapters.event_sink import RedisEventSink
from redis_adapters.keyspace import EventLogKeys
from redis_adapters.lock import RedisLock
from services.domain.events import Event, EventType
from services.persistence.partitions import add_months, month_of, partition_name

KEYS = EventLogKeys()


class Killed(BaseException):
    """The process dies here (nothing after this point runs)."""


def events(count: int, record_id: int = 1, **data: object) -> list[Event]:
    return [
        Event.new(EventType.ANSWERS_SAVED, record_id=record_id, actor="user:1", data=data)
        for _ in range(count)
    ]


def stored(engine: Engine) -> dict[str, int]:
    """id -> how many rows hold it."""
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id::text, count(*) FROM event_log GROUP BY id")).all()
    return {row[0]: int(row[1]) for row in rows}


def partitions_used(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT tableoid::regclass::text, count(*) FROM event_log GROUP BY 1")).all()
    return {row[0]: int(row[1]) for row in rows}


@pytest.fixture
def consumer(
    redis_client: redis.Redis, session_factory: sessionmaker[Session], event_log: Engine
) -> EventLogConsumer:
    return EventLogConsumer(redis_client, session_factory)


def test_events_are_moved_and_inserted_in_bulk_into_their_month(
    consumer: EventLogConsumer, redis_client: redis.Redis, event_log: Engine
) -> None:
    sent = events(25, note="x")
    RedisEventSink(redis_client).emit_many(sent)
    first = consumer.run_once(batch=10)
    assert (first.owner, first.replayed, first.taken, first.inserted) == (True, False, 10, 10)
    while consumer.run_once(batch=10).taken:
        pass
    assert stored(event_log) == {str(e.id): 1 for e in sent}
    assert not redis_client.exists(KEYS.queue, KEYS.backup)
    assert partitions_used(event_log) == {partition_name(month_of(datetime.now(UTC))): 25}
    with event_log.connect() as conn:
        row = conn.execute(text("SELECT event_type, record_id, actor, data FROM event_log LIMIT 1")).one()
    assert tuple(row) == ("answers.saved", 1, "user:1", {"note": "x"})


def test_undecodable_entries_are_kept_aside_verbatim(
    consumer: EventLogConsumer, redis_client: redis.Redis, event_log: Engine
) -> None:
    good = events(2)
    bad = [
        b"not json",
        b"[1, 2]",
        json.dumps({"id": "nope", "type": "x", "occurredAt": "2026-01-01T00:00:00Z"}).encode(),
        json.dumps({"id": str(uuid.uuid4()), "type": "x", "occurredAt": "yesterday"}).encode(),
        json.dumps(
            {"id": str(uuid.uuid4()), "type": "x", "occurredAt": "2026-01-01", "data": {"a": "\x00"}}
        ).encode(),
        b"\xff\xfe",
    ]
    redis_client.lpush(KEYS.queue, good[0].encode(), *bad, good[1].encode())
    report = consumer.run_once()
    assert report.inserted == 2
    assert sorted(report.invalid) == sorted(bad)
    assert sorted(redis_client.lrange(KEYS.invalid, 0, -1)) == sorted(bad)
    assert set(stored(event_log)) == {str(e.id) for e in good}
    assert not redis_client.exists(KEYS.backup)


def test_a_row_postgresql_refuses_is_isolated(consumer: EventLogConsumer, event_log: Engine) -> None:
    fine = events(2)
    too_long = Event.new("t" * 100)  # only possible when bypassing decode: varchar(64)
    inserted, refused = consumer._insert([(fine[0], b"a"), (too_long, b"b"), (fine[1], b"c")])
    assert (inserted, refused) == (2, [b"b"])
    assert set(stored(event_log)) == {str(e.id) for e in fine}


def test_a_crash_after_the_insert_replays_the_batch_without_duplicates(
    consumer: EventLogConsumer, redis_client: redis.Redis, event_log: Engine
) -> None:
    sent = events(5)
    RedisEventSink(redis_client).emit_many(sent)

    def crash(step: str) -> None:
        if step == "inserted":
            raise Killed("between the commit and the clear")

    with pytest.raises(Killed):
        consumer.run_once(hook=crash)
    assert redis_client.llen(KEYS.backup) == 5
    RedisEventSink(redis_client).emit_many(later := events(1))
    replay = consumer.run_once()
    assert (replay.replayed, replay.taken, replay.inserted) == (True, 5, 0)  # all already stored
    assert consumer.run_once().taken == 1  # only then the queue
    assert stored(event_log) == {str(e.id): 1 for e in [*sent, *later]}


def test_two_consumers_one_lock_and_a_dead_owner_is_taken_over(
    redis_client: redis.Redis, session_factory: sessionmaker[Session], event_log: Engine
) -> None:
    first = EventLogConsumer(redis_client, session_factory)
    second = EventLogConsumer(redis_client, session_factory)
    sent = events(4)
    RedisEventSink(redis_client).emit_many(sent)

    def die(step: str) -> None:
        if step == "moved":
            raise Killed("between the move and the insert")

    with pytest.raises(Killed):
        first.run_once(batch=3, lock_ttl_ms=500, hook=die)
    assert redis_client.llen(KEYS.backup) == 3
    standby = second.run_once(lock_ttl_ms=500)
    assert not standby.owner
    assert redis_client.llen(KEYS.queue) == 1  # the standby touched nothing
    assert RedisLock(redis_client, KEYS.lock).holder() == first.lock.token
    time.sleep(0.6)  # the owner never renews: its lease expires
    took_over = second.run_once(lock_ttl_ms=500)
    assert (took_over.owner, took_over.replayed, took_over.inserted) == (True, True, 3)
    assert second.run_once(lock_ttl_ms=500).inserted == 1
    assert stored(event_log) == {str(e.id): 1 for e in sent}
    assert not first.run_once(lock_ttl_ms=500).owner


def test_only_the_owner_releases_the_lock(redis_client: redis.Redis) -> None:
    owner = RedisLock(redis_client, "eventlog:lock")
    other = RedisLock(redis_client, "eventlog:lock")
    assert owner.ensure(5_000)
    assert not other.ensure(5_000)
    assert not other.release()
    assert not other.renew(5_000)
    assert owner.holder() == owner.token
    assert owner.release()
    assert other.ensure(5_000)


def test_a_month_without_partition_gets_one_and_leaves_the_default(
    consumer: EventLogConsumer, redis_client: redis.Redis, event_log: Engine
) -> None:
    first_day = add_months(month_of(datetime.now(UTC)), -3)
    name = partition_name(first_day)
    month = datetime(first_day.year, first_day.month, 15, tzinfo=UTC)
    early = Event(uuid.uuid4(), "record.created", month, record_id=1)
    with event_log.begin() as conn:  # a row of that month already sits in the default partition
        conn.execute(
            text("INSERT INTO event_log (id, occurred_at, event_type) VALUES (:id, :t, 'x')"),
            {"id": uuid.uuid4(), "t": month.replace(day=1)},
        )
    try:
        assert partitions_used(event_log) == {"event_log_default": 1}
        RedisEventSink(redis_client).emit_many([early])
        consumer.run_once()
        assert partitions_used(event_log) == {name: 2}
        ancient = Event(uuid.uuid4(), "record.created", datetime(1999, 1, 1, tzinfo=UTC))
        RedisEventSink(redis_client).emit_many([ancient])
        consumer.run_once()  # far outside the window: no partition of its own
        assert partitions_used(event_log) == {name: 2, "event_log_default": 1}
    finally:
        with event_log.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS {name}"))
