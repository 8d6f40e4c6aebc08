"""The process registry on a real Redis: beats, the timeout that shows a process gone, pruning,
and the per-minute counts' hour (zeros filled, oldest first)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import redis

from observability.heartbeat import Heartbeat
from observability.liveness import (
    BEAT_TIMEOUT_S,
    BEATS_KEY,
    PRUNE_AFTER_S,
    ProcessIdentity,
    live_processes,
    prune_beats,
    write_beat,
)
from observability.throughput import Outcome, count, last_hour
from tests.support.processes import wait_until


def identity(kind: str, pid: int, started_at: float) -> ProcessIdentity:
    return ProcessIdentity(kind=kind, host="host-a", pid=pid, version="1.2.3", started_at=started_at)


def test_a_process_missing_longer_than_the_timeout_shows_as_gone(redis_client: redis.Redis) -> None:
    now = time.time()
    write_beat(redis_client, identity("worker", 11, now - 100), "report 7", now=now)
    write_beat(redis_client, identity("hotpath", 12, now - 100), "idle", now=now - BEAT_TIMEOUT_S - 1)
    beats = live_processes(redis_client, now=now)
    assert [(b.kind, b.pid, b.alive, b.doing) for b in beats] == [
        ("hotpath", 12, False, "idle"),
        ("worker", 11, True, "report 7"),
    ]
    worker = beats[1]
    assert (worker.host, worker.version) == ("host-a", "1.2.3")
    assert worker.started_at == datetime.fromtimestamp(now - 100, UTC)
    assert worker.last_seen.tzinfo is UTC
    later = live_processes(redis_client, now=now + BEAT_TIMEOUT_S + 1)
    assert [b.alive for b in later] == [False, False]


def test_gone_processes_are_pruned_and_unreadable_fields_too(redis_client: redis.Redis) -> None:
    now = time.time()
    write_beat(redis_client, identity("worker", 21, now), "idle", now=now - PRUNE_AFTER_S - 1)
    write_beat(redis_client, identity("worker", 22, now), "idle", now=now)
    redis_client.hset(BEATS_KEY, "junk", "not json")
    assert prune_beats(redis_client, now=now) == 2
    assert [b.pid for b in live_processes(redis_client, now=now)] == [22]


def test_heartbeat_thread_writes_what_the_process_does(redis_client: redis.Redis) -> None:
    heartbeat = Heartbeat(redis_client, "reconciler", lambda: "reconciling", interval_s=0.05).start()
    try:
        wait_until(
            lambda: [b.doing for b in live_processes(redis_client)] == ["reconciling"],
            timeout=30,
            what="the first beat",
        )
    finally:
        heartbeat.stop()
    (beat,) = live_processes(redis_client)
    assert (beat.kind, beat.doing, beat.alive) == ("reconciler", "stopped", False)


def test_last_hour_is_sixty_minutes_oldest_first_with_zeros(redis_client: redis.Redis) -> None:
    now = 1_800_000_030.0  # 30 s into a minute
    count(redis_client, Outcome.PROCESSED, now=now)
    count(redis_client, Outcome.FAILED, Outcome.RETRIED, now=now - 120)
    count(redis_client, Outcome.DEAD, now=now - 3600)  # an hour ago: outside the chart
    minutes = last_hour(redis_client, now=now)
    assert len(minutes) == 60
    assert minutes[-1].minute == datetime.fromtimestamp(1_800_000_000, UTC)
    assert minutes[0].minute == datetime.fromtimestamp(1_800_000_000 - 59 * 60, UTC)
    assert (minutes[-1].processed, minutes[-3].failed, minutes[-3].retried) == (1, 1, 1)
    assert sum(m.processed + m.failed + m.retried + m.dead for m in minutes) == 3
    assert 0 < redis_client.ttl("throughput:1800000000") <= 2 * 3600
