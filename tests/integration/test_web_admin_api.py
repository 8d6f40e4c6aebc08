"""The admin API and the probes on the real PostgreSQL and Redis, with the real producer."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Engine, text

from config.settings import Settings
from redis_adapters.keyspace import Keyspace
from redis_adapters.queues import (
    DEAD_LETTER_QUEUE_KEY,
    INVALID_QUEUE_KEY,
    REPORT_DELAYED_KEY,
    REPORT_QUEUE_KEY,
)
from redis_adapters.report_queue import RedisReportQueue
from tests.support.envelope import data, error, json_body
from tests.support.operations import dead_letter, delayed_retry
from tests.support.records import RecordSpec
from tests.support.urls import CLOSED_DATABASE_URL
from tests.support.web_app import ADMIN_PATH, USER_PATH, Records
from web import create_app

Headers = Callable[[int], dict[str, str]]
RECORDS = ADMIN_PATH + "/assessmentRecord"


# -- regeneration: the cases the properties leave out -----------------------------------


def test_regenerate_missing_or_deleted_record_is_3241(
    client: FlaskClient, admin_headers: dict[str, str], records: Records, redis_client: redis.Redis
) -> None:
    (deleted,) = records.insert(RecordSpec(status=5, deleted=True, results=True))
    before = records.snapshot()
    for record_id in (deleted, deleted + 1, 2**63 - 1):
        response = client.post(f"{RECORDS}/regenerateReport", json={"id": record_id}, headers=admin_headers)
        assert error(response, 404, 3241) == "测评记录不存在"
    assert records.snapshot() == before
    assert redis_client.llen(REPORT_QUEUE_KEY) == 0


def test_batch_of_only_ineligible_ids_succeeds_with_all_skipped(
    client: FlaskClient, admin_headers: dict[str, str], records: Records, redis_client: redis.Redis
) -> None:
    ids = records.insert(
        RecordSpec(status=1), RecordSpec(status=4, results=True), RecordSpec(status=3, deleted=True)
    )
    before = records.snapshot()
    response = client.post(
        f"{RECORDS}/batchRegenerateReport", json={"ids": [*ids, 99999]}, headers=admin_headers
    )
    answer = data(response)
    assert (answer["successCount"], answer["skippedCount"]) == (0, 4)
    assert [(i["id"], i["outcome"], i["code"]) for i in answer["items"]] == [
        (ids[0], "skipped", 2005),
        (ids[1], "skipped", 2005),
        (ids[2], "skipped", 3241),
        (99999, "skipped", 3241),
    ]
    assert records.snapshot() == before
    assert redis_client.llen(REPORT_QUEUE_KEY) == 0


@pytest.mark.usefixtures("event_log")
def test_regenerate_with_redis_down_is_503_and_leaves_the_record_in_3(
    settings: Settings, admin_headers: dict[str, str], redis_down_app: Flask, records: Records, engine: Engine
) -> None:
    (record_id,) = records.insert(RecordSpec(status=5, results=True))
    client = redis_down_app.test_client()
    response = client.post(f"{RECORDS}/regenerateReport", json={"id": record_id}, headers=admin_headers)
    message = error(response, 503, 5003)
    assert "127.0.0.1" not in message  # internals are logged, not shown
    # The services commit the reset before queueing: the record can be regenerated again later.
    assert records.status(record_id) == 3
    batch = client.post(
        f"{RECORDS}/batchRegenerateReport", json={"ids": [record_id, 42]}, headers=admin_headers
    )
    answer = data(batch)
    assert (answer["successCount"], answer["skippedCount"]) == (0, 2)
    assert [(i["outcome"], i["code"]) for i in answer["items"]] == [("skipped", 5003), ("skipped", 3241)]
    # Each reset happened (the reconciler queues the job), so the record's timeline shows it
    # (the event sink writes to the database while Redis is down). Found by the soak: a record
    # went from 5 to a report with no regeneration in its timeline.
    with engine.connect() as conn:
        logged = (
            conn.execute(
                text(
                    "SELECT data FROM event_log WHERE record_id = :id AND event_type = 'report.regenerated'"
                    " ORDER BY occurred_at"
                ),
                {"id": record_id},
            )
            .scalars()
            .all()
        )
    assert [(d["batch"], d["enqueued"]) for d in logged] == [(False, False), (True, False)]


# -- the record list ---------------------------------------------------------------------


@pytest.fixture
def listed(records: Records, engine: Engine) -> list[int]:
    """Six records of two users, created a day apart (oldest first)."""
    ids = records.insert(
        RecordSpec(status=1, user_id=10),
        RecordSpec(status=2, user_id=10),
        RecordSpec(status=3, user_id=20),
        RecordSpec(status=4, user_id=20, results=True),
        RecordSpec(status=5, user_id=10),
        RecordSpec(status=5, user_id=20, deleted=True),
    )
    with engine.begin() as conn:
        for days, record_id in enumerate(reversed(ids)):
            conn.execute(
                text("UPDATE assessment_records SET created_at = :t WHERE id = :id"),
                {"t": datetime(2025, 1, 20, tzinfo=UTC) - timedelta(days=days), "id": record_id},
            )
    return ids


def page(client: FlaskClient, headers: dict[str, str], **query: object) -> Any:
    return data(client.get(f"{RECORDS}/list", query_string=query, headers=headers))


def test_list_shows_rows_newest_first(
    client: FlaskClient, admin_headers: dict[str, str], listed: list[int]
) -> None:
    result = page(client, admin_headers)
    assert (result["total"], result["page"], result["pageSize"]) == (5, 1, 20)
    assert [r["id"] for r in result["items"]] == list(reversed(listed[:5]))
    newest = result["items"][0]
    assert set(newest) == {
        "id",
        "userId",
        "status",
        "statusName",
        "createdAt",
        "submittedAt",
        "completedAt",
        "isDeleted",
    }
    assert (newest["status"], newest["statusName"], newest["isDeleted"]) == (5, "生成失败", False)
    assert datetime.fromisoformat(newest["createdAt"]) == datetime(2025, 1, 19, tzinfo=UTC)


def test_list_filters(client: FlaskClient, admin_headers: dict[str, str], listed: list[int]) -> None:
    def ids(**query: object) -> list[int]:
        return [r["id"] for r in page(client, admin_headers, **query)["items"]]

    assert ids(status=5) == [listed[4]]
    assert ids(status=5, includeDeleted="true") == [listed[5], listed[4]]
    assert ids(userId=20) == [listed[3], listed[2]]
    assert ids(userId=20, includeDeleted="1") == [listed[5], listed[3], listed[2]]
    assert ids(userId=999) == []
    # Half-open range: 2025-01-16 <= created_at < 2025-01-18 holds the records of the 16th and 17th.
    assert ids(createdFrom="2025-01-16", createdTo="2025-01-18T00:00:00Z") == [listed[2], listed[1]]
    assert ids(createdFrom="2025-01-16T08:00:00+08:00", createdTo="2025-01-17T08:00:00+08:00") == [listed[1]]


def test_list_pages(client: FlaskClient, admin_headers: dict[str, str], listed: list[int]) -> None:
    first = page(client, admin_headers, pageSize=2)
    third = page(client, admin_headers, pageSize=2, page=3)
    beyond = page(client, admin_headers, pageSize=2, page=2**31 - 1)
    assert [r["id"] for r in first["items"]] == [listed[4], listed[3]]
    assert [r["id"] for r in third["items"]] == [listed[0]]
    assert (beyond["items"], beyond["total"]) == ([], 5)


# -- soft delete -------------------------------------------------------------------------


def test_soft_delete(
    client: FlaskClient, admin_headers: dict[str, str], user_headers: Headers, records: Records
) -> None:
    (record_id,) = records.insert(RecordSpec(status=5, user_id=7))
    assert data(client.post(f"{RECORDS}/delete", json={"id": record_id}, headers=admin_headers)) is None
    assert len(records.snapshot([record_id])["records"]) == 1  # soft: the row stays
    error(client.post(f"{RECORDS}/delete", json={"id": record_id}, headers=admin_headers), 404, 3241)
    error(
        client.post(f"{RECORDS}/regenerateReport", json={"id": record_id}, headers=admin_headers), 404, 3241
    )
    user_view = client.get(
        f"{USER_PATH}/resultStatus", query_string={"recordId": record_id}, headers=user_headers(7)
    )
    error(user_view, 404, 3241)
    assert page(client, admin_headers)["total"] == 0
    (row,) = page(client, admin_headers, includeDeleted="true")["items"]
    assert (row["id"], row["isDeleted"], row["status"]) == (record_id, True, 5)


# -- queue figures and probes ------------------------------------------------------------


def test_queue_stats(client: FlaskClient, admin_headers: dict[str, str], redis_client: redis.Redis) -> None:
    empty = {"queued": 0, "dead": 0, "delayed": 0, "inFlight": 0, "invalid": 0}
    assert data(client.get(f"{ADMIN_PATH}/queue/stats", headers=admin_headers)) == {
        **empty,
        "queues": {"report": empty, "admin": empty},
    }
    RedisReportQueue(redis_client).enqueue_many([1, 2, 3])
    redis_client.lpush(DEAD_LETTER_QUEUE_KEY, dead_letter(4), dead_letter(5))
    redis_client.zadd(REPORT_DELAYED_KEY, delayed_retry(6, 1, int(time.time() * 1000) + 10_000))
    redis_client.lpush(INVALID_QUEUE_KEY, "g")
    redis_client.lpush(Keyspace.of().admin.queue, "h")
    stats = data(client.get(f"{ADMIN_PATH}/queue/stats", headers=admin_headers))
    report = {"queued": 3, "dead": 2, "delayed": 1, "inFlight": 0, "invalid": 1}
    # The report queue's figures at the top (as before), and every queue's under `queues`.
    assert stats == {**report, "queues": {"report": report, "admin": {**empty, "queued": 1}}}


def test_queue_stats_with_redis_down_is_503(redis_down_app: Flask, admin_headers: dict[str, str]) -> None:
    response = redis_down_app.test_client().get(f"{ADMIN_PATH}/queue/stats", headers=admin_headers)
    error(response, 503, 5003)


def test_readyz(client: FlaskClient) -> None:
    assert data(client.get("/readyz")) == {"database": "ok", "redis": "ok"}
    assert data(client.get("/healthz")) == {"status": "ok"}


def test_readyz_names_redis_when_it_is_down(redis_down_app: Flask) -> None:
    response = redis_down_app.test_client().get("/readyz")
    assert response.status_code == 503
    assert json_body(response)["data"] == {"database": "ok", "redis": "unavailable"}
    assert json_body(response)["message"] == "not ready: redis"


def test_readyz_names_the_database_when_it_is_down(settings: Settings, redis_client: redis.Redis) -> None:
    app = create_app(settings.with_overrides(database_url=CLOSED_DATABASE_URL), redis_client=redis_client)
    response = app.test_client().get("/readyz")
    assert response.status_code == 503
    assert json_body(response)["data"] == {"database": "unavailable", "redis": "ok"}
    assert json_body(response)["message"] == "not ready: database"
