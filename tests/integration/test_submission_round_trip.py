"""Calls of several Redis adapters sent together (redis_adapters/round_trip.py), on a real Redis:
one round trip, each call's outcome its own, a script the server lacks loaded and run."""

from __future__ import annotations

import json
import uuid

import pytest
import redis
from redis.connection import AbstractConnection

from redis_adapters.autosave_store import RedisAutosaveStore
from redis_adapters.event_sink import RedisEventSink
from redis_adapters.keyspace import AutosaveKeys
from redis_adapters.report_queue import RedisReportQueue
from redis_adapters.round_trip import ScriptCall
from services.domain.errors import AutosaveUnavailable, QueueUnavailable
from services.domain.events import Event, EventType, prepare_emit
from services.domain.prepared import CallAlone
from services.domain.status import RecordStatus
from services.persistence.event_store import DirectEventWriter
from tests.support.urls import CLOSED_DATABASE_URL, CLOSED_REDIS_URL

USER = 7
RECORD = 41


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


def _sealed(store: RedisAutosaveStore) -> None:
    store.prime(RECORD, USER, RecordStatus.IN_PROGRESS)
    assert store.save(USER, RECORD, [(1, 3), (2, 4)]).answered_count == 2
    store.seal(RECORD, USER)


def test_a_release_and_an_enqueue_go_in_one_round_trip_and_both_act(
    redis_client: redis.Redis, sends: list[int]
) -> None:
    store, queue = RedisAutosaveStore(redis_client), RedisReportQueue(redis_client)
    _sealed(store)
    release, enqueue = store.prepare_release(RECORD, submitted=True), queue.prepare_enqueue(RECORD)
    # Each script once on its own first: loaded, so that the count below is the send's alone.
    redis_client.script_load(release.script.script)
    redis_client.script_load(enqueue.script.script)
    sends.clear()

    assert release.send(enqueue) == [None, None]

    assert len(sends) == 1
    keys = AutosaveKeys.default()
    assert redis_client.exists(keys.answers.item(RECORD)) == 0
    assert redis_client.hget(keys.record(RECORD), "status") == b"3"  # still closed to saves
    assert [json.loads(job)["RecordId"] for job in redis_client.lrange(queue.key, 0, -1)] == [RECORD]
    assert queue.jobs_alive(RECORD) == 1


def test_a_prime_and_an_event_go_in_one_round_trip_and_both_act(
    redis_client: redis.Redis, sends: list[int]
) -> None:
    """startAssessment's two Redis calls: the record cached for saves, its event pushed."""
    store = RedisAutosaveStore(redis_client)
    sink = RedisEventSink(redis_client, fallback=DirectEventWriter(CLOSED_DATABASE_URL))
    event = Event.new(EventType.RECORD_STARTED, record_id=RECORD, user_id=USER, actor=f"user:{USER}")
    prime, log_started = (
        store.prepare_prime(RECORD, USER, RecordStatus.IN_PROGRESS),
        prepare_emit(sink, [event]),
    )
    assert isinstance(log_started, ScriptCall)
    redis_client.script_load(prime.script.script)
    redis_client.script_load(log_started.script.script)
    sends.clear()

    assert prime.send(log_started) == [None, None]

    assert len(sends) == 1
    assert redis_client.hget(AutosaveKeys.default().record(RECORD), "status") == b"2"
    assert [Event.decode(raw) for raw in redis_client.lrange(sink.keys.queue, 0, -1)] == [event]


def test_a_script_the_server_lacks_is_loaded_and_run(redis_client: redis.Redis) -> None:
    queue = RedisReportQueue(redis_client)
    # A script no one loaded yet (its text unique to this run): EVALSHA answers NOSCRIPT.
    fresh = redis_client.register_script(f"redis.call('SET', KEYS[1], ARGV[1]) -- {uuid.uuid4()}")
    first = ScriptCall(fresh, ["round-trip:fresh"], ["set"], failed=lambda exc: QueueUnavailable(str(exc)))

    assert first.send(queue.prepare_enqueue(RECORD)) == [None, None]

    assert redis_client.get("round-trip:fresh") == b"set"
    assert queue.jobs_alive(RECORD) == 1


def test_each_call_fails_or_succeeds_on_its_own(redis_client: redis.Redis) -> None:
    queue = RedisReportQueue(redis_client)
    refusing = redis_client.register_script("return redis.error_reply('refused (test)')")
    failing = ScriptCall(refusing, ["round-trip:x"], [], failed=lambda exc: AutosaveUnavailable(str(exc)))

    failed, queued = failing.send(queue.prepare_enqueue(RECORD))

    assert isinstance(failed, AutosaveUnavailable)
    assert "refused (test)" in str(failed)
    assert queued is None
    assert queue.jobs_alive(RECORD) == 1


def test_a_server_that_cannot_be_reached_fails_every_call_with_its_store_s_error() -> None:
    client = redis.Redis.from_url(CLOSED_REDIS_URL, socket_connect_timeout=1)
    store, queue = RedisAutosaveStore(client), RedisReportQueue(client)

    not_released, not_queued = store.prepare_release(RECORD, submitted=True).send(
        queue.prepare_enqueue(RECORD)
    )

    assert isinstance(not_released, AutosaveUnavailable)
    assert isinstance(not_queued, QueueUnavailable)


def test_calls_of_other_kinds_are_sent_one_after_another(redis_client: redis.Redis) -> None:
    queue = RedisReportQueue(redis_client)
    ran: list[str] = []

    def refuse() -> None:
        ran.append("other")
        raise QueueUnavailable("down (test)")

    enqueued, other = queue.prepare_enqueue(RECORD).send(CallAlone(refuse))

    assert enqueued is None
    assert isinstance(other, QueueUnavailable)
    assert ran == ["other"]
    assert queue.jobs_alive(RECORD) == 1
