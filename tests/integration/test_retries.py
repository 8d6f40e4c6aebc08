"""ExactRetries on a real Redis: the seed's schedule, dead letters, the shared attempt budget (property 3)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

import dramatiq
import dramatiq.worker
import pytest
import redis
from dramatiq.errors import ConnectionClosed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from listbroker import (
    DEFAULT_MAX_LOST_DELIVERIES,
    LOST_DELIVERIES_OPTION,
    DeadLetterHook,
    ExactRetries,
    ListMessageProxy,
    RedisListBroker,
)
from listbroker.consumer import RedisListConsumer
from listbroker.scripts import DELAYED_PREFIX_LEN

from redis_adapters.queues import (
    DEAD_LETTER_QUEUE_KEY,
    MAX_RETRY_COUNT,
    REPORT_ACTOR_NAME,
    REPORT_DELAYED_KEY,
    REPORT_JOBS_KEY,
    REPORT_QUEUE_KEY,
    REPORT_QUEUE_NAME,
    RETRY_DELAYS_MS,
)
from redis_adapters.report_message import MAX_RECORD_ID, ReportQueueMessage
from redis_adapters.report_queue import RedisReportQueue
from services.domain.errors import DatabaseUnavailable
from tests.support.actors import declare_actor
from tests.support.broker_fixtures import WorkerFactory
from tests.support.redis_keys import as_bytes
from tests.support.retry_clock import RetryClock, assert_schedule

DotnetMessage = st.builds(
    ReportQueueMessage,
    st.integers(min_value=1, max_value=MAX_RECORD_ID),
    st.integers(min_value=0, max_value=MAX_RETRY_COUNT - 1),
    st.sampled_from(["2025-01-15T10:30:00", "2025-01-15T10:30:00.1234567+08:00", "2026-11-30T04:00:00.5Z"]),
)


def declare_report_actor(
    broker: RedisListBroker,
    fn: Callable[[int], None],
    *,
    delays: tuple[int, ...] = RETRY_DELAYS_MS,
    on_dead_letter: DeadLetterHook | None = None,
) -> dramatiq.Actor[[int], None]:
    """A stand-in for actors.report.generate_report with the same name, queue and retry options."""
    return declare_actor(
        fn,
        broker,
        actor_name=REPORT_ACTOR_NAME,
        queue_name=REPORT_QUEUE_NAME,
        retry_delays=delays,
        on_dead_letter=on_dead_letter or (lambda message: None),
    )


def retries_middleware(broker: RedisListBroker) -> ExactRetries:
    return next(m for m in broker.middleware if isinstance(m, ExactRetries))


def delayed_entries(client: redis.Redis) -> list[tuple[ReportQueueMessage, float]]:
    entries = cast(list[tuple[bytes, float]], client.zrange(REPORT_DELAYED_KEY, 0, -1, withscores=True))
    return [
        (ReportQueueMessage.decode(as_bytes(member)[DELAYED_PREFIX_LEN:]), float(score))
        for member, score in entries
    ]


def redis_millis(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds * 1000 + micros / 1000


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(DotnetMessage)
def test_property_3_failure_increments_retry_count(
    broker: RedisListBroker, redis_client: redis.Redis, message: ReportQueueMessage
) -> None:
    """Feature: redis-report-queue, Property 3: 失败重试递增 RetryCount.

    A failed message with RetryCount r < 3 comes back with r + 1, the same RecordId and
    EnqueueTime, due after the r-th delay of the schedule; the failed delivery is gone.
    """
    redis_client.delete(REPORT_QUEUE_KEY, REPORT_DELAYED_KEY)
    if REPORT_ACTOR_NAME not in broker.actors:
        declare_report_actor(broker, lambda record_id: None)
    redis_client.lpush(REPORT_QUEUE_KEY, message.encode())
    consumer = broker.consume(REPORT_QUEUE_NAME, prefetch=1, timeout=1000)
    proxy = next(consumer)
    assert isinstance(proxy, ListMessageProxy)

    before = redis_millis(redis_client)
    retries_middleware(broker).after_process_message(
        broker, proxy, exception=RuntimeError("generation failed")
    )
    after = redis_millis(redis_client)

    [(retried, due)] = delayed_entries(redis_client)
    assert retried == ReportQueueMessage(message.record_id, message.retry_count + 1, message.enqueue_time)
    delay = RETRY_DELAYS_MS[message.retry_count]
    assert before + delay - 1 <= due <= after + delay + 1
    assert redis_client.llen(consumer.processing_key) == 0
    consumer.ack(proxy)  # what the worker does next: a no-op for a settled message
    consumer.close()
    assert redis_client.llen(REPORT_QUEUE_KEY) == 0


def test_schedule_through_a_worker_then_dead_letter(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    delays = (300, 600, 900)
    dead: list[dramatiq.Message[Any]] = []

    def always_fails(record_id: int) -> None:
        raise RuntimeError("boom")

    clock = RetryClock(redis_client).install(broker)
    declare_report_actor(broker, always_fails, delays=delays, on_dead_letter=dead.append)
    first = ReportQueueMessage(7, 0, "2025-01-15T10:30:00.1234567+08:00")
    redis_client.lpush(REPORT_QUEUE_KEY, first.encode())
    make_worker(broker, threads=2)
    deadline = time.monotonic() + 60
    while not redis_client.llen(DEAD_LETTER_QUEUE_KEY) and time.monotonic() < deadline:
        time.sleep(0.01)

    assert_schedule(clock.attempts, delays)
    [dead_payload] = redis_client.lrange(DEAD_LETTER_QUEUE_KEY, 0, -1)
    dead_letter = ReportQueueMessage.decode(dead_payload)
    assert replace(dead_letter, dead=None) == first.retried(3)
    assert dead_letter.dead is not None
    assert (dead_letter.dead.attempts, dead_letter.dead.last_error) == (4, "RuntimeError: boom")
    assert [m.args for m in dead] == [(7,)]
    broker.join(REPORT_QUEUE_NAME, timeout=20_000)


def test_other_messages_run_during_a_backoff(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    attempts: list[int] = []

    def fails_for_one(record_id: int) -> None:
        attempts.append(record_id)
        if record_id == 1:
            raise RuntimeError("record 1 is broken")

    # A backoff far longer than the test: a sleeping backoff would block everything behind it.
    declare_report_actor(broker, fails_for_one, delays=(60_000, 60_000, 60_000))
    redis_client.lpush(REPORT_QUEUE_KEY, ReportQueueMessage.new(1).encode())
    make_worker(broker, threads=1)  # one thread
    deadline = time.monotonic() + 30
    while not redis_client.zcard(REPORT_DELAYED_KEY) and time.monotonic() < deadline:
        time.sleep(0.01)
    redis_client.lpush(REPORT_QUEUE_KEY, *[ReportQueueMessage.new(i).encode() for i in (2, 3)])
    deadline = time.monotonic() + 30
    while sorted(attempts) != [1, 2, 3] and time.monotonic() < deadline:
        time.sleep(0.01)
    # 2 and 3 ran while record 1's retry still waits (its backoff is a minute).
    assert sorted(attempts) == [1, 2, 3]
    assert [m.record_id for m, _ in delayed_entries(redis_client)] == [1]


def test_failing_dead_letter_hook_still_dead_letters(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    def broken_hook(message: dramatiq.Message[Any]) -> None:
        raise DatabaseUnavailable("database down while setting status 5")  # as the real hook raises it

    def always_fails(record_id: int) -> None:
        raise RuntimeError("boom")

    declare_report_actor(broker, always_fails, on_dead_letter=broken_hook)
    last = ReportQueueMessage(9, MAX_RETRY_COUNT, "2025-01-15T10:30:00")
    redis_client.lpush(REPORT_QUEUE_KEY, last.encode())
    make_worker(broker, threads=1)
    broker.join(REPORT_QUEUE_NAME, timeout=20_000)
    [dead_payload] = redis_client.lrange(DEAD_LETTER_QUEUE_KEY, 0, -1)
    dead_letter = ReportQueueMessage.decode(dead_payload)
    assert replace(dead_letter, dead=None) == last
    assert dead_letter.dead is not None
    assert dead_letter.dead.last_error == "RuntimeError: boom"


def test_deliveries_lost_with_their_worker_do_not_spend_the_failure_budget(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    """A worker killed under a job (or holding prefetched jobs it never started) says nothing
    about the job: RetryCount counts failures only (the seed's Property 3). A message lost more
    than DEFAULT_MAX_LOST_DELIVERIES times is dead-lettered as a poison pill (found by the soak:
    records whose 4th attempt died with its worker were dead-lettered without ever running it)."""
    ran: list[int] = []
    dead: list[dramatiq.Message[Any]] = []
    declare_report_actor(broker, ran.append, on_dead_letter=dead.append)
    # RetryCount 3 (its last attempt) and one delivery lost with a killed worker: it still runs.
    last_attempt = ReportQueueMessage(11, MAX_RETRY_COUNT, "2025-01-15T10:30:00").encode()
    # Lost as many times as allowed: it runs once more.
    lost_enough = ReportQueueMessage(12, 0, "2025-01-15T10:30:00").encode()
    # Lost one time more: a poison pill, dead-lettered on arrival without running.
    poison = ReportQueueMessage(13, 1, "2025-01-15T10:30:00").encode()
    redis_client.lpush(REPORT_QUEUE_KEY, last_attempt, lost_enough, poison)
    redis_client.hset(
        f"{REPORT_QUEUE_KEY}:crashed",
        mapping={
            last_attempt: 1,
            lost_enough: DEFAULT_MAX_LOST_DELIVERIES,
            poison: DEFAULT_MAX_LOST_DELIVERIES + 1,
        },
    )
    make_worker(broker, threads=1)
    broker.join(REPORT_QUEUE_NAME, timeout=20_000)
    assert ran == [11, 12]
    assert [m.args for m in dead] == [(13,)]
    assert dead[0].options[LOST_DELIVERIES_OPTION] == DEFAULT_MAX_LOST_DELIVERIES + 1
    [dead_payload] = redis_client.lrange(DEAD_LETTER_QUEUE_KEY, 0, -1)
    dead_letter = ReportQueueMessage.decode(dead_payload)
    assert replace(dead_letter, dead=None) == ReportQueueMessage.decode(poison)
    assert dead_letter.dead is not None
    assert dead_letter.dead.attempts == 1 + DEFAULT_MAX_LOST_DELIVERIES + 1  # a failure and the losses
    assert "lost with its worker" in (dead_letter.dead.last_error or "")
    assert not redis_client.exists(f"{REPORT_QUEUE_KEY}:crashed")


def test_a_failure_after_a_lost_delivery_takes_its_own_step_of_the_schedule(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    declare_report_actor(broker, lambda record_id: None)
    payload = ReportQueueMessage(13, 0, "2025-01-15T10:30:00").encode()
    redis_client.lpush(REPORT_QUEUE_KEY, payload)
    redis_client.hset(f"{REPORT_QUEUE_KEY}:crashed", payload, 1)
    consumer = broker.consume(REPORT_QUEUE_NAME, prefetch=1, timeout=1000)
    proxy = next(consumer)
    assert isinstance(proxy, ListMessageProxy)
    assert proxy.redeliveries == 1
    retries_middleware(broker).after_process_message(broker, proxy, exception=RuntimeError())
    [(retried, delay_due)] = delayed_entries(redis_client)
    assert retried.retry_count == 1  # the first failure (Property 3: RetryCount + 1)
    # Due on the first step (10 s), not the second: the lost delivery took no step.
    assert delay_due - redis_millis(redis_client) <= RETRY_DELAYS_MS[0]
    assert not redis_client.exists(f"{REPORT_QUEUE_KEY}:crashed")


def test_no_retry_for_a_message_given_back_while_it_ran(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    """If this worker was presumed dead and its message returned, its late failure schedules nothing."""
    declare_report_actor(broker, lambda record_id: None)
    redis_client.lpush(REPORT_QUEUE_KEY, ReportQueueMessage.new(14).encode())
    consumer = broker.consume(REPORT_QUEUE_NAME, prefetch=1, timeout=1000)
    proxy = next(consumer)
    assert isinstance(proxy, ListMessageProxy)
    redis_client.lmove(consumer.processing_key, REPORT_QUEUE_KEY, "LEFT", "RIGHT")  # what the reaper does
    retries_middleware(broker).after_process_message(broker, proxy, exception=RuntimeError())
    assert redis_client.zcard(REPORT_DELAYED_KEY) == 0
    assert redis_client.llen(REPORT_QUEUE_KEY) == 1


@pytest.mark.parametrize("threads", [1, 4])
def test_many_failures_at_once_are_released_on_time(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis, threads: int
) -> None:
    seen: dict[int, list[float]] = {}
    lock = threading.Lock()

    def fail_once(record_id: int) -> None:
        with lock:
            seen.setdefault(record_id, []).append(time.monotonic())
            first = len(seen[record_id]) == 1
        if first:
            raise RuntimeError("first attempt fails")

    declare_report_actor(broker, fail_once, delays=(1000, 1000, 1000))
    redis_client.lpush(REPORT_QUEUE_KEY, *[ReportQueueMessage.new(i).encode() for i in range(1, 201)])
    make_worker(broker, threads=threads)
    time.sleep(0.5)
    broker.join(REPORT_QUEUE_NAME, timeout=120_000)
    gaps = sorted(times[1] - times[0] for times in seen.values())
    assert len(gaps) == 200
    # Each retry starts 1 s after its failure, not later than the lateness target plus
    # queueing: the 200 retries fall due together and run one after the other, as the first
    # attempts did, so the time the worker took for the first pass (long on a loaded machine)
    # bounds the queueing of the second. A release that lags (a missed poll) still fails this.
    first_pass = max(times[0] for times in seen.values()) - min(times[0] for times in seen.values())
    assert gaps[0] >= 0.995
    assert gaps[int(len(gaps) * 0.99) - 1] <= 1.0 + 0.25 + max(0.25, first_pass), (gaps[-5:], first_pass)


@pytest.mark.parametrize(("hook_result", "left"), [(None, None), (False, b"dead")])
def test_a_hook_that_leaves_its_follow_up_keeps_the_dead_mark_of_a_last_job(
    broker: RedisListBroker,
    make_worker: WorkerFactory,
    redis_client: redis.Redis,
    hook_result: bool | None,
    left: bytes | None,
) -> None:
    """A hook returning False did not do the follow-up (another job of the key was alive when
    it looked): if the job was the key's last after all, the index keeps the `dead` mark, so
    the reconciler does it; a hook that did it leaves no mark."""

    def always_fails(record_id: int) -> None:
        raise RuntimeError("boom")

    declare_report_actor(broker, always_fails, on_dead_letter=lambda message: hook_result)
    last = ReportQueueMessage(9, MAX_RETRY_COUNT, "2025-01-15T10:30:00")
    RedisReportQueue(redis_client).index.enqueue([last.encode()])
    make_worker(broker, threads=1)
    broker.join(REPORT_QUEUE_NAME, timeout=20_000)
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 1
    assert redis_client.hget(REPORT_JOBS_KEY, "9") == left


def test_a_retry_redis_failed_to_record_is_recorded_by_the_ack_not_lost(
    broker: RedisListBroker,
    make_worker: WorkerFactory,
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by a 10-minute soak: a connection reset while ExactRetries recorded a failed
    attempt's retry, then Dramatiq acknowledged the message (it had not failed for Dramatiq):
    the job left its processing list and the index with a retry to come, and another job's
    dead letter set status 5 under it. The ack records the retry instead, once Redis answers
    (Dramatiq repeats an ack that raised a connection error)."""
    monkeypatch.setattr(dramatiq.worker, "POST_PROCESS_MESSAGE_RETRY_DELAY_SECS", 0.05)
    real_settle = RedisListConsumer.settle
    failures = {"left": 2}  # the retry's recording, then the ack's first try of it

    def flaky_settle(
        self: RedisListConsumer, proxy: ListMessageProxy, mode: str, *args: Any, **kw: Any
    ) -> bool:
        if mode == "delay" and failures["left"]:
            failures["left"] -= 1
            raise ConnectionClosed(redis.ConnectionError("Connection reset by peer"))
        return real_settle(self, proxy, mode, *args, **kw)

    monkeypatch.setattr(RedisListConsumer, "settle", flaky_settle)
    attempts: list[int] = []

    def fails_once(record_id: int) -> None:
        attempts.append(record_id)
        if len(attempts) == 1:
            raise RuntimeError("boom")

    declare_report_actor(broker, fails_once, delays=(10, 10, 10))
    RedisReportQueue(redis_client).enqueue(7)  # counted in the job index
    make_worker(broker, threads=1)
    deadline = time.monotonic() + 30
    while len(attempts) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    broker.join(REPORT_QUEUE_NAME, timeout=20_000)
    assert attempts == [7, 7]  # the retry ran
    assert failures["left"] == 0
    assert redis_client.hget(REPORT_JOBS_KEY, "7") is None  # the job ended with its success
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 0
