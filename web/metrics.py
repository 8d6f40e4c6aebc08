"""Prometheus `GET /metrics`: this host's processes' metrics and the queue's figures.

- With `PROMETHEUS_MULTIPROC_DIR` set (make run sets `.state/metrics`, emptied at each
  start), the values every process of this host wrote there (gunicorn workers: HTTP
  metrics; Dramatiq worker processes: job metrics, observability/prometheus.py) summed by
  `MultiProcessCollector`; without it, this process's own registry.
- Read from Redis at each scrape, so every host's web shows the same figures: each queue's
  (report, admin) depth, delayed, in flight, dead, invalid and oldest job's age, read as the
  console reads them (redis_adapters/queue_figures.py), and the hot path's backlog
  (observability/pipeline_health.py).

Not open to the anonymous: an admin token or a scrape-only token of `METRICS_TOKENS`
(Prometheus' `authorization` setting sends it as a Bearer token); user tokens are refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import redis
from flask import Blueprint, Response
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from config.settings import prometheus_multiproc_dir
from observability.pipeline_health import hotpath_backlog
from redis_adapters.keyspace import Keyspace
from redis_adapters.queue_figures import QueueState, queue_states
from web.auth import bearer_token, is_admin_token, require_admin
from web.deps import current, keyspace, redis_client
from web.spec import ERROR_DESCRIPTIONS, HEALTH, media_operation

bp = Blueprint("metrics", __name__)

#: The exposition format's content type (text, version 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


#: Each queue's gauges (labelled `queue_name`): name, help, value.
QUEUE_GAUGES: tuple[tuple[str, str, Callable[[QueueState], float]], ...] = (
    ("mi_queue_depth", "Jobs waiting in the queue.", lambda q: q.figures.queued),
    ("mi_queue_delayed", "Jobs waiting for a retry or a delay.", lambda q: q.figures.delayed),
    ("mi_queue_in_flight", "Jobs taken by a worker and not yet settled.", lambda q: q.figures.in_flight),
    ("mi_queue_dead", "Dead-lettered jobs.", lambda q: q.figures.dead),
    ("mi_queue_invalid", "Quarantined payloads that could not be decoded.", lambda q: q.figures.invalid),
    ("mi_queue_oldest_job_age_seconds", "Age of the oldest waiting job.", lambda q: q.oldest_age_s or 0.0),
)


@bp.before_request
def require_scraper() -> None:
    token = bearer_token()
    if token is not None and is_admin_token(current().settings.metrics_tokens, token):
        return
    require_admin()


class QueueCollector(Collector):
    """The queues' figures and the hot path's backlog, read from Redis when scraped.

    `mi_redis_up` is 0 (and the other gauges absent) when Redis does not answer, so a
    scrape still succeeds and says why the figures are missing. A queue's oldest job's age
    is 0 when none waits or its time cannot be read (the console shows "—" then).
    """

    def __init__(self, client: redis.Redis, keys: Keyspace) -> None:
        self.client = client
        self.keys = keys

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("mi_redis_up", "1 when Redis answered this scrape's reads.")
        try:
            queues = queue_states(self.client, hash_tag=self.keys.hash_tags, now=time.time())
            backlog = hotpath_backlog(self.client, self.keys)
        except (redis.RedisError, OSError):
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        for name, text, value in QUEUE_GAUGES:
            gauge = GaugeMetricFamily(name, text, labels=["queue_name"])
            for queue in queues:
                gauge.add_metric([queue.name], value(queue))
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
