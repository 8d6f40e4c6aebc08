"""saveAnswers, submission after autosave, and the admin's event log, over HTTP."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from hotpath.answers_flusher import AnswersFlusher
from hotpath.eventlog_consumer import EventLogConsumer
from redis_adapters.keyspace import AutosaveKeys, EventLogKeys
from redis_adapters.queues import REPORT_QUEUE_KEY
from tests.support.envelope import data, error
from tests.support.hotpath import QUESTION_IDS, stored_answers
from tests.support.records import RecordSpec
from tests.support.redis_keys import as_bytes
from tests.support.web_app import ADMIN_PATH, ADMIN_TOKEN, USER_PATH, Records

Headers = Callable[[int], dict[str, str]]
ALICE, BOB = 1001, 2002
KEYS = AutosaveKeys.default()


def answers(pairs: dict[int, int]) -> list[dict[str, int]]:
    return [{"questionId": q, "value": v} for q, v in pairs.items()]


def started_record(client: FlaskClient, headers: dict[str, str]) -> int:
    record_id = int(data(client.post(f"{USER_PATH}/createRecord", headers=headers))["id"])
    data(client.post(f"{USER_PATH}/startAssessment", json={"recordId": record_id}, headers=headers))
    return record_id


def save(client: FlaskClient, headers: dict[str, str], record_id: int, pairs: dict[int, int]) -> Any:
    return client.post(
        f"{USER_PATH}/saveAnswers", json={"recordId": record_id, "answers": answers(pairs)}, headers=headers
    )


@pytest.fixture
def flush(redis_client: redis.Redis, session_factory: sessionmaker[Session]) -> Callable[[], None]:
    flusher = AnswersFlusher(redis_client, session_factory)

    def run() -> None:
        flusher.run_once()

    return run


def test_save_answers_goes_to_redis_and_reaches_the_database_at_the_flush(
    client: FlaskClient, user_headers: Headers, engine: Engine, flush: Callable[[], None]
) -> None:
    alice = user_headers(ALICE)
    record_id = started_record(client, alice)
    first = data(save(client, alice, record_id, {101: 3, 102: 4}))
    assert {k: first[k] for k in ("recordId", "saved", "answeredCount")} == {
        "recordId": record_id,
        "saved": 2,
        "answeredCount": 2,
    }
    assert data(save(client, alice, record_id, {102: 5, 103: 1}))["answeredCount"] == 3
    assert stored_answers(engine, [record_id]) == {record_id: {}}  # no database write before a flush
    flush()
    assert stored_answers(engine, [record_id]) == {record_id: {101: 3, 102: 5, 103: 1}}


def test_a_record_started_elsewhere_is_looked_up_once(
    client: FlaskClient, user_headers: Headers, records: Records, redis_client: redis.Redis
) -> None:
    (record_id,) = records.insert(RecordSpec(status=2, user_id=ALICE))
    assert not redis_client.exists(KEYS.record(record_id))
    data(save(client, user_headers(ALICE), record_id, {101: 2}))
    assert redis_client.hgetall(KEYS.record(record_id)) == {b"user": str(ALICE).encode(), b"status": b"2"}


@pytest.mark.parametrize("cached", [True, False])
def test_someone_elses_record_is_not_found(
    client: FlaskClient, user_headers: Headers, records: Records, redis_client: redis.Redis, cached: bool
) -> None:
    (record_id,) = records.insert(RecordSpec(status=2, user_id=ALICE))
    if cached:
        data(save(client, user_headers(ALICE), record_id, {101: 2}))
    assert error(save(client, user_headers(BOB), record_id, {101: 5}), 404, 3241) == "测评记录不存在"
    stored = redis_client.hget(KEYS.answers.item(record_id), "101")
    if cached:
        assert stored is not None
        assert as_bytes(stored).startswith(b"2:")
    else:
        assert stored is None


@pytest.mark.parametrize("status", [1, 3, 4, 5])
def test_a_record_not_in_progress_is_refused(
    client: FlaskClient, user_headers: Headers, records: Records, redis_client: redis.Redis, status: int
) -> None:
    (record_id,) = records.insert(RecordSpec(status=status, user_id=ALICE, results=status == 4))
    assert (
        error(save(client, user_headers(ALICE), record_id, {101: 2}), 409, 2005) == "当前状态不允许保存答案"
    )
    assert not redis_client.exists(KEYS.answers.item(record_id), KEYS.answers.dirty)


def test_deleted_or_missing_records_are_not_found(
    client: FlaskClient, user_headers: Headers, records: Records, admin_headers: dict[str, str]
) -> None:
    alice = user_headers(ALICE)
    record_id = started_record(client, alice)
    data(save(client, alice, record_id, {101: 2}))  # cached as in progress
    data(client.post(f"{ADMIN_PATH}/assessmentRecord/delete", json={"id": record_id}, headers=admin_headers))
    for missing in (record_id, record_id + 1000, 2**63 - 1):
        error(save(client, alice, missing, {101: 2}), 404, 3241)


def test_submit_after_autosave_with_a_partial_body(
    client: FlaskClient,
    user_headers: Headers,
    engine: Engine,
    redis_client: redis.Redis,
    flush: Callable[[], None],
) -> None:
    alice = user_headers(ALICE)
    record_id = started_record(client, alice)
    expected = {q: 1 + q % 5 for q in QUESTION_IDS}
    first_half, second_half = QUESTION_IDS[:20], QUESTION_IDS[20:-3]
    data(save(client, alice, record_id, {q: 5 for q in first_half}))
    flush()  # some answers are in the database already...
    data(save(client, alice, record_id, {q: expected[q] for q in first_half[:10]}))  # ...then changed
    data(save(client, alice, record_id, {q: expected[q] for q in second_half}))  # ...or only in Redis
    body = {q: expected[q] for q in [*first_half[10:], *QUESTION_IDS[-3:]]}  # the rest, and overrides
    result = data(
        client.post(
            f"{USER_PATH}/submitAnswers",
            json={"recordId": record_id, "answers": answers(body)},
            headers=alice,
        )
    )
    assert result == {"recordId": record_id, "status": 3, "enqueued": True}
    assert stored_answers(engine, [record_id]) == {record_id: expected}
    assert redis_client.llen(REPORT_QUEUE_KEY) == 1
    # The autosave is gone and the record is closed to saves.
    assert not redis_client.exists(KEYS.answers.item(record_id), KEYS.progress.item(record_id))
    error(save(client, alice, record_id, {101: 1}), 409, 2005)
    flush()
    assert stored_answers(engine, [record_id]) == {record_id: expected}


def test_submit_with_an_empty_body_when_everything_was_saved(
    client: FlaskClient, user_headers: Headers, engine: Engine
) -> None:
    alice = user_headers(ALICE)
    record_id = started_record(client, alice)
    data(save(client, alice, record_id, dict.fromkeys(QUESTION_IDS, 2)))
    result = data(client.post(f"{USER_PATH}/submitAnswers", json={"recordId": record_id}, headers=alice))
    assert result["status"] == 3
    assert stored_answers(engine, [record_id]) == {record_id: dict.fromkeys(QUESTION_IDS, 2)}


def test_an_incomplete_submission_changes_nothing_and_saves_resume(
    client: FlaskClient, user_headers: Headers, engine: Engine, records: Records, redis_client: redis.Redis
) -> None:
    alice = user_headers(ALICE)
    record_id = started_record(client, alice)
    data(save(client, alice, record_id, {101: 2}))
    before = records.snapshot([record_id])
    response = client.post(
        f"{USER_PATH}/submitAnswers",
        json={"recordId": record_id, "answers": answers({102: 3})},
        headers=alice,
    )
    assert "还有题目未作答" in error(response, 400, 1001)
    assert records.snapshot([record_id]) == before
    assert redis_client.llen(REPORT_QUEUE_KEY) == 0
    data(save(client, alice, record_id, {103: 4}))  # the seal was lifted


def test_a_partial_submission_with_redis_down_is_refused(
    redis_down_app: Flask, user_headers: Headers, records: Records
) -> None:
    (record_id,) = records.insert(RecordSpec(status=2, user_id=ALICE))
    client = redis_down_app.test_client()
    body = {"recordId": record_id, "answers": answers({101: 3})}
    message = error(
        client.post(f"{USER_PATH}/submitAnswers", json=body, headers=user_headers(ALICE)), 503, 5003
    )
    assert "提交全部答案" in message
    assert records.status(record_id) == 2
    error(save(client, user_headers(ALICE), record_id, {101: 3}), 503, 5003)


# -- the event log ---------------------------------------------------------------------------


def test_the_admin_reads_a_records_event_log(
    app: Flask,
    client: FlaskClient,
    user_headers: Headers,
    admin_headers: dict[str, str],
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    event_log: Engine,
) -> None:
    alice = user_headers(ALICE)
    record_id = started_record(client, alice)
    data(save(client, alice, record_id, {101: 3}))
    body = {"recordId": record_id, "answers": answers(dict.fromkeys(QUESTION_IDS, 4))}
    data(client.post(f"{USER_PATH}/submitAnswers", json=body, headers=alice))
    data(
        client.post(
            f"{ADMIN_PATH}/assessmentRecord/regenerateReport", json={"id": record_id}, headers=admin_headers
        )
    )
    data(
        client.post(
            f"{ADMIN_PATH}/assessmentRecord/batchRegenerateReport",
            json={"ids": [record_id, 999]},
            headers=admin_headers,
        )
    )
    consumer = EventLogConsumer(redis_client, session_factory)
    while consumer.run_once().taken:
        pass
    assert not redis_client.exists(EventLogKeys().queue)

    url = f"{ADMIN_PATH}/assessmentRecord/events"
    page = data(client.get(url, query_string={"id": record_id}, headers=admin_headers))
    assert page["total"] == 6
    kinds = [e["eventType"] for e in page["items"]]
    assert kinds == [
        "record.created",
        "record.started",
        "answers.saved",
        "answers.submitted",
        "report.regenerated",
        "report.regenerated",
    ]
    fingerprint = hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest()[:12]
    actors = [e["actor"] for e in page["items"]]
    assert actors == [f"user:{ALICE}"] * 4 + [f"admin:{fingerprint}"] * 2
    assert ADMIN_TOKEN not in str(page)
    assert page["items"][2]["data"] == {"questionIds": [101], "answeredCount": 1}
    assert [e["data"].get("batch") for e in page["items"][4:]] == [False, True]
    assert {e["recordId"] for e in page["items"]} == {record_id}
    second = data(
        client.get(url, query_string={"id": record_id, "page": 2, "pageSize": 4}, headers=admin_headers)
    )
    assert [e["id"] for e in second["items"]] == [e["id"] for e in page["items"][4:]]
    assert error(client.get(url, query_string={"id": record_id + 1000}, headers=admin_headers), 404, 3241)
