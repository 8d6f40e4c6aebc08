"""The wait of a queue's oldest job reads the same in /metrics, on the console and in its alarm.

Each case puts jobs in a queue of the real Redis exactly as its producer writes them (the
report queue: the .NET wire format, with and without a fraction and an offset, at the
calendar's edges; the admin queue: Dramatiq's encoding, as the task store writes it), then
reads the wait through the three: the web's /metrics gauge, the console's pipeline health
(what the overview shows) and its alarms. This host's time zone is Asia/Shanghai here, so a
time written without an offset (the producer's local time) is told apart from UTC.

Each reading is its own clock's `now` minus the enqueue time: the test brackets the readings
with the clock and asserts each within the bracket, not a duration.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
import redis
from flask import Flask
from listbroker import DramatiqCodec
from prometheus_client.parser import text_string_to_metric_families

from config.settings import Settings
from redis_adapters.keyspace import Keyspace
from redis_adapters.queues import ADMIN_QUEUE_NAME, REPORT_QUEUE_NAME
from redis_adapters.task_store import task_message
from web.console.context import pipeline_health

SHANGHAI = ZoneInfo("Asia/Shanghai")
KEYS = Keyspace.of()
#: Slack for float rounding between the product's epoch seconds and the test's.
EPSILON_S = 1e-3


def net_job(record_id: int, enqueue_time: str) -> bytes:
    """A report job as the .NET producer writes it (json.dumps' default separators)."""
    return json.dumps({"RecordId": record_id, "RetryCount": 0, "EnqueueTime": enqueue_time}).encode()


def admin_task(task_id: str, enqueued_ms: int) -> bytes:
    """An admin task as the task store writes it (Dramatiq's encoding), enqueued at `enqueued_ms`."""
    return DramatiqCodec().encode(task_message(task_id).copy(message_timestamp=enqueued_ms))


@dataclass(frozen=True)
class Case:
    queue: str
    #: The oldest job (the consumer's end of the list).
    oldest: bytes
    #: When its producer meant it was enqueued (epoch seconds); None: no wait can be read.
    enqueued_s: float | None


def at(year: int, month: int, day: int, hour: int, minute: int, tz: ZoneInfo = SHANGHAI) -> float:
    return datetime(year, month, day, hour, minute, tzinfo=tz).timestamp()


CASES = {
    "net, no fraction, no offset (local time)": Case(
        REPORT_QUEUE_NAME, net_job(1, "2025-01-15T10:30:00"), at(2025, 1, 15, 10, 30)
    ),
    "net, seven-digit fraction, no offset": Case(
        REPORT_QUEUE_NAME,
        net_job(2, "2025-01-15T10:30:00.1234567"),
        at(2025, 1, 15, 10, 30) + 0.123456,
    ),
    "net, fraction and offset": Case(
        REPORT_QUEUE_NAME,
        net_job(3, "2025-01-15T10:30:00.5-05:00"),
        at(2025, 1, 15, 15, 30, tz=ZoneInfo("UTC")) + 0.5,
    ),
    "net, Z": Case(
        REPORT_QUEUE_NAME, net_job(4, "2025-01-15T10:30:00Z"), at(2025, 1, 15, 10, 30, tz=ZoneInfo("UTC"))
    ),
    "net, first day of the calendar with an offset": Case(
        REPORT_QUEUE_NAME, net_job(5, "0001-01-01T00:00:00+14:00"), -62135647200.0
    ),
    "net, first day of the calendar, local (before year 1 in UTC)": Case(
        REPORT_QUEUE_NAME, net_job(6, "0001-01-01T00:00:00"), None
    ),
    "net, last day of the calendar (in the future)": Case(
        REPORT_QUEUE_NAME, net_job(7, "9999-12-31T23:59:59-14:00"), float("inf")
    ),
    "not a job": Case(REPORT_QUEUE_NAME, b"\xff not json", None),
    "dramatiq": Case(ADMIN_QUEUE_NAME, admin_task("t-old", 1_736_908_200_123), 1_736_908_200.123),
    "dramatiq, no timestamp": Case(ADMIN_QUEUE_NAME, b'{"queue_name": "admin"}', None),
}


@pytest.fixture
def shanghai(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's local time zone is Asia/Shanghai for the test."""
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def scraped_age(app: Flask, admin_headers: dict[str, str], queue: str) -> float:
    response = app.test_client().get("/metrics", headers=admin_headers)
    assert response.status_code == 200
    ages = {
        sample.labels["queue_name"]: sample.value
        for family in text_string_to_metric_families(response.get_data(as_text=True))
        for sample in family.samples
        if sample.name == "mi_queue_oldest_job_age_seconds"
    }
    assert set(ages) == {REPORT_QUEUE_NAME, ADMIN_QUEUE_NAME}
    return ages[queue]


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_metrics_console_and_alarm_agree_on_the_oldest_wait(
    case: Case,
    app: Flask,
    settings: Settings,
    redis_client: redis.Redis,
    admin_headers: dict[str, str],
    shanghai: None,
) -> None:
    key = {REPORT_QUEUE_NAME: KEYS.report.queue, ADMIN_QUEUE_NAME: KEYS.admin.queue}[case.queue]
    redis_client.lpush(key, case.oldest)
    # A newer job in front of it: the wait is the oldest's, at the consumer's end.
    newer = net_job(99, datetime.now(UTC).isoformat()) if case.queue == REPORT_QUEUE_NAME else None
    redis_client.lpush(key, newer or admin_task("t-new", int(time.time() * 1000)))

    before = time.time()
    metric = scraped_age(app, admin_headers, case.queue)
    with app.test_request_context("/admin/"):
        health = pipeline_health()
    after = time.time()

    assert health is not None
    shown = health.queue(case.queue).oldest_age_s
    # Only this case's queue holds jobs: a wait alarm is about it.
    alarmed = any(alarm.kind == "queue_wait" for alarm in health.alarms)
    threshold = settings.alarm_oldest_job_s
    if case.enqueued_s is None:
        assert (metric, shown, alarmed) == (0.0, None, False)
        return
    if case.enqueued_s == float("inf"):
        assert (metric, shown, alarmed) == (0.0, 0.0, False)
        return
    for reading in (metric, shown):
        assert reading is not None
        assert before - case.enqueued_s - EPSILON_S <= reading <= after - case.enqueued_s + EPSILON_S
    assert shown is not None
    assert alarmed == (shown > threshold) == (metric > threshold)
    assert alarmed  # every readable case here has waited far past the alarm's threshold
