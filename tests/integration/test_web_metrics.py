"""GET /metrics of the web tier: who may scrape it, HTTP metrics labelled by URL rule, the queue
and hot-path gauges read from Redis at scrape time, and a scrape that survives Redis down."""

from __future__ import annotations

from collections.abc import Callable

import redis
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from redis_adapters.keyspace import AutosaveKeys, EventLogKeys
from redis_adapters.queues import DEAD_LETTER_QUEUE_KEY
from redis_adapters.report_queue import RedisReportQueue
from tests.support.operations import dead_letter
from tests.support.urls import CLOSED_REDIS_URL
from web import create_app

SCRAPE_TOKEN = "scrape-only-token-for-prometheus"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(body: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def scraping_app(settings: Settings, client: redis.Redis) -> Flask:
    return create_app(settings.with_overrides(metrics_tokens=(SCRAPE_TOKEN,)), redis_client=client)


def scrape(app: Flask) -> Samples:
    response = app.test_client().get("/metrics", headers={"Authorization": f"Bearer {SCRAPE_TOKEN}"})
    assert response.status_code == 200
    assert response.content_type.startswith("text/plain; version=0.0.4")
    return samples(response.get_data(as_text=True))


def test_a_scrape_token_reads_metrics_but_not_the_admin_api(
    settings: Settings,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    admin_headers: dict[str, str],
    user_headers: Callable[[int], dict[str, str]],
) -> None:
    app = scraping_app(settings, redis_client)
    client = app.test_client()
    scraper = {"Authorization": f"Bearer {SCRAPE_TOKEN}"}
    assert client.get("/metrics", headers=scraper).status_code == 200
    assert client.get("/metrics", headers=admin_headers).status_code == 200
    assert client.get("/metrics", headers=user_headers(7)).status_code == 403
    assert client.get("/metrics").status_code == 401
    assert client.get("/api/admin/queue/stats", headers=scraper).status_code == 401


def test_http_requests_are_counted_by_url_rule(
    settings: Settings, redis_client: redis.Redis, session_factory: sessionmaker[Session]
) -> None:
    app = scraping_app(settings, redis_client)
    before = scrape(app)
    client = app.test_client()
    client.get("/healthz")
    client.get("/healthz")
    for page in (1, 2):  # one rule, whatever the query
        client.get(f"/api/admin/assessmentRecord/list?page={page}")  # no credential: 401
    for raw in ("/no/such/page/123456", "/no/such/page/123457"):
        client.get(raw)
    after = scrape(app)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("http_requests_total", method="GET", endpoint="/healthz", status="200") == 2
    assert delta("http_request_duration_seconds_count", method="GET", endpoint="/healthz") == 2
    rule = "/api/admin/assessmentRecord/list"
    assert delta("http_requests_total", method="GET", endpoint=rule, status="401") == 2
    assert delta("http_requests_total", method="GET", endpoint="<unmatched>", status="404") == 2
    endpoints = {dict(labels).get("endpoint", "") for name, labels in after if name == "http_requests_total"}
    assert not any("123456" in endpoint or "?" in endpoint for endpoint in endpoints)


def test_queue_and_hotpath_gauges_are_read_at_scrape_time(
    settings: Settings, redis_client: redis.Redis, session_factory: sessionmaker[Session]
) -> None:
    app = scraping_app(settings, redis_client)
    queue = RedisReportQueue(redis_client)
    for record_id in (1, 2, 3):
        queue.enqueue(record_id)
    redis_client.lpush(DEAD_LETTER_QUEUE_KEY, dead_letter(9))
    autosave, events = AutosaveKeys.default(), EventLogKeys()
    redis_client.sadd(autosave.answers.dirty, 1, 2)
    redis_client.sadd(autosave.progress.dirty, 1)
    redis_client.lpush(events.queue, b"{}", b"{}", b"{}")
    redis_client.lpush(events.backup, b"{}")
    found = scrape(app)
    assert value(found, "mi_queue_depth", queue_name="report") == 3
    assert value(found, "mi_queue_dead", queue_name="report") == 1
    assert value(found, "mi_queue_oldest_job_age_seconds", queue_name="report") >= 0
    assert value(found, "mi_hotpath_dirty_records", flow="answers") == 2
    assert value(found, "mi_hotpath_dirty_records", flow="progress") == 1
    assert value(found, "mi_hotpath_eventlog_entries", list="queue") == 3
    assert value(found, "mi_hotpath_eventlog_entries", list="backup") == 1
    assert value(found, "mi_redis_up") == 1


def test_the_oldest_job_age_is_its_enqueue_time(
    settings: Settings, redis_client: redis.Redis, session_factory: sessionmaker[Session]
) -> None:
    redis_client.lpush("report:queue", b'{"RecordId":5,"RetryCount":0,"EnqueueTime":"2020-01-01T00:00:00Z"}')
    redis_client.lpush("report:queue", b'{"RecordId":6,"RetryCount":0,"EnqueueTime":"2099-01-01T00:00:00Z"}')
    found = scrape(scraping_app(settings, redis_client))
    assert value(found, "mi_queue_oldest_job_age_seconds", queue_name="report") > 5 * 365 * 86400


def test_a_scrape_with_redis_down_says_so_and_still_answers(
    settings: Settings, session_factory: sessionmaker[Session]
) -> None:
    down = redis.Redis.from_url(CLOSED_REDIS_URL, socket_connect_timeout=0.5)
    found = scrape(scraping_app(settings, down))
    assert value(found, "mi_redis_up") == 0
    assert not any(name.startswith("mi_queue_") for name, _ in found)
