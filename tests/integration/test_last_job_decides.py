"""The last job of a record decides, whoever queued it: a Hypothesis state machine against the
real broker (its consumer and Lua scripts on the test Redis), compared with a model.

Jobs come from this web tier (`RedisReportQueue.enqueue`, counted as they are pushed), the
reconciler (`enqueue_missing`) and other producers (a raw LPUSH, as the .NET producer or
redis-cli, counted only when fetched, or when a dead letter asks); some carry a nested
RecordId or none that is a positive integer. They are fetched, succeed, fail (retried at
RetryCount < 3, dead-lettered at 3), are given back, fall due, or are lost with their consumer
and reaped. After every step `report:queue:jobs` must equal the model's count of counted jobs
per record, and at every dead letter the hook's question "is another job of the record alive?"
(`RedisReportQueue.jobs_alive(record) > 1`, as `actors.report.mark_record_failed` asks it)
must get the model's answer over every job alive, from any producer: status 5 only when the
last one dies.
"""

from __future__ import annotations

from collections import Counter

import redis
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from listbroker import ListMessageProxy, RedisListBroker
from listbroker.consumer import RedisListConsumer

from redis_adapters.keyspace import Keyspace
from redis_adapters.queues import REPORT_QUEUE_NAME
from redis_adapters.report_message import InvalidReportMessage, ReportQueueMessage
from redis_adapters.report_queue import RedisReportQueue
from tests.support.broker_fixtures import BrokerFactory
from tests.support.redis_keys import bytes_list, bytes_map, clean_redis

KEYS = Keyspace.of().report
RECORDS = st.integers(1, 3)
#: Most attempts fail and most jobs of other producers come at their last attempt, so that
#: the examples reach dead letters often (a success ends the record's story).
FAILS = st.integers(0, 4).map(bool)
LAST_OFTEN = st.sampled_from([3, 3, 2, 0])
#: Long enough that nothing falls due, and no consumer is reaped, unless a rule says so.
HOUR_MS = 3_600_000
#: How another producer writes a job: the .NET system's own spacing and EnqueueTime.
DOTNET = '{{"RecordId": {rid}, "RetryCount": {retry}, "EnqueueTime": "2025-01-15T10:30:00"}}'
#: Jobs of another producer whose RecordId is read only at the top level (the nested one is
#: another record's), and payloads with no positive integer RecordId (quarantined).
NESTED = (
    '{{"Meta":{{"RecordId":{other}}},"RecordId":{rid},"RetryCount":{retry},'
    '"EnqueueTime":"2025-01-15T10:30:00"}}'
)
NOT_A_JOB = (
    '{{"RecordId":{rid}.5,"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}}',
    '{{"RecordId":"{rid}","RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}}',
    '{{"Meta":{{"RecordId":{rid}}},"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}}',
    '{{"RecordId":-{rid},"RetryCount":0,"EnqueueTime":"2025-01-15T10:30:00"}}',
)


def record_of(payload: bytes) -> int | None:
    """The record a payload is a job of, by the decoder (None: it is quarantined)."""
    try:
        return ReportQueueMessage.decode(payload).record_id
    except InvalidReportMessage:
        return None


def jobs_of(payloads: list[bytes]) -> Counter[bytes]:
    return Counter(p for p in payloads if record_of(p) is not None)


def make_machine(make_broker: BrokerFactory, client: redis.Redis) -> type[RuleBasedStateMachine]:
    class LastJobDecides(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            clean_redis(client)
            self.broker: RedisListBroker = make_broker(
                heartbeat_interval_ms=HOUR_MS, heartbeat_timeout_ms=2 * HOUR_MS
            )
            self.broker.declare_queue(REPORT_QUEUE_NAME)
            self.queue = RedisReportQueue(client)
            self.consumer = self._consumer()
            self.held: list[ListMessageProxy] = []
            # The model: where each job (payload) is, and whether the index counts it yet.
            self.counted_waiting: Counter[bytes] = Counter()
            self.uncounted_waiting: Counter[bytes] = Counter()
            self.in_flight: Counter[bytes] = Counter()
            self.delayed: Counter[bytes] = Counter()
            self.status = dict.fromkeys(range(1, 4), 3)

        def _consumer(self) -> RedisListConsumer:
            return self.broker.consume(REPORT_QUEUE_NAME, prefetch=8, timeout=10)

        # -------------------------------------------------------------- the model

        def alive(self, record_id: int) -> int:
            every = self.counted_waiting + self.uncounted_waiting + self.in_flight + self.delayed
            return sum(n for p, n in every.items() if record_of(p) == record_id)

        def expected_index(self) -> dict[int, int]:
            counted = self.counted_waiting + self.in_flight + self.delayed
            index: Counter[int] = Counter()
            for payload, n in counted.items():
                record_id = record_of(payload)
                assert record_id is not None
                index[record_id] += n
            return {k: v for k, v in index.items() if v}

        def _fetched(self) -> None:
            """Mirror the fetch: the jobs that entered the processing list since the last look
            leave the queue, a counted copy first (the copies of a payload are alike)."""
            real = jobs_of(bytes_list(client.lrange(self.consumer.processing_key, 0, -1)))
            assert not self.in_flight - real, "a job in flight vanished"
            for payload, n in (real - self.in_flight).items():
                for _ in range(n):
                    if self.counted_waiting[payload]:
                        self.counted_waiting[payload] -= 1
                    else:
                        assert self.uncounted_waiting[payload], payload
                        self.uncounted_waiting[payload] -= 1
                    self.in_flight[payload] += 1

        def _flush(self) -> None:
            self.consumer._flush(self.consumer._take_acks())

        # -------------------------------------------------------------- producers

        @initialize(
            own=st.lists(RECORDS, max_size=2, unique=True), other=st.lists(RECORDS, max_size=2, unique=True)
        )
        def jobs_of_both_kinds_wait(self, own: list[int], other: list[int]) -> None:
            for record_id in own:
                self.web_enqueues(record_id)
            for record_id in other:
                self.another_producer_pushes(record_id, 3, None)

        @rule(record_id=RECORDS)
        def web_enqueues(self, record_id: int) -> None:
            self.queue.enqueue(record_id)
            self.counted_waiting[bytes(client.lindex(KEYS.queue, 0))] += 1  # type: ignore[arg-type]
            self.status[record_id] = 3  # a submission, or an admin's regeneration

        @rule(record_id=RECORDS)
        def reconciler_enqueues_if_missing(self, record_id: int) -> None:
            if self.status[record_id] != 3:
                return
            enqueued, _ = self.queue.enqueue_missing([record_id])
            assert enqueued == ([] if self.expected_index().get(record_id) else [record_id])
            if enqueued:
                self.counted_waiting[bytes(client.lindex(KEYS.queue, 0))] += 1  # type: ignore[arg-type]

        @rule(record_id=RECORDS, retry=LAST_OFTEN, other=st.one_of(st.none(), RECORDS))
        def another_producer_pushes(self, record_id: int, retry: int, other: int | None) -> None:
            shape = DOTNET if other is None else NESTED
            payload = shape.format(rid=record_id, retry=retry, other=other).encode()
            client.lpush(KEYS.queue, payload)
            self.uncounted_waiting[payload] += 1

        @rule(record_id=RECORDS, shape=st.sampled_from(NOT_A_JOB))
        def someone_pushes_a_bad_job(self, record_id: int, shape: str) -> None:
            client.lpush(KEYS.queue, shape.format(rid=record_id))

        # -------------------------------------------------------------- the consumer

        @precondition(lambda self: len(self.held) < 4)
        @rule()
        def fetch(self) -> None:
            if not client.llen(KEYS.queue) and not self.consumer._buffer:
                return
            message = next(self.consumer)
            self._fetched()
            if message is not None:
                assert isinstance(message, ListMessageProxy)
                self.held.append(message)

        @precondition(lambda self: self.held)
        @rule(i=st.integers(0, 3), fails=FAILS)
        def run(self, i: int, fails: bool) -> None:
            message = self.held.pop(i % len(self.held))
            payload, record_id = message.payload, int(message.args[0])
            retry = int(message.options["retry_count"])
            if self.status[record_id] != 3 or not fails:
                # Skipped (not in status 3) or generated: acknowledged.
                self.status[record_id] = 4 if self.status[record_id] == 3 else self.status[record_id]
                self.consumer.ack(message)
                self._flush()
            elif retry < 3:
                retried = message._message.copy(options={**message.options, "retry_count": retry + 1})
                assert message.retry_later(retried, HOUR_MS)
                self.delayed[ReportQueueMessage.decode(payload).retried(retry + 1).encode().encode()] += 1
            else:
                # The dead-letter hook's question, then the dead letter (actors/report.py).
                others = self.queue.jobs_alive(record_id) > 1
                assert others == (self.alive(record_id) > 1), (record_id, self.alive(record_id))
                event("dead letter: " + ("another job alive" if others else "the last job"))
                if +self.uncounted_waiting:
                    event("dead letter while another producer's jobs wait uncounted")
                # Asking counts every job another producer left waiting.
                self.counted_waiting += self.uncounted_waiting
                self.uncounted_waiting = Counter()
                if not others:
                    self.status[record_id] = 5
                assert message.dead_letter()
            self.in_flight[payload] -= 1

        @precondition(lambda self: self.held)
        @rule(i=st.integers(0, 3))
        def give_back(self, i: int) -> None:
            message = self.held.pop(i % len(self.held))
            message.give_back()
            self.in_flight[message.payload] -= 1
            self.counted_waiting[message.payload] += 1

        @precondition(lambda self: +self.delayed)
        @rule(data=st.data())
        def a_retry_falls_due(self, data: st.DataObject) -> None:
            members = bytes_list(client.zrange(KEYS.delayed, 0, -1))
            member = data.draw(st.sampled_from(members))
            client.zadd(KEYS.delayed, {member: 0}, xx=True)
            self.broker.scripts.promote(keys=[KEYS.delayed, KEYS.queue, KEYS.counted], args=[100])
            payload = member[17:]
            self.delayed[payload] -= 1
            self.counted_waiting[payload] += 1

        @rule()
        def the_worker_dies_and_is_reaped(self) -> None:
            processing = self.consumer.processing_key
            client.zadd(KEYS.heartbeats, {processing: 0})
            self.broker.scripts.reap(
                keys=[
                    KEYS.heartbeats,
                    processing,
                    KEYS.queue,
                    KEYS.crashed,
                    KEYS.counted,
                    self.consumer.started_key,
                ],
                args=[1_000],
            )
            self.counted_waiting += self.in_flight
            self.in_flight = Counter()
            self.held = []
            self.consumer = self._consumer()

        @precondition(lambda self: not self.held)
        @rule()
        def the_worker_stops(self) -> None:
            self.consumer.close()
            assert self.consumer.released
            self.counted_waiting += self.in_flight
            self.in_flight = Counter()
            self.consumer = self._consumer()

        # -------------------------------------------------------------- the promise

        @invariant()
        def the_index_counts_every_job_in_flight_delayed_or_counted_waiting(self) -> None:
            real = {int(k): int(v) for k, v in bytes_map(client.hgetall(KEYS.jobs)).items()}
            assert real == self.expected_index()

        def teardown(self) -> None:
            self.broker.close()

    return LastJobDecides


def test_the_last_job_of_a_record_decides_whoever_queued_it(
    make_broker: BrokerFactory, redis_client: redis.Redis
) -> None:
    run_state_machine_as_test(
        make_machine(make_broker, redis_client),
        settings=settings(
            max_examples=200,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )
