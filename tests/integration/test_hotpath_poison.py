"""No input stops a hot-path loop: garbage is set aside verbatim, the rest is stored.

Garbage (Hypothesis-generated and hand-picked) is pushed into `eventlog:queue` and into the
answers and progress hashes; one cycle later the valid item pushed after it is stored and
the garbage sits byte for byte in the loop's invalid list. Rows that slip past the
validation and that PostgreSQL refuses are isolated too (bisection, services/persistence/isolation.py),
while a connection error still keeps the whole batch for the next cycle.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from hotpath.answers_flusher import AnswersFlusher
from hotpath.dirty import invalid_entry, parse_invalid_entry
from hotpath.eventlog_consumer import EventLogConsumer
from hotpath.progress_flusher import ProgressFlusher
from redis_adapters.event_sink import RedisEventSink
from redis_adapters.keyspace import AutosaveKeys, EventLogKeys
from services.domain.events import Event, EventType
from services.domain.saved_answers import MAX_SAVED_MS, SavedAnswer
from services.persistence.db import make_engine, make_session_factory
from services.persistence.progress import ProgressState
from tests.support.hotpath import QUESTION_IDS, insert_records, progress_row, stored_answers
from tests.support.redis_keys import bytes_list, clean_redis
from tests.support.urls import CLOSED_DATABASE_URL

EVENTS = EventLogKeys()
KEYS = AutosaveKeys.default()
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
PROPERTY = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def stored_event_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.scalars(text("SELECT id::text FROM event_log")))


def invalid_list(client: redis.Redis, key: str) -> list[bytes]:
    return bytes_list(client.lrange(key, 0, -1))


def drain(consumer: EventLogConsumer, cycles: int = 10) -> None:
    """Run cycles until the queue and the backup are empty; a wedged loop fails the test."""
    for _ in range(cycles):
        consumer.run_once()
        if not consumer.client.exists(EVENTS.queue, EVENTS.backup):
            return
    raise AssertionError("the event-log consumer is stuck: the queue or the backup never empties")


# -- garbage --------------------------------------------------------------------------------

LONE_SURROGATES = st.sampled_from(["\ud800", "\udfff", "a\udc80b", "\udbff\u00e9"])
#: Text that may hold lone surrogates (Hypothesis leaves them out of st.text() by default).
texts = st.one_of(
    st.text(max_size=20), LONE_SURROGATES, st.tuples(st.text(max_size=5), LONE_SURROGATES).map("".join)
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12,
)
OUT_OF_RANGE_TIMES = st.sampled_from(
    [
        "0001-01-01T00:00:00+05:00",
        "9999-12-31T23:59:59-05:00",
        "10000-01-01T00:00:00Z",
        "-0001-01-01T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "1e400",
    ]
)


def deeply_nested_event(depth: int) -> bytes:
    """A valid event but for its `data`, nested `depth` levels deep (built as text: json.dumps
    itself would overflow the stack)."""
    head = json.dumps(event_dict())[: -len("{}}")]
    return (head + '{"deep": ' + '{"k": [' * depth + "1" + "]}" * depth + "}}").encode()


def dumps(value: Any, ascii_only: bool) -> bytes:
    """JSON of `value`; ASCII with \\uXXXX escapes, or raw UTF-8 keeping surrogates as invalid bytes."""
    return json.dumps(value, ensure_ascii=ascii_only, allow_nan=True).encode("utf-8", "surrogatepass")


def event_dict(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "type": "answers.saved",
        "occurredAt": datetime.now(UTC).isoformat(),
        "recordId": 1,
        "actor": "user:1",
        "data": {},
    }
    base.update(changes)
    return base


#: Event-shaped entries with exactly one poisoned field: each must be refused.
poisoned_events = st.one_of(
    st.builds(lambda t: event_dict(type=t), LONE_SURROGATES),
    st.builds(lambda t: event_dict(actor=t), LONE_SURROGATES),
    st.builds(lambda t: event_dict(data={"note": t}), LONE_SURROGATES),
    st.builds(lambda t: event_dict(data={t: 1}), LONE_SURROGATES),
    st.builds(lambda t: event_dict(occurredAt=t), OUT_OF_RANGE_TIMES),
    st.builds(lambda n: event_dict(recordId=n), st.integers(2**63, 2**70) | st.integers(max_value=0)),
    st.builds(lambda v: event_dict(data={"x": v}), st.sampled_from([float("nan"), float("inf"), "a\x00b"])),
    st.builds(lambda v: event_dict(id=v), st.text(max_size=40)),
    st.builds(lambda v: event_dict(recordId=v), st.sampled_from(["1", 1.5, True, [], {}])),
)
garbage_entries = st.one_of(
    st.binary(max_size=120),
    st.builds(dumps, json_values, st.booleans()),
    st.builds(dumps, poisoned_events, st.booleans()),
    st.builds(lambda d: ("[" * d + "]" * d).encode(), st.integers(500, 5_000)),
    st.builds(deeply_nested_event, st.integers(20, 3_000)),
)


# -- the event log ----------------------------------------------------------------------------


@pytest.fixture
def consumer(
    redis_client: redis.Redis, session_factory: sessionmaker[Session], event_log: Engine
) -> Iterator[EventLogConsumer]:
    consumer = EventLogConsumer(redis_client, session_factory)
    yield consumer
    consumer.close()


def test_a_lone_surrogate_no_longer_wedges_the_log(
    consumer: EventLogConsumer, redis_client: redis.Redis, event_log: Engine
) -> None:
    """The case seen on main: the insert raised UnicodeEncodeError and the batch replayed for ever."""
    poison = json.dumps(event_dict(data={"note": "\ud800"})).encode()  # ASCII: "\\ud800"
    valid = Event.new(EventType.ANSWERS_SAVED, record_id=1)
    redis_client.lpush(EVENTS.queue, poison)
    RedisEventSink(redis_client).emit_many([valid])
    report = consumer.run_once()
    assert (report.inserted, report.invalid) == (1, [poison])
    assert stored_event_ids(event_log) == {str(valid.id)}
    assert invalid_list(redis_client, EVENTS.invalid) == [poison]
    assert not redis_client.exists(EVENTS.queue, EVENTS.backup)


@PROPERTY
@given(garbage=st.lists(garbage_entries, min_size=1, max_size=4))
def test_property_garbage_in_the_event_queue_is_set_aside_and_later_events_are_stored(
    garbage: list[bytes], consumer: EventLogConsumer, redis_client: redis.Redis, event_log: Engine
) -> None:
    clean_redis(redis_client)
    with event_log.begin() as conn:
        conn.execute(text("DELETE FROM event_log"))
    valid = Event.new(EventType.ANSWERS_SAVED, record_id=1, actor="user:1", data={"ok": "中文"})
    redis_client.lpush(EVENTS.queue, *garbage)  # the garbage is consumed first
    RedisEventSink(redis_client).emit_many([valid])
    drain(consumer)
    assert stored_event_ids(event_log) == {str(valid.id)}
    assert sorted(invalid_list(redis_client, EVENTS.invalid)) == sorted(garbage)


def test_a_row_refused_despite_validation_is_bisected_out_of_the_batch(
    consumer: EventLogConsumer,
    redis_client: redis.Redis,
    event_log: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unknown bad data: with decoding made lenient, PostgreSQL (or the driver) refuses the rows."""
    strict = Event.decode

    def lenient(raw: bytes | str) -> Event:
        payload = json.loads(raw)
        if payload.get("type") == "lenient":
            return Event(uuid.UUID(payload["id"]), payload["actor"], datetime.now(UTC), data=payload["data"])
        return strict(raw)

    monkeypatch.setattr(Event, "decode", staticmethod(lenient))
    good = [Event.new(EventType.RECORD_CREATED, record_id=n) for n in range(1, 41)]
    poison = [
        json.dumps(
            {"id": str(uuid.uuid4()), "type": "lenient", "actor": "x", "data": {"n": "\ud800"}}
        ).encode(),
        json.dumps({"id": str(uuid.uuid4()), "type": "lenient", "actor": "t" * 100, "data": {}}).encode(),
        json.dumps({"id": str(uuid.uuid4()), "type": "lenient", "actor": "\udc00", "data": {}}).encode(),
    ]
    redis_client.lpush(
        EVENTS.queue, *[e.encode() for e in good[:20]], *poison, *[e.encode() for e in good[20:]]
    )
    report = consumer.run_once(batch=100)
    assert report.inserted == 40
    assert sorted(report.invalid) == sorted(poison)
    assert stored_event_ids(event_log) == {str(e.id) for e in good}
    assert sorted(invalid_list(redis_client, EVENTS.invalid)) == sorted(poison)
    assert not redis_client.exists(EVENTS.backup)


def test_a_connection_error_keeps_the_batch_for_the_next_cycle(
    redis_client: redis.Redis, session_factory: sessionmaker[Session], event_log: Engine
) -> None:
    sent = [Event.new(EventType.RECORD_CREATED, record_id=n) for n in range(1, 6)]
    RedisEventSink(redis_client).emit_many(sent)
    down_engine = make_engine(CLOSED_DATABASE_URL, pool_size=1)
    down = EventLogConsumer(redis_client, make_session_factory(down_engine))
    with pytest.raises(Exception, match=r"127\.0\.0\.1"):
        down.run_once()
    assert redis_client.llen(EVENTS.backup) == 5  # nothing set aside: the data was fine
    assert not redis_client.exists(EVENTS.invalid)
    down.close()
    down_engine.dispose()
    consumer = EventLogConsumer(redis_client, session_factory)
    assert consumer.run_once().replayed
    consumer.close()
    assert stored_event_ids(event_log) == {str(e.id) for e in sent}


# -- answers ---------------------------------------------------------------------------------

VALID_QUESTION = 101
#: Question ids of the questionnaire other than the valid one: garbage values go there.
OTHER_QUESTIONS = st.sampled_from(QUESTION_IDS[1:]).map(lambda q: str(q).encode())
#: Field names that are not a question id in canonical form.
bad_fields = st.binary(min_size=1, max_size=24).filter(lambda f: not re.fullmatch(rb"[1-9][0-9]{0,9}", f))
#: Values that are not "<1..5>:<1..MAX_SAVED_MS>".
bad_values = st.one_of(
    st.binary(max_size=40).filter(lambda v: re.search(rb"[^0-9:]", v) is not None or v.count(b":") != 1),
    st.builds(lambda ms: b"3:%d" % ms, st.integers(MAX_SAVED_MS + 1, 10**40) | st.just(0)),
    st.builds(lambda v: b"%d:1000" % v, st.integers(6, 10**25) | st.just(0)),
    st.sampled_from(
        [b"3:\xed\xa0\x80", b"\xff:1", b"3:01", b"03:1", b"3: 1", b"+3:1", b"3:1\n", "\u0663:1".encode()]
    ),
)
bad_answer_fields = st.one_of(
    st.tuples(bad_fields, st.binary(max_size=40)),
    st.tuples(OTHER_QUESTIONS, bad_values),
)


def hset_raw(client: redis.Redis, key: str, fields: dict[bytes, bytes]) -> None:
    client.hset(key, mapping=dict(fields.items()))


def test_invalid_utf8_and_an_out_of_range_time_no_longer_wedge_the_answer_flusher(
    engine: Engine, session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    """The cases seen on main: UnicodeDecodeError and OverflowError failed every cycle."""
    records = insert_records(engine, 3)
    garbage = {b"102": b"\xff\xfe:1", b"103": b"4:99999999999999999"}
    hset_raw(redis_client, KEYS.answers.item(records[0]), {b"101": b"3:%d" % BASE_MS, **garbage})
    for record_id in records[1:]:
        hset_raw(redis_client, KEYS.answers.item(record_id), {b"101": b"5:%d" % BASE_MS})
    redis_client.sadd(KEYS.answers.dirty, *records)
    flusher = AnswersFlusher(redis_client, session_factory)
    report = flusher.run_once()
    flusher.close()
    assert report.persisted == 3
    assert stored_answers(engine, records) == {
        records[0]: {101: 3},
        records[1]: {101: 5},
        records[2]: {101: 5},
    }
    kept = sorted(invalid_list(redis_client, KEYS.answers.invalid))
    assert kept == sorted(invalid_entry(records[0], f, v) for f, v in garbage.items())
    assert {parse_invalid_entry(entry) for entry in kept} == {(records[0], f, v) for f, v in garbage.items()}
    # Set aside means moved: the hash keeps only the answer, and nothing is dirty any more.
    assert redis_client.hgetall(KEYS.answers.item(records[0])) == {b"101": b"3:%d" % BASE_MS}
    assert not redis_client.exists(KEYS.answers.dirty, KEYS.answers.syncing)


@PROPERTY
@given(garbage=st.lists(bad_answer_fields, min_size=1, max_size=5, unique_by=lambda fv: fv[0]))
def test_property_garbage_in_an_answers_hash_is_set_aside_and_the_answer_stored(
    garbage: list[tuple[bytes, bytes]],
    engine: Engine,
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
) -> None:
    clean_redis(redis_client)
    (record_id,) = insert_records(engine, 1)
    hset_raw(redis_client, KEYS.answers.item(record_id), dict(garbage))
    # The valid answer comes after the garbage (a later save of the same record).
    hset_raw(redis_client, KEYS.answers.item(record_id), {b"101": b"4:%d" % BASE_MS})
    redis_client.sadd(KEYS.answers.dirty, record_id)
    flusher = AnswersFlusher(redis_client, session_factory)
    flusher.run_once()
    flusher.close()
    assert stored_answers(engine, [record_id]) == {record_id: {VALID_QUESTION: 4}}
    kept = [parse_invalid_entry(e) for e in invalid_list(redis_client, KEYS.answers.invalid)]
    assert sorted(kept) == sorted((record_id, f, v) for f, v in garbage)
    assert redis_client.hgetall(KEYS.answers.item(record_id)) == {b"101": b"4:%d" % BASE_MS}
    assert not redis_client.exists(KEYS.answers.dirty, KEYS.answers.syncing)


def test_an_answer_the_database_refuses_is_set_aside_alone(
    engine: Engine,
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the decoder made lenient (values outside 1..5 pass), the CHECK constraint refuses them."""
    import hotpath.answers_flusher as autosave_module

    def lenient(raw: dict[bytes, bytes]) -> tuple[dict[int, SavedAnswer], list[tuple[bytes, bytes]]]:
        out = {}
        for name, entry in raw.items():
            value, _, ms = entry.partition(b":")
            out[int(name)] = SavedAnswer(int(value), int(ms))
        return out, []

    monkeypatch.setattr(autosave_module, "decode_saved", lenient)
    records = insert_records(engine, 4)
    for i, record_id in enumerate(records):
        fields = {b"101": b"%d:%d" % (1 + i, BASE_MS), b"102": b"2:%d" % BASE_MS}
        if i == 2:
            fields[b"103"] = b"9:%d" % BASE_MS  # ck_answers_value
            fields[b"104"] = b"40000:%d" % BASE_MS  # not a smallint
        hset_raw(redis_client, KEYS.answers.item(record_id), fields)
    redis_client.sadd(KEYS.answers.dirty, *records)
    flusher = AnswersFlusher(redis_client, session_factory)
    report = flusher.run_once()
    flusher.close()
    assert report.persisted == 4
    assert stored_answers(engine, records) == {r: {101: 1 + i, 102: 2} for i, r in enumerate(records)}
    kept = sorted(parse_invalid_entry(e) for e in invalid_list(redis_client, KEYS.answers.invalid))
    assert kept == [(records[2], b"103", b"9:%d" % BASE_MS), (records[2], b"104", b"40000:%d" % BASE_MS)]


def test_a_key_that_is_not_a_hash_is_skipped(
    engine: Engine, session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    broken, fine = insert_records(engine, 2)
    redis_client.set(KEYS.answers.item(broken), "not a hash")
    hset_raw(redis_client, KEYS.answers.item(fine), {b"101": b"2:%d" % BASE_MS})
    redis_client.sadd(KEYS.answers.dirty, broken, fine, "007", "-3", "x")  # and malformed marks
    flusher = AnswersFlusher(redis_client, session_factory)
    assert flusher.run_once().persisted == 2
    flusher.close()
    assert stored_answers(engine, [fine]) == {fine: {101: 2}}
    assert not redis_client.exists(KEYS.answers.dirty, KEYS.answers.syncing)


# -- progress --------------------------------------------------------------------------------


def valid_state(updated_ms: int) -> dict[bytes, bytes]:
    return {b"q": b"105", b"n": b"5", b"a": b"%d" % updated_ms, b"t": b"%d" % updated_ms}


#: A state with one required field poisoned (or missing): it can never be written.
poisoned_states = st.tuples(
    st.sampled_from([b"q", b"n", b"a", b"t"]),
    st.one_of(
        st.binary(max_size=30).filter(lambda v: re.search(rb"[^0-9]", v) is not None),
        st.builds(lambda n: b"%d" % n, st.integers(MAX_SAVED_MS + 1, 10**30)),
        st.sampled_from([b"\xed\xa0\x80", b"\xff", b"-1", b"1e3", b"01", b" 1"]),
        st.none(),
    ),
).filter(lambda fv: not (fv[0] == b"q" and fv[1] in (None, b""))) | st.tuples(
    st.sampled_from([b"q", b"n"]),
    st.just(b"2147483648"),  # not an int4
)
extra_fields = st.dictionaries(
    st.binary(min_size=1, max_size=10).filter(lambda f: f not in (b"q", b"n", b"a", b"t")),
    st.binary(max_size=20),
    max_size=3,
)


def test_invalid_utf8_in_a_progress_state_no_longer_wedges_the_progress_flusher(
    engine: Engine, session_factory: sessionmaker[Session], redis_client: redis.Redis
) -> None:
    broken, fine = insert_records(engine, 2)
    bad = {**valid_state(BASE_MS), b"t": b"\xff\xfe"}
    hset_raw(redis_client, KEYS.progress.item(broken), bad)
    hset_raw(redis_client, KEYS.progress.item(fine), valid_state(BASE_MS))
    redis_client.sadd(KEYS.progress.dirty, broken, fine)
    flusher = ProgressFlusher(redis_client, session_factory)
    assert flusher.run_once().rows == 1
    flusher.close()
    assert progress_row(engine, fine)[:2] == (105, 5)
    assert progress_row(engine, broken)[:2] == (None, None)
    kept = sorted(parse_invalid_entry(e) for e in invalid_list(redis_client, KEYS.progress.invalid))
    assert kept == sorted((broken, f, v) for f, v in bad.items())
    assert not redis_client.exists(KEYS.progress.item(broken))  # every field moved out


@PROPERTY
@given(poison=poisoned_states, extra=extra_fields)
def test_property_garbage_in_progress_hashes_is_set_aside_and_valid_states_stored(
    poison: tuple[bytes, bytes | None],
    extra: dict[bytes, bytes],
    engine: Engine,
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
) -> None:
    clean_redis(redis_client)
    broken, fine = insert_records(engine, 2)
    name, value = poison
    bad = valid_state(BASE_MS)
    if value is None:
        del bad[name]
    else:
        bad[name] = value
    hset_raw(redis_client, KEYS.progress.item(broken), bad)
    hset_raw(redis_client, KEYS.progress.item(fine), {**valid_state(BASE_MS), **extra})
    redis_client.sadd(KEYS.progress.dirty, broken, fine)
    flusher = ProgressFlusher(redis_client, session_factory)
    flusher.run_once()
    flusher.close()
    assert progress_row(engine, fine)[:2] == (105, 5)
    assert progress_row(engine, broken)[:2] == (None, None)
    kept = sorted(parse_invalid_entry(e) for e in invalid_list(redis_client, KEYS.progress.invalid))
    expected = [(broken, f, v) for f, v in bad.items()] + [(fine, f, v) for f, v in extra.items()]
    assert kept == sorted(expected)
    assert redis_client.hgetall(KEYS.progress.item(fine)) == valid_state(BASE_MS)
    assert not redis_client.exists(KEYS.progress.dirty, KEYS.progress.syncing)


def test_a_state_the_database_refuses_is_set_aside_whole(
    engine: Engine,
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import hotpath.progress_flusher as progress_module

    def lenient(record_id: int, raw: dict[bytes, bytes]) -> tuple[ProgressState | None, list[Any]]:
        f = {k: int(v) for k, v in raw.items()}
        return ProgressState(record_id, f[b"q"], f[b"n"], f[b"a"], f[b"t"]), []

    monkeypatch.setattr(progress_module, "decode_state", lenient)
    records = insert_records(engine, 5)
    huge = {**valid_state(BASE_MS), b"n": b"%d" % 2**40}  # not an int4
    for record_id in records:
        hset_raw(
            redis_client,
            KEYS.progress.item(record_id),
            huge if record_id == records[3] else valid_state(BASE_MS),
        )
    redis_client.sadd(KEYS.progress.dirty, *records)
    flusher = ProgressFlusher(redis_client, session_factory)
    assert flusher.run_once().rows == 4
    flusher.close()
    kept = sorted(parse_invalid_entry(e) for e in invalid_list(redis_client, KEYS.progress.invalid))
    assert kept == sorted((records[3], f, v) for f, v in huge.items())
    assert [progress_row(engine, r)[1] for r in records] == [5, 5, 5, None, 5]
