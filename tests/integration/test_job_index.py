"""`report:queue:jobs` (RecordId -> jobs alive) stays exact through every step that moves a job.

The reconciler trusts it to answer "does this record have a job?" in O(1): for any
interleaving of enqueues and outcomes, each entry must equal the number of jobs of
that record found in the queue, the processing lists and the delayed set.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from listbroker import ListMessageProxy, RedisListBroker
from listbroker.consumer import RedisListConsumer
from listbroker.keys import HEARTBEATS_KEY, PROCESSING_INFIX
from listbroker.scripts import DEAD_MARK, DELAYED_PREFIX_LEN

from redis_adapters.queue_ops import RedisQueueOperations
from redis_adapters.queues import (
    DEAD_LETTER_QUEUE_KEY,
    REPORT_DELAYED_KEY,
    REPORT_JOBS_KEY,
    REPORT_QUEUE_KEY,
    REPORT_QUEUE_NAME,
)
from redis_adapters.report_message import MAX_RECORD_ID, InvalidReportMessage, ReportQueueMessage
from redis_adapters.report_queue import RedisReportQueue
from services.domain.limits import is_strict_int
from tests.support.broker_fixtures import BrokerFactory
from tests.support.redis_keys import bytes_list, bytes_map

OUTCOMES = ("ack", "retry", "dead", "dead_unconfirmed", "give_back", "hold")


def jobs_alive(client: redis.Redis) -> Counter[int]:
    """Count the jobs per RecordId by reading every list and set that holds live jobs."""
    payloads = bytes_list(client.lrange(REPORT_QUEUE_KEY, 0, -1))
    for key in bytes_list(client.zrange(HEARTBEATS_KEY, 0, -1)):
        if key.decode().startswith(REPORT_QUEUE_KEY + PROCESSING_INFIX):
            payloads += bytes_list(client.lrange(key, 0, -1))
    payloads += [m[DELAYED_PREFIX_LEN:] for m in bytes_list(client.zrange(REPORT_DELAYED_KEY, 0, -1))]
    return Counter(ReportQueueMessage.decode(p).record_id for p in payloads)


def index(client: redis.Redis) -> dict[int, str]:
    return {int(k): v.decode() for k, v in bytes_map(client.hgetall(REPORT_JOBS_KEY)).items()}


def report_consumer(broker: RedisListBroker) -> RedisListConsumer:
    broker.declare_queue(REPORT_QUEUE_NAME)
    return broker.consume(REPORT_QUEUE_NAME, prefetch=64, timeout=200)


def take(consumer: RedisListConsumer) -> ListMessageProxy:
    message = next(consumer)
    assert isinstance(message, ListMessageProxy)
    return message


def test_enqueue_ack_and_retry_keep_the_count(broker: RedisListBroker, redis_client: redis.Redis) -> None:
    queue = RedisReportQueue(redis_client)
    queue.enqueue_many([7, 7, 8])
    assert index(redis_client) == {7: "2", 8: "1"}
    consumer = report_consumer(broker)
    first = take(consumer)
    first.retry_later(first._message, 60_000)  # a retry is still a job alive
    second, third = take(consumer), take(consumer)
    assert index(redis_client) == {7: "2", 8: "1"}
    consumer.ack(second)
    consumer.ack(third)
    consumer.close()
    assert index(redis_client) == {7: "1"}
    assert jobs_alive(redis_client) == Counter({7: 1})


def test_a_dead_letter_leaves_a_mark_only_when_its_follow_up_failed(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    RedisReportQueue(redis_client).enqueue_many([1, 2])
    consumer = report_consumer(broker)
    take(consumer).dead_letter()
    take(consumer).dead_letter(unconfirmed=True)
    assert index(redis_client) == {2: DEAD_MARK}
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 2
    # A new job for the record supersedes the mark.
    RedisReportQueue(redis_client).enqueue(2)
    assert index(redis_client) == {2: "1"}


def test_enqueue_missing_skips_records_with_a_job_and_reports_dead_marks(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    queue = RedisReportQueue(redis_client)
    queue.enqueue(1)
    RedisReportQueue(redis_client).enqueue(3)
    consumer = report_consumer(broker)
    take(consumer).dead_letter(unconfirmed=True)  # record 1: dead mark
    enqueued, dead = queue.enqueue_missing([1, 2, 3])
    assert (enqueued, dead) == ([2], [1])
    assert queue.enqueue_missing([2, 3]) == ([], [])  # atomic check: never twice
    assert index(redis_client) == {1: DEAD_MARK, 2: "1", 3: "1"}


def test_payloads_of_other_producers_never_drive_the_count_negative(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    redis_client.lpush(REPORT_QUEUE_KEY, ReportQueueMessage.new(5).encode())  # the .NET producer: not counted
    RedisReportQueue(redis_client).enqueue(6)
    consumer = report_consumer(broker)
    for _ in range(2):
        consumer.ack(take(consumer))
    consumer.close()
    assert index(redis_client) == {}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=4), min_size=1, max_size=4),
    outcomes=st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=16),
)
def test_index_equals_the_jobs_alive_after_any_interleaving(
    make_broker: BrokerFactory, redis_client: redis.Redis, batches: list[list[int]], outcomes: list[str]
) -> None:
    redis_client.delete(REPORT_QUEUE_KEY, REPORT_DELAYED_KEY, REPORT_JOBS_KEY, DEAD_LETTER_QUEUE_KEY)
    broker = make_broker()
    queue = RedisReportQueue(redis_client)
    consumer = report_consumer(broker)
    held: list[ListMessageProxy] = []
    unconfirmed: set[int] = set()
    try:
        for batch, outcome in zip(batches * 4, outcomes, strict=False):
            queue.enqueue_many(batch)
            unconfirmed -= set(batch)  # a new job supersedes a dead mark
            message = take(consumer)
            record_id = int(message.args[0])
            if outcome == "ack":
                consumer.ack(message)
            elif outcome == "retry":
                message.retry_later(message._message, 3_600_000)
            elif outcome in ("dead", "dead_unconfirmed"):
                message.dead_letter(unconfirmed=outcome == "dead_unconfirmed")
                if outcome == "dead_unconfirmed":
                    unconfirmed.add(record_id)
            elif outcome == "give_back":
                message.give_back()
            else:
                held.append(message)
            alive = jobs_alive(redis_client)
            expected = {rid: str(n) for rid, n in alive.items()}
            # A record whose last job died unconfirmed, with none alive, carries the mark.
            for rid in unconfirmed:
                if rid not in alive:
                    expected[rid] = DEAD_MARK
            unconfirmed = {rid for rid in unconfirmed if rid not in alive}
            assert index(redis_client) == expected
    finally:
        for message in held:
            consumer.ack(message)
        consumer.close()
        broker.close()


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_a_deeply_nested_payload_is_quarantined_not_fatal(
    broker: RedisListBroker, redis_client: redis.Redis, depth: int
) -> None:
    """1,000 levels of brackets made json.loads raise RecursionError, which stopped the consumer."""
    poison = "[" * depth + "]" * depth
    redis_client.lpush(REPORT_QUEUE_KEY, poison, ReportQueueMessage.new(9).encode())
    consumer = report_consumer(broker)
    message = take(consumer)
    assert message.args == (9,)
    consumer.ack(message)
    consumer.close()
    assert redis_client.lrange(REPORT_QUEUE_KEY + ":invalid", 0, -1) == [poison.encode()]


GARBAGE = st.one_of(
    st.binary(max_size=300),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=20,
    ).map(lambda value: json.dumps(value).encode()),
    st.integers(1, 3_000).map(lambda depth: ("[" * depth + "]" * depth).encode()),
    st.just(b'{"RecordId": 1, "RetryCount": 0, "EnqueueTime": "\\ud800"}'),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.lists(GARBAGE, min_size=1, max_size=5))
def test_no_payload_stops_the_report_consumer(
    make_broker: BrokerFactory, redis_client: redis.Redis, garbage: list[bytes]
) -> None:
    """Whatever is pushed before it, a valid job pushed after it is handed out."""
    redis_client.delete(REPORT_QUEUE_KEY, REPORT_QUEUE_KEY + ":invalid", REPORT_JOBS_KEY)
    broker = make_broker()
    redis_client.lpush(REPORT_QUEUE_KEY, *garbage, ReportQueueMessage.new(424242).encode())
    consumer = report_consumer(broker)
    try:
        handed_out: list[int] = []
        while not handed_out or handed_out[-1] != 424242:
            message = take(consumer)
            handed_out.append(int(message.args[0]))
            consumer.ack(message)
        # Everything that was not a job sits verbatim in the quarantine list.
        valid = len(handed_out) - 1
        assert redis_client.llen(REPORT_QUEUE_KEY + ":invalid") == len(garbage) - valid
    finally:
        consumer.close()
        broker.close()


# -- every producer's jobs are counted; one reading of RecordId --------------------------------


def dotnet_job(record_id: int | str, retry_count: int = 0) -> bytes:
    """A job as the .NET producer (or redis-cli) LPUSHes it: not counted when pushed."""
    time = "2025-01-15T10:30:00"
    return f'{{"RecordId": {record_id}, "RetryCount": {retry_count}, "EnqueueTime": "{time}"}}'.encode()


def test_a_dying_job_of_another_producer_is_not_the_last_while_the_records_own_job_retries(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    """The record's own job is retrying when a job LPUSHed by another producer dies at RetryCount
    3: the dead-letter hook must hear that another job is alive, and the own job stays counted."""
    queue = RedisReportQueue(redis_client)
    queue.enqueue(77)
    redis_client.lpush(REPORT_QUEUE_KEY, dotnet_job(77, retry_count=3))
    consumer = report_consumer(broker)
    own, other = take(consumer), take(consumer)
    assert (own.options["retry_count"], other.options["retry_count"]) == (0, 3)
    own.retry_later(own._message.copy(options={**own.options, "retry_count": 1}), 60_000)
    assert queue.jobs_alive(77) == 2  # what mark_record_failed asks: not the last job
    other.dead_letter()
    assert index(redis_client) == {77: "1"}  # the retrying job is still counted
    consumer.close()


def test_a_job_of_another_producer_waiting_in_the_queue_counts_for_the_last_job_question(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    queue = RedisReportQueue(redis_client)
    queue.enqueue(78)
    consumer = report_consumer(broker)
    own = take(consumer)
    redis_client.lpush(REPORT_QUEUE_KEY, dotnet_job(78))  # not fetched yet
    assert queue.jobs_alive(78) == 2
    own.dead_letter()
    assert index(redis_client) == {78: "1"}
    consumer.close()


def test_a_nested_record_id_touches_no_other_records_entry(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    """`{"Meta":{"RecordId":X},"RecordId":Y,...}` is a job of Y (the decoder's reading): its
    death must not end X's count, or the reconciler queues a duplicate for X."""
    RedisReportQueue(redis_client).enqueue(31)
    nested = b'{"Meta":{"RecordId":31},"RecordId":32,"RetryCount":3,"EnqueueTime":"2025-01-15T10:30:00"}'
    redis_client.lpush(REPORT_QUEUE_KEY, nested)
    consumer = report_consumer(broker)
    own, other = take(consumer), take(consumer)
    assert other.args == (32,)
    other.dead_letter()
    assert index(redis_client) == {31: "1"}
    consumer.ack(own)
    consumer.close()
    assert index(redis_client) == {}


@pytest.mark.parametrize(
    "record_id",
    ["42.5", '"42"', "-42", "0", "42e0", "4.2E1", "042", "true", "null", "[42]", '{"RecordId":42}'],
)
def test_a_job_whose_record_id_is_not_a_positive_integer_touches_no_entry(
    broker: RedisListBroker, redis_client: redis.Redis, record_id: str
) -> None:
    queue = RedisReportQueue(redis_client)
    queue.enqueue(42)
    consumer = report_consumer(broker)
    own = take(consumer)
    redis_client.lpush(REPORT_QUEUE_KEY, dotnet_job(record_id))
    assert queue.jobs_alive(42) == 1  # waiting, it is no job of record 42
    assert next(consumer) is None  # quarantined on arrival
    assert redis_client.lrange(REPORT_QUEUE_KEY + ":invalid", 0, -1) == [dotnet_job(record_id)]
    assert index(redis_client) == {42: "1"}
    consumer.ack(own)
    consumer.close()
    assert index(redis_client) == {}


def test_a_record_id_beyond_double_precision_keeps_its_digits(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    big = 2**63 - 1  # a bigint; a Lua number (a double) would read 9223372036854775808
    redis_client.lpush(REPORT_QUEUE_KEY, dotnet_job(big), dotnet_job(2**53 + 1))
    consumer = report_consumer(broker)
    first, second = take(consumer), take(consumer)
    assert (first.args, second.args) == ((big,), (2**53 + 1,))
    assert index(redis_client) == {big: "1", 2**53 + 1: "1"}
    consumer.ack(first)
    consumer.ack(second)
    consumer.close()
    assert index(redis_client) == {}


NAMES = st.sampled_from(
    [
        '"RecordId"',
        '"Record\\u0049d"',
        '"\\u0052ecordId"',
        '"recordId"',
        '"RecordId "',
        '"Record\\"Id"',
        '"Meta"',
    ]
)
VALUES = st.one_of(
    st.integers(-10, 2**64).map(str),
    st.sampled_from(
        [
            *("42.5", "4.2e1", "42.0", "1E2", "-0", '"42"', '"x\\"RecordId\\":7"', "true", "null", "[]"),
            *('[1,{"RecordId":8}]', '{"RecordId":9}', '{"a":"}{[","RecordId":10}', '"\\\\"'),
        ]
    ),
)
SPACE = st.sampled_from(["", " ", "\n", "\t", "\r\n  "])


@st.composite
def json_objects(draw: st.DrawFn) -> str:
    """Valid JSON objects whose members (duplicates, escaped names, nested or odd values) are
    chosen to tell a faithful top-level reading of RecordId from a guess."""
    members = draw(st.lists(st.tuples(NAMES, SPACE, VALUES), max_size=5))
    ws = draw(SPACE)
    inner = f"{ws},{ws}".join(f"{name}{space}:{space}{value}" for name, space, value in members)
    return f"{ws}{{{ws}{inner}{ws}}}{ws}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=json_objects())
def test_the_index_reads_the_record_id_the_decoder_reads(redis_client: redis.Redis, text: str) -> None:
    """The scripts' reading of RecordId (lua/_index.lua, `job_key`) is the decoder's: the last
    top-level member named RecordId, once its escapes are read, when it is an integer in
    1..2^63-1; anything else names no record."""
    redis_client.delete(REPORT_QUEUE_KEY, REPORT_JOBS_KEY, REPORT_QUEUE_KEY + ":counted")
    value = json.loads(text).get("RecordId")
    expected = {value: "1"} if is_strict_int(value) and 1 <= value <= MAX_RECORD_ID else {}
    RedisReportQueue(redis_client).index.enqueue([text])
    assert index(redis_client) == expected
    full = json.loads(text) | {"RetryCount": 0, "EnqueueTime": "2025-01-15T10:30:00"}
    try:
        assert ReportQueueMessage.decode(json.dumps(full)).record_id == value
    except InvalidReportMessage:
        assert expected == {}


def test_a_dead_mark_is_not_finished_while_another_producers_job_of_the_record_waits(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    """The reconciler sets status 5 for a dead mark: not while a job LPUSHed by another producer
    waits for the record, which then decides."""
    queue = RedisReportQueue(redis_client)
    queue.enqueue(50)
    consumer = report_consumer(broker)
    take(consumer).dead_letter(unconfirmed=True)  # the status-5 write failed: the mark
    assert index(redis_client) == {50: DEAD_MARK}
    redis_client.lpush(REPORT_QUEUE_KEY, dotnet_job(50))
    assert queue.enqueue_missing([50]) == ([], [])
    assert index(redis_client) == {50: "1"}
    consumer.close()


def test_deleting_a_retry_is_not_the_records_last_job_while_another_producers_job_waits(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    queue = RedisReportQueue(redis_client)
    queue.enqueue(51)
    consumer = report_consumer(broker)
    own = take(consumer)
    own.retry_later(own._message.copy(options={**own.options, "retry_count": 1}), 3_600_000)
    redis_client.lpush(REPORT_QUEUE_KEY, dotnet_job(51))
    [member] = bytes_list(redis_client.zrange(REPORT_DELAYED_KEY, 0, -1))
    handle = member[:16].decode()
    # The operator's "delete" (0: another job of the record lives on; the record id: its last).
    assert RedisQueueOperations(redis_client).delete_delayed([handle]) == {handle: 0}
    assert index(redis_client) == {51: "1"}
    consumer.close()


def test_jobs_queued_by_the_previous_version_are_not_counted_twice(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    """Upgrading with jobs waiting: listbroker 1 counted our producers' jobs without crediting
    them. The first step of the new scripts takes every job then waiting as counted, so a job of
    ours is not counted a second time when fetched (its record would wait in status 3 forever)."""
    redis_client.lpush(REPORT_QUEUE_KEY, ReportQueueMessage.new(60).encode())
    redis_client.hset(REPORT_JOBS_KEY, "60", 1)  # as listbroker 1's enqueue left it
    consumer = report_consumer(broker)
    message = take(consumer)
    assert index(redis_client) == {60: "1"}
    consumer.ack(message)
    consumer.close()
    assert index(redis_client) == {}
