"""A submission's Redis work after its commit, the autosave released and the report job queued
(`RedisAutosaveStore.release_and_enqueue`), on a real Redis: one round trip, each step's outcome
its own, a script the server lacks loaded and run."""

from __future__ import annotations

import json
import uuid

import pytest
import redis
from redis.connection import AbstractConnection

from redis_adapters.autosave_store import RedisAutosaveStore
from redis_adapters.keyspace import AutosaveKeys
from redis_adapters.lua_scripts import lua_source
from redis_adapters.report_queue import RedisReportQueue
from services.domain.errors import AutosaveUnavailable, QueueUnavailable
from services.domain.status import RecordStatus
from tests.support.fakes import FailingQueue, RecordingQueue
from tests.support.urls import CLOSED_REDIS_URL

USER = 7
RECORD = 41
KEYS = AutosaveKeys.default()


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a client wrote to a Redis socket: its round trips."""
    counted: list[int] = []
    original = AbstractConnection.send_packed_command

    def counting(self: AbstractConnection, command: object, check_health: bool = True) -> None:
        counted.append(1)
        original(self, command, check_health)  # type: ignore[no-untyped-call]

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)
    return counted


def sealed(client: redis.Redis) -> RedisAutosaveStore:
    """A store holding the record's autosave, sealed as a submission seals it."""
    store = RedisAutosaveStore(client)
    store.prime(RECORD, USER, RecordStatus.IN_PROGRESS)
    assert store.save(USER, RECORD, [(1, 3), (2, 4)]).answered_count == 2
    store.seal(RECORD, USER)
    return store


def released(client: redis.Redis) -> bool:
    """The autosave dropped, the record still closed to saves."""
    return (
        client.exists(KEYS.answers.item(RECORD)) == 0 and client.hget(KEYS.record(RECORD), "status") == b"3"
    )


def queued(queue: RedisReportQueue) -> list[int]:
    return [json.loads(job)["RecordId"] for job in queue.client.lrange(queue.key, 0, -1)]


def test_the_release_and_the_job_go_in_one_round_trip_and_both_act(
    redis_client: redis.Redis, sends: list[int]
) -> None:
    store, queue = sealed(redis_client), RedisReportQueue(redis_client)
    # Each script once on its own first: loaded, so that the count below is the call's alone.
    redis_client.script_load(store._release.script)
    redis_client.script_load(queue.job(RECORD).script.script)
    sends.clear()

    assert store.release_and_enqueue(RECORD, queue) == (None, None)

    assert len(sends) == 1
    assert released(redis_client)
    assert queued(queue) == [RECORD]
    assert queue.jobs_alive(RECORD) == 1


def test_a_script_the_server_lacks_is_loaded_and_run(redis_client: redis.Redis) -> None:
    store, queue = sealed(redis_client), RedisReportQueue(redis_client)
    # The release script under a text no server has seen (unique to this run): EVALSHA answers
    # NOSCRIPT, as after a restart of Redis or a SCRIPT FLUSH.
    source = lua_source("redis_adapters", "autosave_release")
    store._release = redis_client.register_script(f"{source}\n-- {uuid.uuid4()}")

    assert store.release_and_enqueue(RECORD, queue) == (None, None)

    assert released(redis_client)
    assert queued(queue) == [RECORD]


def test_each_step_fails_or_succeeds_on_its_own(redis_client: redis.Redis) -> None:
    store, queue = sealed(redis_client), RedisReportQueue(redis_client)
    store._release = redis_client.register_script("return redis.error_reply('refused (test)')")

    not_released, not_queued = store.release_and_enqueue(RECORD, queue)

    assert isinstance(not_released, AutosaveUnavailable)
    assert "refused (test)" in str(not_released)
    assert not_queued is None
    assert queued(queue) == [RECORD]


def test_a_server_that_cannot_be_reached_fails_each_step_with_its_store_s_error() -> None:
    client = redis.Redis.from_url(CLOSED_REDIS_URL, socket_connect_timeout=1)

    not_released, not_queued = RedisAutosaveStore(client).release_and_enqueue(
        RECORD, RedisReportQueue(client)
    )

    assert isinstance(not_released, AutosaveUnavailable)
    assert isinstance(not_queued, QueueUnavailable)


def test_another_queue_is_called_after_the_release(redis_client: redis.Redis) -> None:
    store, recording = sealed(redis_client), RecordingQueue()
    assert store.release_and_enqueue(RECORD, recording) == (None, None)
    assert released(redis_client)
    assert recording.enqueued == [RECORD]

    not_released, not_queued = store.release_and_enqueue(RECORD, FailingQueue())
    assert not_released is None
    assert isinstance(not_queued, QueueUnavailable)
