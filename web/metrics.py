"""Prometheus `GET /metrics`: this host's processes' metrics and the queue's figures.

- With `PROMETHEUS_MULTIPROC_DIR` set (make run sets `.state/metrics`, emptied at each
  start), the values every process of this host wrote there (gunicorn workers: HTTP
  metrics; Dramatiq worker processes: job metrics, observability/prometheus.py) summed by
  `MultiProcessCollector`; without it, this process's own registry.
- Read from Redis at each scrape, so every host's web shows the same figures: the report
  queue's depth, delayed, in flight, dead, invalid and oldest job's age, and the hot
  path's backlog (redis_adapters/backlog.py).

Not open to the anonymous: an admin token or a scrape-only token of `METRICS_TOKENS`
(Prometheus' `authorization` setting sends it as a Bearer token); user tokens are refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import redis
from flask import Blueprint, Response
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from config.settings import prometheus_multiproc_dir
from redis_adapters.backlog import hotpath_backlog, oldest_job_age_s
from redis_adapters.keyspace import Keyspace
from redis_adapters.queue_figures import queue_figures
from redis_adapters.queues import REPORT_QUEUE_NAME
from web.auth import bearer_token, is_admin_token, require_admin
from web.deps import current, keyspace, redis_client
from web.spec import ERROR_DESCRIPTIONS, HEALTH, media_operation

bp = Blueprint("metrics", __name__)

#: The exposition format's content type (text, version 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@bp.before_request
def require_scraper() -> None:
    token = bearer_token()
    if token is not None and is_admin_token(current().settings.metrics_tokens, token):
        return
    require_admin()


class QueueCollector(Collector):
    """The queue's figures and the hot path's backlog, read from Redis when scraped.

    `mi_redis_up` is 0 (and the other gauges absent) when Redis does not answer, so a
    scrape still succeeds and says why the figures are missing.
    """

    def __init__(self, client: redis.Redis, keys: Keyspace) -> None:
        self.client = client
        self.keys = keys

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("mi_redis_up", "1 when Redis answered this scrape's reads.")
        try:
            figures = queue_figures(self.client, hash_tag=self.keys.hash_tags)
            oldest = oldest_job_age_s(self.client, key=self.keys.report.queue)
            backlog = hotpath_backlog(self.client, self.keys)
        except (redis.RedisError, OSError):
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        for name, text, value in (
            ("mi_queue_depth", "Jobs waiting in the queue.", figures.queued),
            ("mi_queue_delayed", "Jobs waiting for a retry or a delay.", figures.delayed),
            ("mi_queue_in_flight", "Jobs taken by a worker and not yet settled.", figures.in_flight),
            ("mi_queue_dead", "Dead-lettered jobs.", figures.dead),
            ("mi_queue_invalid", "Quarantined payloads that could not be decoded.", figures.invalid),
            ("mi_queue_oldest_job_age_seconds", "Age of the oldest waiting job.", oldest),
        ):
            gauge = GaugeMetricFamily(name, text, labels=["queue_name"])
            gauge.add_metric([REPORT_QUEUE_NAME], value)
            yield gauge
        dirty = GaugeMetricFamily(
            "mi_hotpath_dirty_records", "Records whose autosave is not yet in PostgreSQL.", labels=["flow"]
        )
        dirty.add_metric(["answers"], backlog.answers_dirty)
        dirty.add_metric(["progress"], backlog.progress_dirty)
        yield dirty
        events = GaugeMetricFamily(
            "mi_hotpath_eventlog_entries", "Events waiting for the event-log consumer.", labels=["list"]
        )
        events.add_metric(["queue"], backlog.events_queued)
        events.add_metric(["backup"], backlog.events_in_backup)
        yield events


def process_metrics() -> bytes:
    """The counters and histograms of this host's processes (or of this process alone)."""
    if prometheus_multiproc_dir():
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # registers itself
        return generate_latest(registry)
    return generate_latest(REGISTRY)


@bp.get("/metrics")
@media_operation(
    {
        200: ("the metrics", ("text/plain",)),
        401: (ERROR_DESCRIPTIONS[401], ()),
        403: (ERROR_DESCRIPTIONS[403], ()),
    },
    tag=HEALTH,
    security="adminToken",
)
def metrics() -> Response:
    """Prometheus metrics (text format); an admin token or a METRICS_TOKENS token"""
    queue = CollectorRegistry()
    queue.register(QueueCollector(redis_client(), keyspace()))
    return Response(process_metrics() + generate_latest(queue), content_type=CONTENT_TYPE)
