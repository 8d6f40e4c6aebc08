"""A poison pill among innocent jobs, in real worker processes SIGKILLed by it (poison_app.py).

Only a delivery that had started when its worker died counts a lost delivery: the jobs
merely prefetched beside the poison pill go back uncounted, run, and are never dead-lettered;
the poison pill is dead-lettered on the arrival after its `max_lost_deliveries`-th loss.
"""

from __future__ import annotations

import sys
import threading
import time

import dramatiq
import redis
from dramatiq.middleware import CurrentMessage
from listbroker import DependencyUnavailable, ListMessageProxy, RedisListBroker
from listbroker.retries import DEFAULT_MAX_LOST_DELIVERIES
from poison_app import run_restarts
from support import WorkerFactory, bytes_map


def test_a_poison_pill_takes_no_innocent_job_with_it(redis_url: str, redis_client: redis.Redis) -> None:
    outcome = run_restarts(sys.executable, redis_url, max_runs=DEFAULT_MAX_LOST_DELIVERIES + 3)
    assert outcome.charged == {"suicide(1,)"}, outcome  # never a job held beside it
    assert outcome.dead == [
        ("suicide", [1], f"lost with its worker {DEFAULT_MAX_LOST_DELIVERIES + 1} times"),
    ], outcome
    assert outcome.ran == [0, 1, 2], outcome  # each innocent job ran, once
    # It killed its worker exactly the threshold's worth plus one times, then was refused on
    # arrival by the next worker, which ran the rest.
    assert outcome.suicide_starts == DEFAULT_MAX_LOST_DELIVERIES + 1, outcome
    assert len(outcome.runs) == DEFAULT_MAX_LOST_DELIVERIES + 2, outcome


def started_marks(client: redis.Redis, queue: str) -> dict[bytes, int]:
    """Every consumer's started marks on `queue`: payload -> deliveries marked."""
    marks: dict[bytes, int] = {}
    for key in client.scan_iter(match=f"{queue}:queue:started:*"):
        for payload, n in bytes_map(client.hgetall(key)).items():
            marks[payload] = marks.get(payload, 0) + int(n)
    return marks


def marks_seen(client: redis.Redis, queue: str, payloads: list[bytes]) -> dict[bytes, int]:
    """The marks of `payloads`, once they are all there (the mark is sent, not waited for,
    before the actor runs: Redis has it a moment later), or as they are after 5 s."""
    deadline = time.monotonic() + 5
    while True:
        marks = started_marks(client, queue)
        if all(p in marks for p in payloads) or time.monotonic() > deadline:
            return marks
        time.sleep(0.001)


def test_a_message_is_marked_started_before_its_actor_runs_and_unmarked_with_its_outcome(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    seen: list[tuple[bytes, dict[bytes, int]]] = []

    @dramatiq.actor(broker=broker, queue_name="single", retry_delays=(10,))
    def single(n: int) -> None:
        current = CurrentMessage.get_current_message()
        assert isinstance(current, ListMessageProxy)
        seen.append((current.payload, marks_seen(redis_client, "single", [current.payload])))
        if n == 1 and current.options.get("retry_count", 0) == 0:
            raise ValueError("fails once")  # its retry's settle drops the mark too

    for n in range(3):
        single.send(n)
    worker = make_worker(broker, threads=1)
    broker.join("single", timeout=30_000)
    worker.join()
    assert len(seen) == 4
    # Each delivery marked once while it ran. The previous message's mark may still be there:
    # its outcome is recorded by its acknowledgement, which Dramatiq's consumer thread sends
    # after the worker thread has moved on.
    assert all(marks.get(payload) == 1 for payload, marks in seen), seen
    assert all(len(marks) <= 2 for _, marks in seen), seen
    assert started_marks(redis_client, "single") == {}


def test_a_batch_marks_all_its_messages_started_in_one_step(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    calls: list[tuple[int, int]] = []
    lock = threading.Lock()

    def run(messages: list[ListMessageProxy]) -> None:
        marks = marks_seen(redis_client, "batchq", [m.payload for m in messages])
        with lock:
            calls.append((len(messages), sum(marks.get(m.payload, 0) for m in messages)))

    def work(n: int) -> None:
        raise AssertionError("a batched actor's messages go to its batch function")

    batched = dramatiq.actor(broker=broker, queue_name="batchq", batch_size=8, batch_fn=run)(work)
    for n in range(24):
        batched.send(n)
    worker = make_worker(broker, threads=1)
    broker.join("batchq", timeout=30_000)
    worker.join()
    assert sum(n for n, _ in calls) == 24
    assert all(marked == n for n, marked in calls), calls  # every message of a call, marked
    assert started_marks(redis_client, "batchq") == {}


def test_a_message_that_could_not_begin_is_given_back_unmarked(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    """DependencyUnavailable: returned to its queue uncounted, and its started mark goes with it."""
    runs: list[int] = []

    @dramatiq.actor(broker=broker, queue_name="gated")
    def gated(n: int) -> None:
        runs.append(n)
        if len(runs) == 1:
            raise DependencyUnavailable("not yet")

    gated.send(7)
    worker = make_worker(broker, threads=1)
    broker.join("gated", timeout=30_000)
    worker.join()
    assert runs == [7, 7]
    assert started_marks(redis_client, "gated") == {}
    assert not redis_client.exists("gated:queue:crashed")


def test_a_message_lost_with_its_worker_runs_alone_not_in_a_batch(
    broker: RedisListBroker, make_worker: WorkerFactory, redis_client: redis.Redis
) -> None:
    """Should it be the poison pill, its next deaths are its own, not those of a batch around it."""
    batches: list[list[int]] = []

    def run(messages: list[ListMessageProxy]) -> None:
        batches.append([m.args[0] for m in messages])

    def work(n: int) -> None:
        raise AssertionError("a batched actor's messages go to its batch function")

    batched = dramatiq.actor(broker=broker, queue_name="lonely", batch_size=8, batch_fn=run)(work)
    for n in range(6):
        batched.send(n)
    # The message 2 was lost once with a worker (as reap.lua counts it).
    payload = next(p for p in redis_client.lrange("lonely:queue", 0, -1) if b'"args":[2]' in p)
    redis_client.hset("lonely:queue:crashed", payload, 1)
    worker = make_worker(broker, threads=1)
    broker.join("lonely", timeout=30_000)
    worker.join()
    assert sorted(n for batch in batches for n in batch) == list(range(6))
    assert [2] in batches, batches  # to the batch function, in a batch of one
    assert not redis_client.exists("lonely:queue:delayed", "lonely:queue:dead")  # no attempt failed
    assert not redis_client.exists("lonely:queue:crashed")  # its ack cleared the count


def test_a_mark_is_written_blind_and_only_for_a_message_still_held(
    broker: RedisListBroker, redis_client: redis.Redis
) -> None:
    """ScriptChannel.send: no reply is read (the server skips it), the script runs all the same,
    after the connection's earlier commands; start.lua marks nothing a consumer no longer holds."""
    channel = broker.direct.channel()
    redis_client.lpush("q:processing:c", b"held")
    channel.send(broker.scripts.start, ["q:processing:c", "q:started:c"], [b"held", b"gone"])
    channel.send(broker.scripts.start, ["q:processing:c", "q:started:c"], [b"held"])
    deadline = time.monotonic() + 5
    while redis_client.hget("q:started:c", b"held") != b"2" and time.monotonic() < deadline:
        time.sleep(0.001)
    assert bytes_map(redis_client.hgetall("q:started:c")) == {b"held": b"2"}
    # The channel's calls still read their own replies.
    assert channel.call(broker.scripts.start, ["q:processing:c", "q:started:c"], [b"held"]) == 1
    channel.close()
