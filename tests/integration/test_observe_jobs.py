"""The worker's observer on a real Redis: after a known workload the Prometheus counters and
the per-minute counts equal what happened; the worker's heartbeat is in the process registry."""

from __future__ import annotations

import os
import threading

import dramatiq
import redis
from listbroker import RedisListBroker
from prometheus_client import REGISTRY

from observability.job_observer import JobObserver
from observability.liveness import live_processes
from observability.throughput import last_hour
from redis_adapters.queues import (
    DEAD_LETTER_QUEUE_KEY,
    REPORT_ACTOR_NAME,
    REPORT_QUEUE_KEY,
    REPORT_QUEUE_NAME,
)
from redis_adapters.report_message import ReportQueueMessage
from tests.support.broker_fixtures import WorkerFactory
from tests.support.processes import wait_until

LABELS = {"queue_name": REPORT_QUEUE_NAME, "actor_name": REPORT_ACTOR_NAME}
COUNTERS = (
    "dramatiq_messages_total",
    "dramatiq_message_errors_total",
    "dramatiq_message_retries_total",
    "dramatiq_message_rejects_total",
)

#: Record ids of the workload: these succeed at once, these fail once then succeed, these always fail.
SUCCEED = range(1, 6)
FAIL_ONCE = range(101, 103)
ALWAYS_FAIL = range(201, 204)
#: A short schedule of three retries, as the report actor's (10/30/60 s) but in milliseconds.
FAST_DELAYS = (10, 10, 10)


def counters() -> dict[str, float]:
    return {name: REGISTRY.get_sample_value(name, LABELS) or 0.0 for name in COUNTERS}


def test_counters_and_minutes_match_a_known_workload(
    broker: RedisListBroker, redis_client: redis.Redis, make_worker: WorkerFactory
) -> None:
    failed_once: set[int] = set()
    lock = threading.Lock()

    def generate(record_id: int) -> None:
        if record_id in ALWAYS_FAIL:
            raise RuntimeError("generation failed")
        if record_id in FAIL_ONCE:
            with lock:
                first = record_id not in failed_once
                failed_once.add(record_id)
            if first:
                raise RuntimeError("first attempt fails")

    dramatiq.actor(
        broker=broker,
        actor_name=REPORT_ACTOR_NAME,
        queue_name=REPORT_QUEUE_NAME,
        retry_delays=FAST_DELAYS,
        on_dead_letter=lambda message: None,
    )(generate)
    before = counters()
    for record_id in [*SUCCEED, *FAIL_ONCE, *ALWAYS_FAIL]:
        redis_client.lpush(REPORT_QUEUE_KEY, ReportQueueMessage.new(record_id).encode())
    worker = make_worker(broker, threads=4)
    broker.join(REPORT_QUEUE_NAME, timeout=20_000)
    worker.stop(timeout=10_000)  # its last per-minute counts are written at shutdown

    processed = len(SUCCEED) + len(FAIL_ONCE)
    retried = len(FAIL_ONCE) + len(FAST_DELAYS) * len(ALWAYS_FAIL)
    dead = len(ALWAYS_FAIL)
    errors = retried + dead
    after = counters()
    assert {name: after[name] - before[name] for name in COUNTERS} == {
        "dramatiq_messages_total": processed + errors,
        "dramatiq_message_errors_total": errors,
        "dramatiq_message_retries_total": retried,
        "dramatiq_message_rejects_total": dead,
    }
    minutes = last_hour(redis_client)
    assert len(minutes) == 60
    assert sum(m.processed for m in minutes) == processed
    assert sum(m.failed for m in minutes) == errors
    assert sum(m.retried for m in minutes) == retried
    assert sum(m.dead for m in minutes) == dead
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == dead


def test_worker_beats_while_running_and_says_stopped_at_shutdown(
    broker: RedisListBroker, redis_client: redis.Redis, make_worker: WorkerFactory
) -> None:
    started = threading.Event()
    release = threading.Event()

    def generate(record_id: int) -> None:
        started.set()
        release.wait(10)

    dramatiq.actor(broker=broker, actor_name=REPORT_ACTOR_NAME, queue_name=REPORT_QUEUE_NAME)(generate)
    worker = make_worker(broker)
    observer = next(m for m in broker.middleware if isinstance(m, JobObserver))
    redis_client.lpush(REPORT_QUEUE_KEY, ReportQueueMessage.new(42).encode())
    assert started.wait(10)
    assert observer.activity() == "report 42"

    def ours() -> list[str]:
        return [b.doing for b in live_processes(redis_client) if b.kind == "worker" and b.pid == os.getpid()]

    wait_until(lambda: ours() != [], timeout=30, what="the worker's first beat")
    beat = next(b for b in live_processes(redis_client) if b.pid == os.getpid())
    assert beat.alive
    assert beat.started_at <= beat.last_seen
    assert beat.version
    release.set()
    broker.join(REPORT_QUEUE_NAME, timeout=10_000)
    assert observer.activity() == "idle"
    worker.stop(timeout=10_000)
    assert ours() == ["stopped"]
    assert not any(b.alive for b in live_processes(redis_client) if b.pid == os.getpid())
