"""The operations endpoints of the admin API and the `flask queue` / `flask audit` CLI,
on the real PostgreSQL and Redis: dead letters, quarantine, audit, per-id outcomes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import dramatiq
import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from listbroker import RedisListBroker
from sqlalchemy import Engine, text

from config.settings import Settings
from redis_adapters.queues import (
    DEAD_LETTER_QUEUE_KEY,
    INVALID_META_KEY,
    INVALID_QUEUE_KEY,
    REPORT_JOBS_KEY,
    REPORT_QUEUE_KEY,
)
from tests.support.envelope import data, error
from tests.support.operations import dead_letter
from tests.support.processes import wait_until
from tests.support.records import RecordSpec
from tests.support.urls import CLOSED_DATABASE_URL
from tests.support.web_app import ADMIN_PATH, ADMIN_TOKEN, Records
from web import create_app
from web.auth import token_fingerprint

QUEUE = ADMIN_PATH + "/queue"
ADMIN = f"admin:{token_fingerprint(ADMIN_TOKEN)}"


@pytest.fixture
def audited(event_log: Engine) -> Engine:
    """An empty audit trail (the event log) around the test."""
    return event_log


def test_dead_letters_list_requeue_and_delete(
    client: FlaskClient,
    admin_headers: dict[str, str],
    records: Records,
    redis_client: redis.Redis,
    audited: Engine,
) -> None:
    failed, completed = records.insert(RecordSpec(status=5, results=True), RecordSpec(status=4, results=True))
    redis_client.lpush(DEAD_LETTER_QUEUE_KEY, dead_letter(completed), dead_letter(failed))
    listed = data(client.get(f"{QUEUE}/dead?limit=10", headers=admin_headers))
    assert (listed["total"], listed["offset"], listed["limit"]) == (2, 0, 10)
    assert [d["recordId"] for d in listed["items"]] == [failed, completed]
    assert set(listed["items"][0]) == {"messageId", "recordId", "attempts", "lastError", "deadAt", "raw"}
    first, second = (d["messageId"] for d in listed["items"])

    requeued = data(client.post(f"{QUEUE}/dead/requeue", json={"all": True}, headers=admin_headers))
    assert requeued["items"] == [
        {"id": first, "outcome": "requeued", "code": None, "reason": None},
        {"id": second, "outcome": "skipped", "code": 2005, "reason": requeued["items"][1]["reason"]},
    ]
    assert records.status(failed) == 3
    assert redis_client.hget(REPORT_JOBS_KEY, str(failed)) == b"1"
    deleted = data(client.post(f"{QUEUE}/dead/delete", json={"ids": [second]}, headers=admin_headers))
    assert deleted["items"] == [{"id": second, "outcome": "deleted", "code": None, "reason": None}]
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 0

    trail = data(client.get(f"{ADMIN_PATH}/audit", headers=admin_headers))
    assert [(e["action"], e["actor"], e["outcome"]) for e in trail["items"]] == [
        ("delete_dead", ADMIN, "ok"),
        ("requeue", ADMIN, "partial"),
    ]
    assert trail["items"][0]["credential"] == f"admin-token {token_fingerprint(ADMIN_TOKEN)}"
    assert ADMIN_TOKEN not in str(trail)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"ids": []},
        {"ids": "abc"},
        {"ids": [1]},
        {"ids": ["a", "a"]},
        {"ids": ["x" * 65]},
        {"all": True, "ids": ["a"]},
    ],
)
def test_requeue_refuses_malformed_bodies(
    client: FlaskClient, admin_headers: dict[str, str], body: dict[str, object], audited: Engine
) -> None:
    error(client.post(f"{QUEUE}/dead/requeue", json=body, headers=admin_headers), 400, 1001)


def test_a_payload_quarantined_by_the_worker_is_listed_with_why_and_when(
    report_broker: RedisListBroker,
    report_worker: dramatiq.Worker,
    client: FlaskClient,
    admin_headers: dict[str, str],
    redis_client: redis.Redis,
    audited: Engine,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker quarantines what it cannot read with why and when beside it (the Redis
    server's clock), which the admin API lists; the worker's log shows the payload as text;
    deleting it drops why and when with it."""
    before = redis_now(redis_client)
    redis_client.lpush(REPORT_QUEUE_KEY, b'{"RecordId":"x"}', "不是 JSON".encode())
    wait_until(lambda: redis_client.llen(INVALID_QUEUE_KEY) == 2, timeout=30, what="both quarantined")
    after = redis_now(redis_client)
    items = data(client.get(f"{QUEUE}/invalid", headers=admin_headers))["items"]
    assert set(items[0]) == {"key", "raw", "reason", "quarantinedAt"}
    by_raw = {i["raw"]: i for i in items}
    assert by_raw['{"RecordId":"x"}']["reason"] == "missing field(s) RetryCount, EnqueueTime"
    assert by_raw["不是 JSON"]["reason"].startswith("not JSON")
    for item in items:
        assert before <= datetime.fromisoformat(item["quarantinedAt"]) <= after
    assert "payload 不是 JSON" in caplog.text  # as text, not b'\\xe4\\xb8...'

    deleted = client.post(f"{QUEUE}/invalid/delete", json={"keys": [items[0]["key"]]}, headers=admin_headers)
    assert [i["outcome"] for i in data(deleted)["items"]] == ["deleted"]
    assert redis_client.hlen(INVALID_META_KEY) == 1
    assert data(client.post(f"{QUEUE}/invalid/purge", json={}, headers=admin_headers)) == {"purged": 1}
    assert not redis_client.exists(INVALID_QUEUE_KEY, INVALID_META_KEY)


def redis_now(client: redis.Redis) -> datetime:
    """The Redis server's clock (what the broker stamps a quarantine with), to the millisecond."""
    seconds, micros = client.time()
    return datetime.fromtimestamp(seconds + micros // 1000 / 1000, UTC)


def test_invalid_payloads_list_delete_purge(
    client: FlaskClient, admin_headers: dict[str, str], redis_client: redis.Redis, audited: Engine
) -> None:
    redis_client.lpush(INVALID_QUEUE_KEY, b"\xff not utf-8", b"{broken")
    items = data(client.get(f"{QUEUE}/invalid", headers=admin_headers))["items"]
    assert [i["raw"] for i in items] == ["{broken", "\\xff not utf-8"]
    answer = client.post(f"{QUEUE}/invalid/delete", json={"keys": [items[0]["key"]]}, headers=admin_headers)
    assert [i["outcome"] for i in data(answer)["items"]] == ["deleted"]
    assert data(client.post(f"{QUEUE}/invalid/purge", json={}, headers=admin_headers)) == {"purged": 1}
    assert redis_client.llen(INVALID_QUEUE_KEY) == 0
    actions = [e["action"] for e in data(client.get(f"{ADMIN_PATH}/audit", headers=admin_headers))["items"]]
    assert actions == ["purge_invalid", "delete_invalid"]


@pytest.mark.parametrize(
    "path", [f"{QUEUE}/dead", f"{QUEUE}/delayed", f"{QUEUE}/invalid", f"{ADMIN_PATH}/audit"]
)
def test_a_page_at_the_largest_offset_is_empty_not_an_error(
    client: FlaskClient, admin_headers: dict[str, str], redis_client: redis.Redis, audited: Engine, path: str
) -> None:
    """offset + limit - 1 does not fit Redis's 64-bit range index there: Redis refused the
    whole range and the list answered 503 (found by schemathesis once the document stated
    the maximum)."""
    redis_client.lpush(INVALID_QUEUE_KEY, b"junk")
    answer = client.get(path, query_string={"offset": str(2**63 - 1), "limit": "200"}, headers=admin_headers)
    assert data(answer)["items"] == []


def test_batch_regenerate_answers_each_ids_outcome_and_drops_dead_letters(
    client: FlaskClient,
    admin_headers: dict[str, str],
    records: Records,
    redis_client: redis.Redis,
    audited: Engine,
) -> None:
    failed, completed = records.insert(RecordSpec(status=5, results=True), RecordSpec(status=4, results=True))
    redis_client.lpush(DEAD_LETTER_QUEUE_KEY, dead_letter(failed))
    answer = data(
        client.post(
            f"{ADMIN_PATH}/assessmentRecord/batchRegenerateReport",
            json={"ids": [failed, completed, 99999]},
            headers=admin_headers,
        )
    )
    assert (answer["successCount"], answer["skippedCount"]) == (1, 2)
    assert [(i["id"], i["outcome"], i["code"]) for i in answer["items"]] == [
        (failed, "regenerated", None),
        (completed, "skipped", 2005),
        (99999, "skipped", 3241),
    ]
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 0
    [entry] = data(client.get(f"{ADMIN_PATH}/audit?action=batch_regenerate", headers=admin_headers))["items"]
    assert (entry["ids"], entry["outcome"]) == ([failed, completed, 99999], "partial")


def test_audit_times_without_offset_are_read_in_the_admin_time_zone(
    client: FlaskClient, admin_headers: dict[str, str], audited: Engine
) -> None:
    """ADMIN_TIMEZONE defaults to Asia/Shanghai (UTC+8): a naive time is a wall clock there."""
    client.post(f"{QUEUE}/invalid/purge", json={}, headers=admin_headers)
    soon = datetime.now(UTC) + timedelta(minutes=1)

    def total(until: str) -> int:
        answer = client.get(f"{ADMIN_PATH}/audit", query_string={"until": until}, headers=admin_headers)
        return int(data(answer)["total"])

    shanghai_wall_clock = soon.astimezone(ZoneInfo("Asia/Shanghai")).replace(tzinfo=None)
    utc_wall_clock = soon.replace(tzinfo=None)
    assert total(shanghai_wall_clock.isoformat()) == 1
    assert total(utc_wall_clock.isoformat()) == 0  # read as 8 hours earlier than meant in UTC
    assert total(utc_wall_clock.isoformat() + "Z") == 1  # an explicit offset wins


def test_actions_are_refused_when_their_audit_cannot_be_written(
    settings: Settings, admin_headers: dict[str, str], redis_client: redis.Redis, records: Records
) -> None:
    """PostgreSQL down: 503 and nothing done, even though Redis could have done it."""
    app = create_app(settings.with_overrides(database_url=CLOSED_DATABASE_URL), redis_client=redis_client)
    client = app.test_client()
    redis_client.lpush(INVALID_QUEUE_KEY, b"junk")
    redis_client.lpush(DEAD_LETTER_QUEUE_KEY, dead_letter(1))
    error(client.post(f"{QUEUE}/invalid/purge", json={}, headers=admin_headers), 503, 5003)
    error(client.post(f"{QUEUE}/dead/requeue", json={"all": True}, headers=admin_headers), 503, 5003)
    assert (redis_client.llen(INVALID_QUEUE_KEY), redis_client.llen(DEAD_LETTER_QUEUE_KEY)) == (1, 1)
    assert redis_client.llen(REPORT_QUEUE_KEY) == 0


# -- the CLI ---------------------------------------------------------------------------------


def test_cli_queue_commands(
    app: Flask, records: Records, redis_client: redis.Redis, audited: Engine, engine: Engine
) -> None:
    runner = app.test_cli_runner()
    (failed,) = records.insert(RecordSpec(status=5, results=True))
    redis_client.lpush(DEAD_LETTER_QUEUE_KEY, dead_letter(failed), b"{unreadable")
    redis_client.lpush(INVALID_QUEUE_KEY, b"junk")

    stats = runner.invoke(args=["queue", "stats"])
    assert stats.exit_code == 0, stats.output
    lines = stats.output.strip().split("\n")
    assert lines[0].split() == ["queue", "queued", "delayed", "in_flight", "dead", "invalid"]
    assert [line.split() for line in lines[1:]] == [
        ["report", "0", "0", "0", "2", "1"],
        ["admin", "0", "0", "0", "0", "0"],
    ]

    dead = runner.invoke(args=["queue", "dead"])
    assert dead.exit_code == 0, dead.output
    header, *rows, footer = dead.output.strip().split("\n")
    assert header.split() == ["id", "record", "attempts", "dead_at", "last_error"]
    assert footer == "2 of 2 dead letter(s) from offset 0"
    unreadable_id, readable_id = (row.split()[0] for row in rows)
    assert rows[1].split()[1] == str(failed)

    assert runner.invoke(args=["queue", "requeue"]).exit_code == 2  # IDS or --all
    requeue = runner.invoke(args=["queue", "requeue", readable_id])
    assert requeue.exit_code == 0, requeue.output
    assert requeue.output.split("\n")[1].split() == [readable_id, "requeued", "-", "-"]
    assert records.status(failed) == 3

    delete = runner.invoke(args=["queue", "delete-dead", unreadable_id])
    assert delete.output.split("\n")[1].split()[:2] == [unreadable_id, "deleted"]
    invalid = runner.invoke(args=["queue", "invalid"])
    assert invalid.output.split("\n")[1].split()[1] == "junk"
    assert runner.invoke(args=["queue", "purge-invalid"], input="n\n").exit_code == 1
    purge = runner.invoke(args=["queue", "purge-invalid", "--yes"])
    assert purge.output.strip() == "1 invalid payload(s) purged"
    assert (redis_client.llen(DEAD_LETTER_QUEUE_KEY), redis_client.llen(INVALID_QUEUE_KEY)) == (0, 0)

    trail = runner.invoke(args=["audit", "--action", "requeue"])
    assert trail.exit_code == 0, trail.output
    header, row, footer = trail.output.strip().split("\n")
    assert header.split() == ["at", "actor", "credential", "action", "ids", "outcome", "detail"]
    assert row.split()[1].startswith("cli:")
    assert f" requeue  {readable_id}  ok " in row
    assert footer == "1 of 1 audit entries from offset 0"
    query = text("SELECT DISTINCT actor FROM event_log WHERE event_type LIKE 'admin.%'")
    with engine.connect() as conn:
        actors = list(conn.execute(query).scalars())
    assert len(actors) == 1
    assert actors[0].startswith("cli:")


def test_cli_reports_a_refusal_with_its_code(settings: Settings, redis_client: redis.Redis) -> None:
    app = create_app(settings.with_overrides(database_url=CLOSED_DATABASE_URL), redis_client=redis_client)
    result = app.test_cli_runner().invoke(args=["queue", "purge-invalid", "--yes"])
    assert result.exit_code == 1
    assert "database unavailable, nothing done" in result.output
