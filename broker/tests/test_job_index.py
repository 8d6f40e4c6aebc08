"""The job index of a queue whose codec names a `job_key_field`, on a real Redis: every
producer's jobs are counted, whoever pushed them, and the key is read as a JSON decoder reads it."""

from __future__ import annotations

import json
from typing import Any

import dramatiq
import pytest
import redis
from listbroker import InvalidMessage, JobIndex, ListMessageProxy, QueueKeys, RedisListBroker
from listbroker.consumer import RedisListConsumer

QUEUE = "jobs"
KEYS = QueueKeys.for_queue(QUEUE)


class JsonCodec:
    """`{"id": <positive integer>, ...}`: the job key is `id`."""

    job_key_field = "id"

    def encode(self, message: dramatiq.Message[Any]) -> str:
        return json.dumps({"id": message.args[0]})

    def decode(self, payload: bytes) -> dramatiq.Message[Any]:
        data = json.loads(payload.decode("utf-8"))
        key = data.get("id") if isinstance(data, dict) else None
        if type(key) is not int or key < 1:
            raise InvalidMessage(f"no positive integer id: {payload!r}")
        return dramatiq.Message(queue_name=QUEUE, actor_name="work", args=(key,), kwargs={}, options={})


@pytest.fixture
def consumer(broker: RedisListBroker) -> RedisListConsumer:
    broker.codecs[QUEUE] = JsonCodec()
    broker.declare_queue(QUEUE)
    return broker.consume(QUEUE, prefetch=8, timeout=100)


def index(client: redis.Redis) -> dict[bytes, bytes]:
    return dict(client.hgetall(KEYS.jobs))  # type: ignore[arg-type]


def job_index(client: redis.Redis) -> JobIndex:
    return JobIndex(
        client, queue_key=KEYS.queue, jobs_key=KEYS.jobs, counted_key=KEYS.counted, job_key_field="id"
    )


def take(consumer: RedisListConsumer) -> ListMessageProxy:
    message = next(consumer)
    assert isinstance(message, ListMessageProxy)
    return message


def test_a_job_pushed_by_another_producer_is_counted_when_taken_and_uncounted_when_it_ends(
    consumer: RedisListConsumer, redis_client: redis.Redis
) -> None:
    job_index(redis_client).enqueue([json.dumps({"id": 7})])
    redis_client.lpush(KEYS.queue, '{"id": 7}')  # another producer: not counted yet
    assert index(redis_client) == {b"7": b"1"}
    first, second = take(consumer), take(consumer)
    assert index(redis_client) == {b"7": b"2"}
    consumer.ack(first)
    consumer.ack(second)
    consumer.close()
    assert index(redis_client) == {}
    assert redis_client.hget(KEYS.counted, "n") == b"0"


def test_a_consumer_waiting_on_an_empty_queue_takes_through_the_fetch(
    consumer: RedisListConsumer, redis_client: redis.Redis
) -> None:
    assert next(consumer) is None  # waited on the empty queue
    redis_client.lpush(KEYS.queue, '{"id": 8}')
    assert take(consumer).args == (8,)
    assert index(redis_client) == {b"8": b"1"}  # counted by the fetch, not taken uncounted
    consumer.close()


def test_jobs_alive_counts_another_producers_jobs_still_waiting(redis_client: redis.Redis) -> None:
    jobs = job_index(redis_client)
    jobs.enqueue([json.dumps({"id": 9})])
    redis_client.lpush(KEYS.queue, '{"id": 9}', '{"id": 10}', '{"id": 9.5}', "not json")
    assert jobs.jobs_alive(9) == 2
    assert index(redis_client) == {b"9": b"2", b"10": b"1"}
    assert int(redis_client.hget(KEYS.counted, "n") or 0) == redis_client.llen(KEYS.queue)


@pytest.mark.parametrize(
    ("payload", "key"),
    [
        ('{"id": 5}', b"5"),
        ('{"meta": {"id": 6}, "id": 5}', b"5"),
        ('{"id": 6, "id": 5}', b"5"),
        ('{"\\u0069d": 5}', b"5"),
        ('{"x": "\\"id\\": 6", "id": 5}', b"5"),
        ('{"id": 9223372036854775807}', b"9223372036854775807"),
        ('{"id": 9223372036854775808}', None),
        ('{"id": 5.5}', None),
        ('{"id": "5"}', None),
        ('{"id": 0}', None),
        ('{"id": -5}', None),
        ('{"meta": {"id": 5}}', None),
        ('[{"id": 5}]', None),
    ],
)
def test_the_job_key_is_the_top_level_member_when_a_positive_integer(
    redis_client: redis.Redis, payload: str, key: bytes | None
) -> None:
    job_index(redis_client).enqueue([payload])
    assert index(redis_client) == ({} if key is None else {key: b"1"})
