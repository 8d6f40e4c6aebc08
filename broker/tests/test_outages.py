"""Redis outages and failed attempts as Dramatiq's worker logs them.

A consumer waits a Redis error out itself (consumer.py): Dramatiq's consumer thread never
restarts it, so it never logs its CRITICAL "Consumer encountered a connection error" and INFO
"Restarting consumer" lines; the consumer logs the outage once and its end. An actor on an exact
schedule expects every failure (`throws`, set by `ExactRetries`): Dramatiq's worker logs a
failed attempt in one INFO line, not an ERROR with its traceback, which comes once, with the
dead letter.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import dramatiq
import pytest
import redis
from listbroker import RedisListBroker
from listbroker.consumer import FETCH_FIRST_BACKOFF_S, ListMessageProxy
from support import BrokerFactory, WorkerFactory

QUEUE = "outage"

#: Longest wait for what a test waits for (a bound, not a measure).
PATIENCE_S = 30.0


class Cut:
    """Whether Redis answers the connections of a test's client."""

    def __init__(self) -> None:
        self.down = False


class CuttableConnection(redis.Connection):
    """A connection that fails as one to an unreachable server does while its `cut` is down."""

    def __init__(self, *, cut: Cut, **kwargs: Any) -> None:
        redis.Connection.__init__(self, **kwargs)
        self.cut = cut

    def _refuse(self) -> None:
        if self.cut.down:
            redis.Connection.disconnect(self)
            raise redis.ConnectionError("Redis cut off by the test")

    def connect(self) -> None:
        self._refuse()
        redis.Connection.connect(self)

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self._refuse()
        redis.Connection.send_packed_command(self, command, check_health)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        self._refuse()
        return super().read_response(*args, **kwargs)


@pytest.fixture
def cut() -> Cut:
    return Cut()


@pytest.fixture
def cuttable_broker(make_broker: BrokerFactory, redis_url: str, cut: Cut) -> RedisListBroker:
    pool = redis.ConnectionPool.from_url(
        redis_url, connection_class=CuttableConnection, cut=cut, socket_timeout=10
    )
    return make_broker(client=redis.Redis(connection_pool=pool))


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, f"waited in vain for {what}"
        time.sleep(0.02)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def lines_of(logs: pytest.LogCaptureFixture, prefix: str, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in logs.records if r.name.startswith(prefix) and r.levelno >= level]


def test_a_redis_outage_under_a_dramatiq_worker_restarts_no_consumer_and_logs_none_of_dramatiqs_lines(
    cuttable_broker: RedisListBroker,
    make_worker: WorkerFactory,
    cut: Cut,
    logs: pytest.LogCaptureFixture,
) -> None:
    done: list[int] = []

    @dramatiq.actor(broker=cuttable_broker, queue_name=QUEUE)
    def note(n: int) -> None:
        done.append(n)

    worker = make_worker(cuttable_broker)
    note.send(1)
    wait_for(lambda: done == [1], "the first job")
    thread = worker.consumers[QUEUE]
    consumer = thread.consumer
    cut.down = True
    time.sleep(FETCH_FIRST_BACKOFF_S * 3 + 0.5)  # a few attempts, each failing
    cut.down = False
    wait_for(lambda: bool(lines_of(logs, "listbroker.consumer", logging.WARNING)), "the outage's line")
    note.send(2)
    wait_for(lambda: done == [1, 2], "a job after the outage")

    assert thread.consumer is consumer, "Dramatiq restarted the consumer"
    assert thread.is_alive()
    # Not one line of Dramatiq's consumer thread: no CRITICAL connection error, no restart.
    assert not lines_of(logs, "dramatiq.worker"), lines_of(logs, "dramatiq.worker")
    consumer_lines = lines_of(logs, "listbroker.consumer", logging.WARNING)
    assert sum(m.startswith(f"Consumer of {QUEUE}:queue: ConnectionError") for m in consumer_lines) == 1
    wait_for(
        lambda: any("recovered after" in m for m in lines_of(logs, "listbroker.consumer", logging.WARNING)),
        "the recovery's line",
    )


def test_a_worker_stops_promptly_while_its_consumer_waits_for_redis(
    cuttable_broker: RedisListBroker, make_worker: WorkerFactory, cut: Cut
) -> None:
    @dramatiq.actor(broker=cuttable_broker, queue_name=QUEUE)
    def note(n: int) -> None:
        pass

    worker = make_worker(cuttable_broker)
    consumer = worker.consumers[QUEUE]
    wait_for(lambda: consumer.consumer is not None, "the consumer")
    cut.down = True
    time.sleep(0.5)
    started = time.monotonic()
    worker.stop(timeout=10_000)
    # A bound far above the wait's pieces (one worker timeout: 0.1 s here), below the backoff's cap.
    assert time.monotonic() - started < 5
    cut.down = False


def test_the_messages_of_a_fetch_whose_reply_was_lost_go_back_to_the_queue_once_redis_answers(
    broker: RedisListBroker,
    redis_client: redis.Redis,
    logs: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fetch ran (its messages moved into the processing list) but its reply never came:
    the consumer does not know of them. A consumer Dramatiq restarted left them to its release;
    this one returns them when it rejoins, and takes them again: each runs once. The ack still
    pending when Redis comes back (its message is in the list too) is not taken for one of them."""

    @dramatiq.actor(broker=broker, queue_name=QUEUE)
    def note(n: int) -> None:
        pass

    note.send(1)
    consumer = broker.consume(QUEUE, prefetch=3, timeout=100)
    first = next(consumer)
    assert isinstance(first, ListMessageProxy)
    note.send(2)
    note.send(3)
    call = consumer.channel.call

    def reply_lost(*args: Any) -> Any:
        call(*args)
        monkeypatch.setattr(consumer.channel, "call", call)
        raise redis.ConnectionError("reply lost")

    monkeypatch.setattr(consumer.channel, "call", reply_lost)
    assert next(consumer) is None  # the fetch of 2 and 3 ran; its reply was lost
    keys = broker.queue_keys(QUEUE)
    assert redis_client.llen(consumer.processing_key) == 3
    consumer.ack(first)  # pending: it rides along with the next fetch
    assert redis_client.llen(consumer.processing_key) == 3

    taken: list[ListMessageProxy] = []
    deadline = time.monotonic() + PATIENCE_S
    while len(taken) < 2 and time.monotonic() < deadline:
        message = next(consumer)
        if message is not None:
            assert isinstance(message, ListMessageProxy)
            taken.append(message)
    assert sorted(m.args[0] for m in taken) == [2, 3]
    assert next(consumer) is None
    for message in taken:
        consumer.ack(message)
    assert next(consumer) is None  # the acks ride along with this fetch
    assert redis_client.llen(consumer.processing_key) == 0
    assert redis_client.llen(keys.queue) == 0
    [returned] = [m for m in lines_of(logs, "listbroker.consumer") if "reply was lost" in m]
    assert "2 message(s)" in returned
    consumer.close()


def test_a_failed_attempt_of_an_actor_on_a_schedule_logs_no_error_and_the_dead_letter_its_traceback(
    broker: RedisListBroker, make_worker: WorkerFactory, logs: pytest.LogCaptureFixture
) -> None:
    attempts: list[int] = []

    @dramatiq.actor(broker=broker, queue_name=QUEUE, retry_delays=(50,))
    def broken() -> None:
        attempts.append(1)
        raise ValueError("every attempt fails")

    make_worker(broker)
    broken.send()
    keys = broker.queue_keys(QUEUE)
    wait_for(lambda: broker.client.llen(keys.dead) == 1, "the dead letter")
    assert len(attempts) == 2

    dramatiqs = [
        r for r in logs.records if r.name.startswith("dramatiq.worker") and r.levelno >= logging.INFO
    ]
    assert [(r.levelno, r.exc_info) for r in dramatiqs] == [(logging.INFO, None)] * 2, [
        r.getMessage() for r in dramatiqs
    ]
    assert all("ValueError" in r.getMessage() for r in dramatiqs)
    retries = [r for r in logs.records if r.name == "listbroker.retries"]
    assert [r.levelno for r in retries] == [logging.WARNING, logging.ERROR]
    assert retries[0].exc_info is None
    assert retries[1].exc_info is not None  # the traceback, once, with the dead letter


def test_an_actor_without_a_schedule_keeps_dramatiqs_error_line(
    broker: RedisListBroker, make_worker: WorkerFactory, logs: pytest.LogCaptureFixture
) -> None:
    @dramatiq.actor(broker=broker, queue_name=QUEUE, max_retries=0)
    def broken() -> None:
        raise ValueError("fails")

    assert "throws" not in broken.options
    make_worker(broker)
    broken.send()
    keys = broker.queue_keys(QUEUE)
    wait_for(lambda: broker.client.llen(keys.dead) == 1, "the dead letter")
    [line] = [r for r in logs.records if r.name.startswith("dramatiq.worker") and r.levelno >= logging.ERROR]
    assert line.exc_info is not None
