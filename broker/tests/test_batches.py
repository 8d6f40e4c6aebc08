"""Batches (batches.py): an actor's messages handed to one call, each keeping its own outcome.

Every test runs a real Dramatiq worker (or consumer) on the test Redis: what is proved is what
a worker does with a batched actor, message by message: acknowledged, retried on its own
schedule, dead-lettered alone with its hook, given back uncounted, refused on arrival.
"""

from __future__ import annotations

import contextvars
import threading
import time
import types
from collections import defaultdict
from typing import Any

import dramatiq
import pytest
import redis
from listbroker import (
    DEAD_LETTER_OPTION,
    DependencyUnavailable,
    DramatiqCodec,
    ExactRetries,
    ListBatchProxy,
    ListMessageProxy,
    RedisListBroker,
)
from listbroker import consumer as consumer_module
from listbroker.consumer import BATCHES_HELD, MAX_ADAPTIVE_PREFETCH, RedisListConsumer
from listbroker.deadletters import dead_letter_option
from listbroker.scripts import DELAYED_PREFIX_LEN
from support import BrokerFactory, WorkerFactory, as_bytes, bytes_list

QUEUE = "batched"
JOIN_MS = 30_000


class Calls:
    """What the batch function saw: each call's (arg, retry_count) pairs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches: list[list[tuple[int, int]]] = []

    def record(self, messages: list[ListMessageProxy]) -> None:
        with self.lock:
            self.batches.append([(m.args[0], int(m.options.get("retry_count", 0))) for m in messages])

    def attempts(self) -> dict[int, list[int]]:
        """Per arg, the retry counts of its attempts, in order."""
        seen: dict[int, list[int]] = defaultdict(list)
        with self.lock:
            for batch in self.batches:
                for arg, retry_count in batch:
                    seen[arg].append(retry_count)
        return dict(seen)


def declare(
    broker: RedisListBroker, batch_fn: Any, *, size: int = 8, **options: Any
) -> dramatiq.Actor[Any, Any]:
    def work(n: int) -> None:
        raise AssertionError("a batched actor's messages go to its batch function")

    decorate = dramatiq.actor(broker=broker, queue_name=QUEUE, batch_size=size, batch_fn=batch_fn, **options)
    actor: dramatiq.Actor[Any, Any] = decorate(work)
    return actor


def settle_all(broker: RedisListBroker, worker: dramatiq.Worker) -> None:
    broker.join(QUEUE, timeout=JOIN_MS)
    worker.join()


def test_messages_run_in_batches_and_each_is_acknowledged(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    calls = Calls()
    actor = declare(broker, calls.record, size=8)
    for n in range(40):
        actor.send(n)
    worker = make_worker(broker, threads=2)
    settle_all(broker, worker)

    assert calls.attempts() == {n: [0] for n in range(40)}  # each once, none retried
    sizes = [len(batch) for batch in calls.batches]
    assert max(sizes) <= 8
    assert max(sizes) > 1, sizes  # 40 messages waiting: handed out together
    keys = broker.queue_keys(QUEUE)
    assert redis_client.llen(keys.queue) == 0
    assert redis_client.zcard(keys.delayed) == 0
    assert redis_client.llen(keys.dead) == 0
    assert broker.pending(QUEUE) == 0  # nothing left in a processing list


class Seen(dramatiq.Middleware):
    """A plain Dramatiq middleware, knowing nothing of batches: what it is shown of each message
    (its arg and retry count, the hook, the outcome), and a context variable it sets per message."""

    current: contextvars.ContextVar[str | None] = contextvars.ContextVar("seen_current", default=None)

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: dict[tuple[int, int], list[tuple[str, str | None]]] = defaultdict(list)
        #: Messages whose after-hook saw another message's context variable.
        self.mixed: list[str] = []

    def _add(self, message: Any, hook: str, outcome: str | None = None) -> None:
        with self.lock:
            self.events[message.args[0], int(message.options.get("retry_count", 0))].append((hook, outcome))

    def before_process_message(self, broker: dramatiq.Broker, message: Any) -> None:
        self.current.set(message.message_id)
        self._add(message, "before")

    def after_process_message(
        self,
        broker: dramatiq.Broker,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        if self.current.get() != message.message_id:
            self.mixed.append(message.message_id)
        self._add(message, "after", None if exception is None else type(exception).__name__)

    def after_skip_message(self, broker: dramatiq.Broker, message: Any) -> None:
        self._add(message, "skip")


def test_a_plain_middleware_sees_each_batched_message_with_its_own_outcome(
    broker: RedisListBroker, make_worker: WorkerFactory
) -> None:
    """The broker hands a batch's messages to the middleware one by one: one before and one
    after per message, with that message's outcome (its own error, else the call's, none for
    one finished early), a skip for one refused on arrival; its hooks share a context of their
    own, which the call does not see."""
    seen = Seen()
    broker.add_middleware(seen, before=ExactRetries)
    calls = Calls()
    in_call: list[str | None] = []

    def run(messages: list[ListMessageProxy]) -> None:
        in_call.append(Seen.current.get())
        calls.record(messages)
        if all(m.options.get("retry_count") for m in messages):
            return  # the retries succeed
        for m in messages:
            if m.args[0] == 0:
                m.mark_done()
            elif m.args[0] == 1:
                m.stuff_exception(ValueError("one fails on its own"))
        raise RuntimeError("the call fails")  # 2's failure (0 was done, 1 has its own)

    actor = declare(broker, run, retry_delays=(200,))
    for n in range(3):
        actor.send(n)
    moved_back = actor.message(9)
    marked = {**moved_back.options, DEAD_LETTER_OPTION: dead_letter_option("RuntimeError: x", 4)}
    broker.enqueue(moved_back.copy(options=marked))
    worker = make_worker(broker, threads=1)
    settle_all(broker, worker)

    assert dict(seen.events) == {
        (0, 0): [("before", None), ("after", None)],
        (1, 0): [("before", None), ("after", "ValueError")],
        (1, 1): [("before", None), ("after", None)],
        (2, 0): [("before", None), ("after", "RuntimeError")],
        (2, 1): [("before", None), ("after", None)],
        (9, 0): [("before", None), ("skip", None)],
    }
    assert seen.mixed == []
    assert in_call
    assert set(in_call) == {None}
    assert calls.attempts() == {0: [0], 1: [0, 1], 2: [0, 1]}


def test_a_failure_stuffed_into_one_message_retries_that_message_alone(
    broker: RedisListBroker, make_worker: WorkerFactory
) -> None:
    calls = Calls()

    def fail_three_once(messages: list[ListMessageProxy]) -> None:
        calls.record(messages)
        for m in messages:
            if m.args[0] == 3 and not m.options.get("retry_count"):
                m.stuff_exception(RuntimeError("three fails once"))

    actor = declare(broker, fail_three_once, retry_delays=(50,))
    for n in range(10):
        actor.send(n)
    worker = make_worker(broker, threads=2)
    settle_all(broker, worker)

    attempts = calls.attempts()
    assert attempts.pop(3) == [0, 1]  # retried once, on its schedule
    assert attempts == {n: [0] for n in range(10) if n != 3}


def test_a_message_failing_every_attempt_is_dead_lettered_alone_with_its_hook(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    calls = Calls()
    hooked: list[int] = []

    def always_fail_three(messages: list[ListMessageProxy]) -> None:
        calls.record(messages)
        for m in messages:
            if m.args[0] == 3:
                m.stuff_exception(RuntimeError("three always fails"))

    def hook(message: dramatiq.Message[Any]) -> bool:
        hooked.append(message.args[0])
        return True

    actor = declare(broker, always_fail_three, retry_delays=(50, 50), on_dead_letter=hook)
    for n in range(6):
        actor.send(n)
    worker = make_worker(broker, threads=2)
    settle_all(broker, worker)

    assert calls.attempts()[3] == [0, 1, 2]
    assert hooked == [3]
    [entry] = redis_client.lrange(broker.queue_keys(QUEUE).dead, 0, -1)
    dead = DramatiqCodec().decode(as_bytes(entry))
    assert list(dead.args) == [3]
    assert "three always fails" in dead.options[DEAD_LETTER_OPTION]["error"]


def test_a_message_pushed_over_the_retry_limit_is_logged_as_such_and_dead_lettered(
    broker: RedisListBroker,
    make_worker: WorkerFactory,
    redis_client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A job pushed with a retry count past the schedule (by hand, another producer) that fails
    is dead-lettered, and its line says why: not "attempt 100 of 3"."""

    def always_fail(messages: list[ListMessageProxy]) -> None:
        for m in messages:
            m.stuff_exception(RuntimeError("fails"))

    actor = declare(broker, always_fail, retry_delays=(50, 50))
    actor.send_with_options(args=(7,), retry_count=99)
    worker = make_worker(broker, threads=1)
    with caplog.at_level("ERROR", logger="listbroker.retries"):
        settle_all(broker, worker)

    [line] = [r.getMessage() for r in caplog.records if r.name == "listbroker.retries"]
    assert "with retry count 99, over the limit of 2; dead-lettering it" in line
    assert "attempt" not in line
    [entry] = redis_client.lrange(broker.queue_keys(QUEUE).dead, 0, -1)
    assert list(DramatiqCodec().decode(as_bytes(entry)).args) == [7]


def test_a_batch_that_raises_fails_each_of_its_messages_on_its_own_schedule(
    broker: RedisListBroker, make_worker: WorkerFactory
) -> None:
    calls = Calls()

    def fail_first_attempts(messages: list[ListMessageProxy]) -> None:
        calls.record(messages)
        if any(not m.options.get("retry_count") for m in messages):
            raise RuntimeError("the whole batch failed")

    actor = declare(broker, fail_first_attempts, retry_delays=(50,))
    for n in range(5):
        actor.send(n)
    worker = make_worker(broker, threads=1)
    settle_all(broker, worker)

    # Each message's first attempt failed; its retry (count 1) ran in a batch of retries only.
    assert {n: counts[0] for n, counts in calls.attempts().items()} == {n: 0 for n in range(5)}
    assert {n: counts[-1] for n, counts in calls.attempts().items()} == {n: 1 for n in range(5)}


def test_a_message_marked_done_is_acknowledged_while_its_batch_still_runs(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    """`mark_done` acknowledges at once: a batch whose last message waits long (on a lock) does
    not keep the others in the processing list, where a crash would hand them out again."""
    release = threading.Event()
    done: list[int] = []

    def the_last_waits(messages: list[ListMessageProxy]) -> None:
        if len(messages) > 1 and not release.is_set():
            for m in messages[:-1]:
                m.mark_done()
            done.extend(m.args[0] for m in messages[:-1])
            release.wait(30)

    actor = declare(broker, the_last_waits, size=8)
    for n in range(4):
        actor.send(n)  # queued before the worker starts: its first fetch takes its prefetch (2)
    worker = make_worker(broker, threads=1)
    processing = broker.queue_keys(QUEUE).processing_prefix + "*"

    def in_flight() -> set[int]:
        return {
            DramatiqCodec().decode(as_bytes(raw)).args[0]
            for key in redis_client.scan_iter(match=processing)
            for raw in redis_client.lrange(key, 0, -1)
        }

    deadline = time.monotonic() + 30
    while not (done and not in_flight() & set(done)) and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert done, "no batch of more than one"
        assert not in_flight() & set(done), (in_flight(), done)
    finally:
        release.set()
    settle_all(broker, worker)
    assert redis_client.llen(broker.queue_keys(QUEUE).queue) == 0


def test_a_batch_failing_after_some_messages_are_done_fails_only_the_others(
    broker: RedisListBroker, make_worker: WorkerFactory
) -> None:
    calls = Calls()
    struck = threading.Event()

    def interrupted_once_after_the_first(messages: list[ListMessageProxy]) -> None:
        calls.record(messages)
        if not struck.is_set():
            struck.set()
            messages[0].mark_done()
            raise RuntimeError("a time limit struck the batch")

    actor = declare(broker, interrupted_once_after_the_first, size=8, retry_delays=(50,))
    for n in range(4):
        actor.send(n)  # queued before the worker starts: its first fetch takes its prefetch (2)
    worker = make_worker(broker, threads=1)
    settle_all(broker, worker)

    (done, *interrupted) = [n for n, _ in calls.batches[0]]
    assert interrupted, calls.batches  # the first call held more than the one it finished
    attempts = calls.attempts()
    assert attempts.pop(done) == [0]  # finished before the failure: acknowledged, not retried
    for n in interrupted:
        assert attempts.pop(n) == [0, 1]  # the failure was theirs: retried on their schedule
    assert all(counts == [0] for counts in attempts.values()), attempts


def test_dependency_unavailable_gives_the_batch_back_uncounted(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    calls = Calls()
    down = threading.Event()
    down.set()

    def database_down_once(messages: list[ListMessageProxy]) -> None:
        calls.record(messages)
        if down.is_set():
            down.clear()
            raise DependencyUnavailable("the database refused the connection")

    actor = declare(broker, database_down_once, retry_delays=(60_000,))
    for n in range(5):
        actor.send(n)
    worker = make_worker(broker, threads=1)
    settle_all(broker, worker)

    attempts = calls.attempts()
    assert set(attempts) == set(range(5))
    # The ones given back came back with their count untouched: no attempt was spent.
    assert all(set(counts) == {0} for counts in attempts.values()), attempts
    assert redis_client.zcard(broker.queue_keys(QUEUE).delayed) == 0


def test_a_dead_letter_moved_back_by_hand_is_left_out_of_the_call(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    calls = Calls()
    actor = declare(broker, calls.record, retry_delays=(50,))
    actor.send(1)
    moved_back = actor.message(2)
    # The option the broker writes on a dead letter (deadletters.py), as an LMOVE back keeps it.
    marked = {**moved_back.options, DEAD_LETTER_OPTION: dead_letter_option("RuntimeError: x", 4)}
    broker.enqueue(moved_back.copy(options=marked))
    actor.send(3)
    worker = make_worker(broker, threads=1)
    settle_all(broker, worker)

    assert calls.attempts() == {1: [0], 3: [0]}
    [entry] = redis_client.lrange(broker.queue_keys(QUEUE).dead, 0, -1)
    assert DramatiqCodec().decode(as_bytes(entry)).message_id == moved_back.message_id


def test_an_unstarted_batch_goes_back_to_the_queue_message_by_message(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    actor = declare(broker, Calls().record, size=3)
    for n in range(5):
        actor.send(n)
    consumer = broker.consume(QUEUE, prefetch=10, timeout=1_000)
    first = next(consumer)
    assert isinstance(first, ListBatchProxy)
    assert [m.args[0] for m in first.items] == [0, 1, 2]
    second = next(consumer)
    assert isinstance(second, ListBatchProxy)
    assert [m.args[0] for m in second.items] == [3, 4]

    consumer.requeue([first, second])  # what RequeueOnShutdown does with unstarted work
    keys = broker.queue_keys(QUEUE)
    assert redis_client.llen(keys.queue) == 5
    assert redis_client.llen(consumer.processing_key) == 0
    consumer.close()


def test_a_retry_recorded_late_is_recorded_by_the_batch_acknowledgement(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    """When Redis fails to record an item's retry, the batch's ack records it (Dramatiq
    repeats the ack until Redis answers): the item is never acknowledged in its place."""
    actor = declare(broker, Calls().record, retry_delays=(60_000,))
    actor.send(1)
    actor.send(2)
    consumer = broker.consume(QUEUE, prefetch=10, timeout=1_000)
    batch = next(consumer)
    assert isinstance(batch, ListBatchProxy)
    one, two = batch.items
    one.stuff_exception(RuntimeError("generation failed"))
    settle = consumer.settle
    failures = iter([True])

    def settle_failing_once(*args: Any, **kwargs: Any) -> bool:
        if next(failures, False):
            raise dramatiq.errors.ConnectionClosed(redis.ConnectionError("Redis went away"))
        return settle(*args, **kwargs)

    consumer.settle = settle_failing_once  # type: ignore[method-assign]
    broker.emit_after("process_message", batch)  # what the worker does once the call returned
    assert redis_client.zcard(broker.queue_keys(QUEUE).delayed) == 0  # not recorded yet

    consumer.ack(batch)
    keys = broker.queue_keys(QUEUE)
    [member] = bytes_list(redis_client.zrange(keys.delayed, 0, -1))
    retried = DramatiqCodec().decode(member[DELAYED_PREFIX_LEN:])
    assert (retried.message_id, retried.options["retry_count"]) == (one.message_id, 1)
    consumer.close()
    assert two.settled
    assert redis_client.llen(keys.queue) == 0  # `two` acknowledged, not returned at the release


def test_the_options_are_refused_without_the_batches_middleware(redis_client: redis.Redis) -> None:
    broker = RedisListBroker(client=redis_client, middleware=[ExactRetries()])
    with pytest.raises(ValueError, match="batch_"):
        dramatiq.actor(broker=broker, queue_name=QUEUE, batch_size=4, batch_fn=print)(lambda n: None)
    broker.close()


def test_without_a_batch_function_messages_go_one_by_one(
    make_broker: BrokerFactory, redis_client: redis.Redis
) -> None:
    broker = make_broker()
    single = dramatiq.actor(broker=broker, actor_name="single", queue_name=QUEUE)(lambda n: None)
    single.send(1)
    single.send(2)
    consumer = broker.consume(QUEUE, prefetch=10, timeout=1_000)
    assert isinstance(next(consumer), ListMessageProxy)
    consumer.close()


def test_a_consumer_of_a_batched_actor_holds_two_hold_times_of_messages(
    broker: RedisListBroker, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At a fast pace a consumer holds MAX_ADAPTIVE_PREFETCH messages of a one-by-one actor, and
    BATCHES_HELD times as many of a batched one: the next batch in hand while one runs."""
    actor = declare(broker, Calls().record, size=3)
    total = MAX_ADAPTIVE_PREFETCH * BATCHES_HELD + 50
    for n in range(total):
        actor.send(n)
    consumer = broker.consume(QUEUE, prefetch=1, timeout=200)
    # Two finished at one reading of the consumer's clock: the fastest pace (the prefetch is 1
    # until then). On the real clock the fetch and acknowledgement between them took over the
    # 1.5 ms that this pace allows on a loaded machine, and the consumer rightly held fewer.
    with monkeypatch.context() as frozen:
        frozen.setattr(consumer_module, "time", _time_reading([1000.0]))
        for _ in range(2):
            first = next(consumer)
            assert isinstance(first, ListBatchProxy)
            consumer.ack(first)
    held = 0
    while (batch := next(consumer)) is not None:
        assert isinstance(batch, ListBatchProxy)
        held += len(batch.items)
    assert held == MAX_ADAPTIVE_PREFETCH * BATCHES_HELD
    keys = broker.queue_keys(QUEUE)
    assert redis_client.llen(consumer.processing_key) == held
    assert redis_client.llen(keys.queue) == total - 2 - held
    consumer.close()


def _time_reading(clock: list[float]) -> types.SimpleNamespace:
    """The `time` module, but for `monotonic`, which reads `clock`'s one value."""
    fake_time = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")})
    fake_time.monotonic = lambda: clock[0]
    return fake_time


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The consumer module's `time.monotonic` reads the returned list's one value (the rest of
    `time` as it is), so a test moves the pace's clock itself."""
    clock = [1000.0]
    monkeypatch.setattr(consumer_module, "time", _time_reading(clock))
    return clock


def _batches_of_three(broker: RedisListBroker, sends: int) -> tuple[RedisListConsumer, list[ListBatchProxy]]:
    """`sends` messages to a batched actor (batches of 3), consumed: the consumer and its batches."""
    actor = declare(broker, Calls().record, size=3)
    for n in range(sends):
        actor.send(n)
    consumer = broker.consume(QUEUE, prefetch=sends, timeout=1_000)
    batches = []
    for _ in range(sends // 3):
        batch = next(consumer)
        assert isinstance(batch, ListBatchProxy)
        assert len(batch.items) == 3
        batches.append(batch)
    return consumer, batches


def test_a_batch_acknowledged_together_shares_its_interval_in_the_pace(
    broker: RedisListBroker, fake_clock: list[float]
) -> None:
    """The messages of a batch finish at one moment: each counts its share of the interval since
    the last finish, so the pace is theirs (30 ms for 3: 10 ms each), not one slow interval and
    two instant ones (which made the pace swing at every batch's end)."""
    consumer, (first, second) = _batches_of_three(broker, 6)
    consumer.ack(first)  # the first finish: no interval yet
    fake_clock[0] += 0.030
    consumer.ack(second)
    assert consumer._pace == pytest.approx(0.010)
    consumer.close()


def test_a_batch_moves_the_pace_as_its_messages_one_by_one_would(
    broker: RedisListBroker, fake_clock: list[float]
) -> None:
    """With a pace already known, a batch of 3 finishing 60 ms after the last finish moves the
    moving average as three intervals of 20 ms each would, one after the other."""
    consumer, (first, second, third) = _batches_of_three(broker, 9)
    consumer.ack(first)
    fake_clock[0] += 0.030
    consumer.ack(second)  # the pace: 10 ms
    fake_clock[0] += 0.060
    consumer.ack(third)
    expected = 0.010
    for _ in range(3):
        expected += consumer_module.PACE_WEIGHT * (0.020 - expected)
    assert consumer._pace == pytest.approx(expected)
    consumer.close()


def test_an_item_tells_its_own_failure(broker: RedisListBroker) -> None:
    """`failure` is what `stuff_exception` recorded for that message alone, cleared with it."""
    actor = declare(broker, Calls().record, retry_delays=(60_000,))
    actor.send(1)
    actor.send(2)
    consumer = broker.consume(QUEUE, prefetch=10, timeout=1_000)
    batch = next(consumer)
    assert isinstance(batch, ListBatchProxy)
    one, two = batch.items
    error = RuntimeError("generation failed")
    one.stuff_exception(error)
    assert (one.failure, two.failure) == (error, None)
    one.clear_exception()
    assert one.failure is None
    consumer.requeue(batch.items)
    consumer.close()
