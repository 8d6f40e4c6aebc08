"""RedisListBroker on a real Redis: reliable fetch, acks, reaper, delays, hooks (seed property 2)."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import UTC, datetime
from typing import Any, cast

import dramatiq
import pytest
import redis
from dramatiq.errors import ConnectionClosed, QueueJoinTimeout
from dramatiq.middleware import Middleware
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from listbroker import DEAD_LETTER_OPTION, DeadLetters, InvalidMessage, ListMessageProxy, RedisListBroker
from listbroker.consumer import (
    MAX_ADAPTIVE_PREFETCH,
    MAX_BLOCK_SECONDS,
    PREFETCH_HOLD_SECONDS,
    RedisListConsumer,
)
from listbroker.deadletters import invalid_meta_field
from listbroker.keys import HEARTBEATS_KEY
from support import CLOSED_REDIS_URL, BrokerFactory, WorkerFactory, as_bytes

RAW_QUEUE = "raw"


class RawCodec:
    """Any bytes are a message: lets the tests push arbitrary strings like any producer."""

    def encode(self, message: dramatiq.Message[Any]) -> str:
        return str(message.args[0])

    def decode(self, payload: bytes) -> dramatiq.Message[Any]:
        if payload == b"\x00poison":
            raise InvalidMessage("poison")
        return dramatiq.Message(
            queue_name=RAW_QUEUE, actor_name="take", args=(payload.decode(),), kwargs={}, options={}
        )


@pytest.fixture
def raw_broker(broker: RedisListBroker) -> RedisListBroker:
    broker.codecs[RAW_QUEUE] = RawCodec()
    broker.declare_queue(RAW_QUEUE)
    return broker


def take(consumer: RedisListConsumer, n: int, timeout: float = 5.0) -> list[ListMessageProxy]:
    got: list[ListMessageProxy] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        message = next(consumer)
        if message is not None:
            assert isinstance(message, ListMessageProxy)
            got.append(message)
    return got


def processing_len(client: redis.Redis, consumer: RedisListConsumer) -> int:
    return int(client.llen(consumer.processing_key))


values = st.lists(
    st.text(min_size=1, max_size=40).filter(lambda s: s != "\x00poison"), min_size=1, max_size=30
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values)
def test_property_2_redis_list_lpush_take_round_trip(
    raw_broker: RedisListBroker, redis_client: redis.Redis, values: list[str]
) -> None:
    """Feature: redis-report-queue, Property 2: Redis List LPUSH/BRPOP round trip.

    N LPUSHes give LLEN N; taking N messages returns every value in FIFO order; acked,
    nothing is left behind.
    """
    key = raw_broker.queue_keys(RAW_QUEUE).queue
    redis_client.delete(key)
    for value in values:
        redis_client.lpush(key, value)
    assert redis_client.llen(key) == len(values)

    consumer = raw_broker.consume(RAW_QUEUE, prefetch=len(values), timeout=1000)
    got = take(consumer, len(values))
    assert [m.args[0] for m in got] == values
    assert redis_client.llen(key) == 0
    assert processing_len(redis_client, consumer) == len(values)  # held until their outcome is known
    for message in got:
        consumer.ack(message)
    consumer.close()
    assert processing_len(redis_client, consumer) == 0
    assert redis_client.zscore(HEARTBEATS_KEY, consumer.processing_key) is None


def test_blocked_consumer_wakes_up_for_a_new_message(
    raw_broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    # One `next` blocks once, at most MAX_BLOCK_SECONDS (a longer timeout is waited in such
    # blocks): the message pushed meanwhile is what it returns, not None after the block.
    consumer = raw_broker.consume(RAW_QUEUE, prefetch=1, timeout=int(MAX_BLOCK_SECONDS * 1000))
    threading.Timer(0.3, lambda: redis_client.lpush("raw:queue", "late")).start()
    message = next(consumer)
    assert message is not None
    assert message.args == ("late",)
    consumer.ack(message)
    consumer.close()


def test_empty_queue_returns_none_after_the_timeout(raw_broker: RedisListBroker) -> None:
    consumer = raw_broker.consume(RAW_QUEUE, prefetch=1, timeout=200)
    started = time.monotonic()
    assert next(consumer) is None
    # At least its timeout; far less than a whole block (what it would wait if it ignored it):
    # a bound no loaded machine comes near.
    assert 0.15 < time.monotonic() - started < MAX_BLOCK_SECONDS
    consumer.close()


def test_prefetch_limits_messages_held(raw_broker: RedisListBroker, redis_client: redis.Redis) -> None:
    redis_client.lpush("raw:queue", *[str(i) for i in range(10)])
    consumer = raw_broker.consume(RAW_QUEUE, prefetch=3, timeout=100)
    got = take(consumer, 3)
    assert next(consumer) is None  # no capacity until something is acked
    assert processing_len(redis_client, consumer) == 3
    consumer.ack(got[0])
    assert take(consumer, 1)[0].args == ("3",)
    assert redis_client.llen("raw:queue") == 6


def test_prefetch_rises_for_a_fast_actor_within_the_cap(
    raw_broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    redis_client.lpush("raw:queue", *[str(i) for i in range(400)])
    consumer = raw_broker.consume(RAW_QUEUE, prefetch=2, timeout=100)
    for message in take(consumer, 150):
        consumer.ack(message)  # finished at once: a fast actor
    assert consumer.limit > 2
    take(consumer, consumer.limit)
    held = processing_len(redis_client, consumer)
    assert 2 < held <= MAX_ADAPTIVE_PREFETCH
    assert next(consumer) is None  # the raised limit holds: nothing more until an ack


def test_prefetch_stays_for_a_slow_actor(raw_broker: RedisListBroker, redis_client: redis.Redis) -> None:
    redis_client.lpush("raw:queue", *[str(i) for i in range(10)])
    consumer = raw_broker.consume(RAW_QUEUE, prefetch=2, timeout=100)
    for message in take(consumer, 5):
        time.sleep(PREFETCH_HOLD_SECONDS + 0.01)  # each message takes longer than the hold time
        consumer.ack(message)
    assert consumer.limit == 2
    take(consumer, 2)
    assert next(consumer) is None
    assert processing_len(redis_client, consumer) == 2


def test_undecodable_message_is_quarantined_verbatim(
    raw_broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    redis_client.lpush("raw:queue", "first", b"\x00poison", "after")
    consumer = raw_broker.consume(RAW_QUEUE, prefetch=5, timeout=500)
    got = take(consumer, 2)
    assert [m.args[0] for m in got] == ["first", "after"]
    assert redis_client.lrange("raw:queue:invalid", 0, -1) == [b"\x00poison"]
    assert processing_len(redis_client, consumer) == 2


def test_a_quarantined_payload_keeps_why_and_when_until_it_is_deleted(
    raw_broker: RedisListBroker, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Why and when beside the quarantine, written in the step that quarantines (the server's
    clock); the log shows the payload as text; deleting its last copy, or purging, drops them."""
    keys = raw_broker.queue_keys(RAW_QUEUE)
    store = DeadLetters(redis_client, keys, job_key_field="")
    before = redis_time(redis_client)
    redis_client.lpush("raw:queue", b"\x00poison", b"\x00poison", "fine")
    consumer = raw_broker.consume(RAW_QUEUE, prefetch=5, timeout=500)
    assert [m.args[0] for m in take(consumer, 1)] == ["fine"]
    after = redis_time(redis_client)
    assert redis_client.lrange(keys.invalid, 0, -1) == [b"\x00poison", b"\x00poison"]
    [first, second] = store.quarantines(store.all_invalid())
    assert first == second
    assert first is not None
    assert first.reason == "poison"
    assert before <= first.at <= after
    assert "payload \\x00poison" in caplog.text  # as text, not Python's b'\\x00poison'
    assert redis_client.hkeys(keys.invalid_meta) == [invalid_meta_field(b"\x00poison").encode()]

    assert store.delete_invalid([b"\x00poison"]) == [True]
    assert store.quarantines([b"\x00poison"]) == [first]  # a copy is left: so are why and when
    assert store.delete_invalid([b"\x00poison", b"\x00poison"]) == [True, False]
    assert not redis_client.exists(keys.invalid, keys.invalid_meta)

    redis_client.lpush("raw:queue", b"\x00poison")
    assert take(consumer, 1, timeout=1.0) == []
    assert redis_client.exists(keys.invalid_meta)
    assert store.purge_invalid() == 1
    assert not redis_client.exists(keys.invalid, keys.invalid_meta)


def redis_time(client: redis.Redis) -> datetime:
    seconds, micros = client.time()
    return datetime.fromtimestamp(seconds + micros // 1000 / 1000, UTC)


def test_reaper_returns_messages_of_a_dead_consumer(
    make_broker: BrokerFactory, redis_client: redis.Redis
) -> None:
    dying = make_broker()
    dying.codecs[RAW_QUEUE] = RawCodec()
    dying.declare_queue(RAW_QUEUE)
    redis_client.lpush("raw:queue", "a", "b", "c", "d")
    consumer = dying.consume(RAW_QUEUE, prefetch=3, timeout=100)
    taken = take(consumer, 3)
    assert [m.args[0] for m in taken] == ["a", "b", "c"]
    for running in taken[:2]:
        running.start()  # a and b run, c is only held
    # The process "dies": its heartbeats stop, nothing is acked or closed.
    dying.maintenance().stop()

    survivor = make_broker()
    survivor.codecs[RAW_QUEUE] = RawCodec()
    survivor.declare_queue(RAW_QUEUE)
    died_at = time.monotonic()
    survivor.maintenance()
    timeout_s = survivor.heartbeat_timeout_ms / 1000
    while processing_len(redis_client, consumer) and time.monotonic() - died_at < timeout_s + 10:
        time.sleep(0.05)
    # Returned within timeout + 10 s (the reaper's promise): the loop above waits no longer.
    assert processing_len(redis_client, consumer) == 0
    # Back at the head of the queue in their original order, each that had started with
    # one lost delivery; the one only held goes back uncounted, as at a graceful shutdown.
    taker = survivor.consume(RAW_QUEUE, prefetch=4, timeout=500)
    again = take(taker, 4)
    assert [m.args[0] for m in again] == ["a", "b", "c", "d"]
    assert [m.redeliveries for m in again] == [1, 1, 0, 0]
    assert not redis_client.exists(consumer.started_key)
    assert redis_client.zscore(HEARTBEATS_KEY, consumer.processing_key) is None


def test_requeue_puts_unstarted_messages_back_without_counting_an_attempt(
    raw_broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    redis_client.lpush("raw:queue", "a", "b", "c")
    consumer = raw_broker.consume(RAW_QUEUE, prefetch=3, timeout=100)
    got = take(consumer, 3)
    consumer.ack(got[0])
    consumer.requeue(got[1:])
    assert redis_client.lrange("raw:queue", 0, -1) == [b"c", b"b"]  # "b" is next (right end)
    assert not redis_client.exists("raw:queue:crashed")
    consumer.close()
    assert processing_len(redis_client, consumer) == 0


def test_close_returns_prefetched_messages_and_waits_for_in_flight_ones(
    raw_broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    redis_client.lpush("raw:queue", *"abcde")
    consumer = raw_broker.consume(RAW_QUEUE, prefetch=5, timeout=100)
    in_flight = next(consumer)  # fetches five, hands out one
    assert in_flight is not None
    assert in_flight.args == ("a",)
    consumer.close()
    assert redis_client.lrange("raw:queue", 0, -1) == [b"e", b"d", b"c", b"b"]
    assert processing_len(redis_client, consumer) == 1
    assert redis_client.zscore(HEARTBEATS_KEY, consumer.processing_key) is not None  # still beating
    consumer.ack(in_flight)
    assert processing_len(redis_client, consumer) == 0
    assert redis_client.zscore(HEARTBEATS_KEY, consumer.processing_key) is None


def redis_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_delayed_message_waits_in_redis_and_is_released_on_time(
    raw_broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    raw_broker.maintenance()
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name=RAW_QUEUE, actor_name="take", args=("later",), kwargs={}, options={}
    )
    before_ms = redis_ms(redis_client)
    raw_broker.enqueue(message, delay=400)
    after_ms = redis_ms(redis_client)
    assert redis_client.llen("raw:queue") == 0
    [(_, due_ms)] = cast(
        list[tuple[bytes, float]], redis_client.zrange("raw:queue:delayed", 0, -1, withscores=True)
    )
    # The due time the broker recorded is 400 ms after the enqueue, by Redis's clock.
    assert before_ms + 400 <= due_ms <= after_ms + 400
    # Released, never before it is due: each look reads the queue and Redis's clock at once,
    # so a look that comes late (a loaded machine) can miss an early release, never invent one.
    deadline = time.monotonic() + 30
    while True:
        pipe = redis_client.pipeline(transaction=True)
        pipe.llen("raw:queue")
        pipe.time()
        queued, (seconds, micros) = pipe.execute()
        if queued:
            break
        assert time.monotonic() < deadline, "the delayed message was never released"
        time.sleep(0.005)
    assert seconds * 1000 + micros // 1000 >= due_ms
    assert redis_client.lrange("raw:queue", 0, -1) == [b"later"]
    assert redis_client.zcard("raw:queue:delayed") == 0


def test_equal_delayed_payloads_are_kept_apart(
    raw_broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name=RAW_QUEUE, actor_name="take", args=("same",), kwargs={}, options={}
    )
    raw_broker.enqueue(message, delay=60_000)
    raw_broker.enqueue(message, delay=60_000)
    assert redis_client.zcard("raw:queue:delayed") == 2


class Recorder(Middleware):
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def before_declare_queue(self, broker: Any, queue_name: str) -> None:
        self.calls.append(("before_declare_queue", queue_name))

    def after_declare_queue(self, broker: Any, queue_name: str) -> None:
        self.calls.append(("after_declare_queue", queue_name))

    def before_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        self.calls.append(("before_enqueue", delay))

    def after_enqueue(self, broker: Any, message: Any, delay: Any) -> None:
        self.calls.append(("after_enqueue", delay))


def test_declare_and_enqueue_emit_dramatiq_hooks(broker: RedisListBroker) -> None:
    recorder = Recorder()
    broker.add_middleware(recorder)
    broker.declare_queue("hooked")
    broker.declare_queue("hooked")  # idempotent
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="hooked", actor_name="x", args=(), kwargs={}, options={}
    )
    broker.enqueue(message)
    broker.enqueue(message, delay=10_000)
    assert recorder.calls == [
        ("before_declare_queue", "hooked"),
        ("after_declare_queue", "hooked"),
        ("before_enqueue", None),
        ("after_enqueue", None),
        ("before_enqueue", 10_000),
        ("after_enqueue", 10_000),
    ]
    assert "hooked" in broker.get_declared_queues()
    assert broker.get_declared_delay_queues() == set()


def test_worker_runs_every_message_once_with_concurrent_acks(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    @dramatiq.actor(queue_name="many", max_retries=0)
    def record(i: int) -> None:
        with lock:
            seen.append(i)

    broker.enqueue_many(record.message(i) for i in range(2000))
    worker = make_worker(broker, threads=8)
    broker.join("many", timeout=60_000)
    worker.stop()
    assert sorted(seen) == list(range(2000))
    assert redis_client.zcard(HEARTBEATS_KEY) == 0
    assert not redis_client.keys("many:queue:processing:*")


def test_generic_actor_keeps_dramatiq_retries_and_dead_letters(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    attempts: list[float] = []

    @dramatiq.actor(queue_name="flaky", max_retries=2, min_backoff=50, max_backoff=200)
    def flaky() -> None:
        attempts.append(time.monotonic())
        raise ValueError("always")

    flaky.send()
    make_worker(broker, threads=1)
    broker.join("flaky", timeout=20_000)
    assert len(attempts) == 3
    dead = redis_client.lrange("flaky:queue:dead", 0, -1)
    assert len(dead) == 1
    # Dead-lettered as Dramatiq's own brokers do: the message with its final options (three
    # failures and the traceback), plus why and when it died (`dead_letter`).
    options = dramatiq.Message[Any].decode(as_bytes(dead[0])).options
    assert options["retries"] == 3
    assert "ValueError: always" in options["traceback"]
    assert options[DEAD_LETTER_OPTION]["error"] == "ValueError: always"
    assert options[DEAD_LETTER_OPTION]["dead_at"]


def test_join_times_out_while_messages_wait(raw_broker: RedisListBroker, redis_client: redis.Redis) -> None:
    redis_client.lpush("raw:queue", "x")
    with pytest.raises(QueueJoinTimeout):
        raw_broker.join(RAW_QUEUE, timeout=200)
    raw_broker.flush(RAW_QUEUE)
    raw_broker.join(RAW_QUEUE, timeout=200)


def test_redis_errors_surface_as_connection_closed_to_a_producer_and_a_consumer_waits_them_out() -> None:
    """A producer gets Dramatiq's ConnectionClosed; a consumer never raises one (Dramatiq would
    restart it, logging two lines each time): it says "no message now", one worker timeout
    at a time, and a stop ends its wait at once."""
    from support import FAST_BROKER

    dead = RedisListBroker(url=CLOSED_REDIS_URL, **FAST_BROKER)
    dead.declare_queue("q")
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name="q", actor_name="x", args=(), kwargs={}, options={}
    )
    with pytest.raises(ConnectionClosed):
        dead.enqueue(message)
    consumer = dead.consume("q", timeout=100)
    for _ in range(3):
        started = time.monotonic()
        assert next(consumer) is None
        assert time.monotonic() - started < 2  # a bound: one worker timeout, or one attempt
    consumer.stop_fetching()
    started = time.monotonic()
    assert next(consumer) is None
    assert time.monotonic() - started < 2
    consumer.close()
    dead.close()


def test_a_beat_under_way_never_lists_a_released_consumer_again(
    raw_broker: RedisListBroker, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A beat that listed a consumer before it gave its processing list up must not write its
    heartbeat after the release (seen under load: the closed consumer's entry came back, to be
    reaped later as a dead consumer). The release waits for the beat under way."""
    consumer = raw_broker.consume(RAW_QUEUE, prefetch=1, timeout=100)
    real = raw_broker.scripts.heartbeat
    in_beat, go_on = threading.Event(), threading.Event()

    def held_heartbeat(**kwargs: Any) -> Any:
        if threading.current_thread() is beat:
            in_beat.set()
            go_on.wait(10)
        return real(**kwargs)

    held = dataclasses.replace(raw_broker.scripts, heartbeat=cast("Any", held_heartbeat))
    monkeypatch.setattr(raw_broker, "scripts", held)
    beat = threading.Thread(target=raw_broker.maintenance().beat)
    beat.start()
    assert in_beat.wait(10)
    closer = threading.Thread(target=consumer.close)
    closer.start()
    closer.join(0.5)  # without the lock, the release is done by now (a bound, not an assertion)
    go_on.set()
    beat.join(10)
    closer.join(10)
    assert consumer.released
    assert redis_client.zscore(HEARTBEATS_KEY, consumer.processing_key) is None
