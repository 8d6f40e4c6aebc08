"""The mini-program's API on the real PostgreSQL and Redis, with the real producer."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from config.settings import Settings
from redis_adapters.queues import REPORT_QUEUE_KEY
from redis_adapters.report_message import ReportQueueMessage
from scripts.faults import FaultProxy
from services.domain.questionnaire import load_questionnaire
from services.persistence.uow import UnitOfWork
from services.usecases import reports
from tests.support.envelope import data, error
from tests.support.records import RecordSpec
from tests.support.web_app import USER_PATH, Records
from web import create_app

Headers = Callable[[int], dict[str, str]]
ALICE, BOB = 1001, 2002


def all_answers(client: FlaskClient, headers: dict[str, str], value: int = 3) -> list[dict[str, int]]:
    questions = data(client.get(f"{USER_PATH}/questions", headers=headers))
    return [{"questionId": q["id"], "value": value} for q in questions]


def submitted_record(client: FlaskClient, headers: dict[str, str]) -> int:
    record_id = data(client.post(f"{USER_PATH}/createRecord", headers=headers))["id"]
    data(client.post(f"{USER_PATH}/startAssessment", json={"recordId": record_id}, headers=headers))
    body = {"recordId": record_id, "answers": all_answers(client, headers)}
    data(client.post(f"{USER_PATH}/submitAnswers", json=body, headers=headers))
    return int(record_id)


def test_create_and_start_a_record(client: FlaskClient, user_headers: Headers) -> None:
    alice = user_headers(ALICE)
    record = data(client.post(f"{USER_PATH}/createRecord", headers=alice))
    assert record["userId"] == ALICE
    assert (record["status"], record["statusText"]) == (1, "待测评")
    assert record["startedAt"] is None
    datetime.fromisoformat(record["createdAt"])
    started = data(
        client.post(f"{USER_PATH}/startAssessment", json={"recordId": record["id"]}, headers=alice)
    )
    assert (started["status"], started["statusText"]) == (2, "测评中")
    assert datetime.fromisoformat(started["startedAt"]).tzinfo is not None
    again = data(client.post(f"{USER_PATH}/startAssessment", json={"recordId": record["id"]}, headers=alice))
    assert again == started


def test_questions_are_listed_in_order(client: FlaskClient, user_headers: Headers) -> None:
    questions = data(client.get(f"{USER_PATH}/questions", headers=user_headers(ALICE)))
    assert questions
    assert set(questions[0]) == {"id", "dimensionCode", "dimensionName", "text", "sortOrder", "options"}
    assert len({q["id"] for q in questions}) == len(questions)
    scale = [{"value": o.value, "label": o.label} for o in load_questionnaire().scale]
    assert scale[0] == {"value": 1, "label": "非常不符合"}
    assert scale[-1] == {"value": 5, "label": "非常符合"}
    assert all(q["options"] == scale for q in questions)


def test_submit_returns_before_generation(
    client: FlaskClient, user_headers: Headers, records: Records, redis_client: redis.Redis
) -> None:
    """No worker runs: the answer comes back with the record in 3 and exactly one job queued."""
    alice = user_headers(ALICE)
    record_id = data(client.post(f"{USER_PATH}/createRecord", headers=alice))["id"]
    body = {"recordId": record_id, "answers": all_answers(client, alice)}
    result = data(client.post(f"{USER_PATH}/submitAnswers", json=body, headers=alice))
    assert result == {"recordId": record_id, "status": 3, "enqueued": True}
    assert records.status(record_id) == 3
    raw = redis_client.lrange(REPORT_QUEUE_KEY, 0, -1)
    assert len(raw) == 1
    message = ReportQueueMessage.decode(raw[0])
    assert (message.record_id, message.retry_count) == (record_id, 0)
    status = data(
        client.get(f"{USER_PATH}/resultStatus", query_string={"recordId": record_id}, headers=alice)
    )
    assert status == {
        "recordId": record_id,
        "status": 3,
        "statusText": "生成中",
        "description": status["description"],
    }
    error(client.get(f"{USER_PATH}/report", query_string={"recordId": record_id}, headers=alice), 409, 2005)
    # A second submission of the same record is refused and queues nothing more.
    error(client.post(f"{USER_PATH}/submitAnswers", json=body, headers=alice), 409, 2005)
    assert redis_client.llen(REPORT_QUEUE_KEY) == 1


def test_report_once_generated(client: FlaskClient, user_headers: Headers, uow: UnitOfWork) -> None:
    alice = user_headers(ALICE)
    record_id = submitted_record(client, alice)
    assert reports.generate_report(uow, record_id) == reports.GenerationOutcome.GENERATED
    status = data(
        client.get(f"{USER_PATH}/resultStatus", query_string={"recordId": record_id}, headers=alice)
    )
    assert (status["status"], status["statusText"]) == (4, "已完成")
    report = data(client.get(f"{USER_PATH}/report", query_string={"recordId": record_id}, headers=alice))
    assert report["recordId"] == record_id
    assert report["userId"] == ALICE
    assert [d["rank"] for d in report["dimensions"]] == sorted(d["rank"] for d in report["dimensions"])
    assert set(report["dimensions"][0]) == {
        "code",
        "name",
        "rawScore",
        "score",
        "rank",
        "level",
        "description",
        "interpretation",
        "suggestions",
    }
    assert report["topDimensions"]
    assert isinstance(report["summary"], str)
    datetime.fromisoformat(report["completedAt"])


def test_failed_generation_is_described(client: FlaskClient, user_headers: Headers, records: Records) -> None:
    (record_id,) = records.insert(RecordSpec(status=5, user_id=ALICE))
    status = data(
        client.get(
            f"{USER_PATH}/resultStatus", query_string={"recordId": record_id}, headers=user_headers(ALICE)
        )
    )
    assert status == {
        "recordId": record_id,
        "status": 5,
        "statusText": "生成失败",
        "description": "报告生成失败，请联系客服",
    }


def test_records_lists_own_live_records_newest_first(
    client: FlaskClient, user_headers: Headers, records: Records
) -> None:
    ids = records.insert(
        RecordSpec(status=1, user_id=ALICE),
        RecordSpec(status=4, user_id=ALICE),
        RecordSpec(status=2, user_id=BOB),
        RecordSpec(status=3, user_id=ALICE, deleted=True),
    )
    page = data(client.get(f"{USER_PATH}/records", headers=user_headers(ALICE)))
    listed = page["items"]
    assert [r["id"] for r in listed] == [ids[1], ids[0]]
    assert (page["total"], page["nextCursor"]) == (2, None)
    assert all(r["userId"] == ALICE for r in listed)
    assert [(r["statusText"], r["reportReady"]) for r in listed] == [("已完成", True), ("待测评", False)]
    one = data(
        client.get(f"{USER_PATH}/record", query_string={"recordId": ids[1]}, headers=user_headers(ALICE))
    )
    assert {key: one[key] for key in listed[0]} == listed[0]


def test_start_is_refused_after_submission(
    client: FlaskClient, user_headers: Headers, records: Records
) -> None:
    (record_id,) = records.insert(RecordSpec(status=3, user_id=ALICE))
    response = client.post(
        f"{USER_PATH}/startAssessment", json={"recordId": record_id}, headers=user_headers(ALICE)
    )
    error(response, 409, 2005)
    assert records.status(record_id) == 3


USER_RECORD_CALLS: list[tuple[str, str]] = [
    ("POST", "/startAssessment"),
    ("POST", "/submitAnswers"),
    ("GET", "/resultStatus"),
    ("GET", "/report"),
    ("GET", "/record"),
]


@pytest.mark.parametrize(("method", "path"), USER_RECORD_CALLS)
@pytest.mark.parametrize("owner_status", [1, 2, 3, 4, 5])
def test_someone_elses_record_is_not_found(
    client: FlaskClient,
    user_headers: Headers,
    records: Records,
    redis_client: redis.Redis,
    method: str,
    path: str,
    owner_status: int,
) -> None:
    (record_id,) = records.insert(RecordSpec(status=owner_status, user_id=ALICE, results=owner_status == 4))
    answers = [{"questionId": 1, "value": 3}]
    before = records.snapshot()
    if method == "POST":
        response = client.post(
            USER_PATH + path, json={"recordId": record_id, "answers": answers}, headers=user_headers(BOB)
        )
    else:
        response = client.get(
            USER_PATH + path, query_string={"recordId": record_id}, headers=user_headers(BOB)
        )
    assert error(response, 404, 3241) == "测评记录不存在"
    assert records.snapshot() == before
    assert redis_client.llen(REPORT_QUEUE_KEY) == 0
    assert data(client.get(f"{USER_PATH}/records", headers=user_headers(BOB)))["items"] == []


@pytest.mark.parametrize(("method", "path"), USER_RECORD_CALLS)
def test_deleted_or_missing_record_is_not_found(
    client: FlaskClient, user_headers: Headers, records: Records, method: str, path: str
) -> None:
    (deleted,) = records.insert(RecordSpec(status=2, user_id=ALICE, deleted=True))
    for record_id in (deleted, deleted + 1000, 2**63 - 1):
        body = {"recordId": record_id, "answers": [{"questionId": 1, "value": 3}]}
        if method == "POST":
            response = client.post(USER_PATH + path, json=body, headers=user_headers(ALICE))
        else:
            response = client.get(
                USER_PATH + path, query_string={"recordId": record_id}, headers=user_headers(ALICE)
            )
        error(response, 404, 3241)


def test_submit_with_redis_down_still_succeeds(
    redis_down_app: Flask, user_headers: Headers, records: Records, caplog: pytest.LogCaptureFixture
) -> None:
    """Seed 000: the answers are committed, the failure logged, the record stays in 3."""
    client = redis_down_app.test_client()
    alice = user_headers(ALICE)
    (record_id,) = records.insert(RecordSpec(status=2, user_id=ALICE))
    answers = all_answers(client, alice)
    body = {"recordId": record_id, "answers": answers}
    result = data(client.post(f"{USER_PATH}/submitAnswers", json=body, headers=alice))
    assert result == {"recordId": record_id, "status": 3, "enqueued": False}
    assert records.status(record_id) == 3
    assert len(records.snapshot([record_id])["answers"]) == len(answers)
    assert "could not be queued" in caplog.text


@pytest.fixture
def pg_proxy(settings: Settings) -> Iterator[FaultProxy]:
    proxy = FaultProxy(settings.database_url)
    try:
        yield proxy
    finally:
        proxy.close()


def test_a_submission_whose_commit_landed_with_its_reply_lost_answers_committed(
    settings: Settings,
    pg_proxy: FaultProxy,
    client: FlaskClient,
    redis_client: redis.Redis,
    user_headers: Headers,
    records: Records,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """PostgreSQL's connection lost after the COMMIT reached the server, before its reply: the
    submission is committed, so the call answers it (the record read again says so) and queues
    its job, instead of a 503 that a retry would turn into "当前状态不允许提交答案"."""
    app = create_app(settings.with_overrides(database_url=pg_proxy.url), redis_client=redis_client)
    alice = user_headers(ALICE)
    (record_id,) = records.insert(RecordSpec(status=2, user_id=ALICE))
    body = {"recordId": record_id, "answers": all_answers(client, alice)}
    pg_proxy.lose_reply(b"COMMIT", b"COMMIT\x00")  # the query, then its CommandComplete tag
    result = data(app.test_client().post(f"{USER_PATH}/submitAnswers", json=body, headers=alice))
    assert result == {"recordId": record_id, "status": 3, "enqueued": True}
    assert "connection lost with its commit in flight" in caplog.text  # the fault happened
    assert records.status(record_id) == 3
    queued = [
        ReportQueueMessage.decode(raw).record_id for raw in redis_client.lrange(REPORT_QUEUE_KEY, 0, -1)
    ]
    assert queued == [record_id]


def test_a_submission_whose_connection_is_lost_before_its_commit_is_refused_and_changes_nothing(
    settings: Settings,
    pg_proxy: FaultProxy,
    client: FlaskClient,
    redis_client: redis.Redis,
    user_headers: Headers,
    records: Records,
) -> None:
    """Lost before the COMMIT was sent (at the record's lock): nothing committed, 503, no job."""
    app = create_app(settings.with_overrides(database_url=pg_proxy.url), redis_client=redis_client)
    alice = user_headers(ALICE)
    (record_id,) = records.insert(RecordSpec(status=2, user_id=ALICE))
    body = {"recordId": record_id, "answers": all_answers(client, alice)}
    before = records.snapshot([record_id])
    pg_proxy.lose_reply(b"FOR UPDATE", b"")
    error(app.test_client().post(f"{USER_PATH}/submitAnswers", json=body, headers=alice), 503, 5003)
    assert records.snapshot([record_id]) == before
    assert redis_client.llen(REPORT_QUEUE_KEY) == 0


def test_incomplete_answers_are_refused_and_change_nothing(
    client: FlaskClient, user_headers: Headers, records: Records, redis_client: redis.Redis
) -> None:
    alice = user_headers(ALICE)
    (record_id,) = records.insert(RecordSpec(status=2, user_id=ALICE))
    answers = all_answers(client, alice)
    before = records.snapshot()
    for partial in (answers[:-1], [*answers[:-1], {"questionId": 2**31 - 1, "value": 3}]):
        response = client.post(
            f"{USER_PATH}/submitAnswers", json={"recordId": record_id, "answers": partial}, headers=alice
        )
        error(response, 400, 1001)
    assert records.snapshot() == before
    assert redis_client.llen(REPORT_QUEUE_KEY) == 0
