"""The worker's Prometheus metrics, under Dramatiq's own names where Dramatiq has one.

Multiprocess-safe: with `PROMETHEUS_MULTIPROC_DIR` set (make run sets it, one folder per
host, emptied at start), each worker process writes its values to files there and the
web's `GET /metrics` (web/metrics.py) sums them; without it they live in this process
only (tests). The variable must be set before `prometheus_client` is first imported.

- `dramatiq_messages_total`: attempts started (as Dramatiq's Prometheus middleware);
- `dramatiq_message_errors_total`: attempts that raised;
- `dramatiq_message_retries_total`: retries scheduled (ExactRetries' schedule);
- `dramatiq_message_rejects_total`: messages dead-lettered;
- `dramatiq_messages_inprogress`: attempts running now;
- `dramatiq_message_duration_milliseconds`: time of each attempt (the report's generation);
- `mi_report_latency_seconds`: a record's submission to its report (from the database's
  `submitted_at` and `completed_at`);
- `mi_report_group_size`: the records generated together in one transaction (a batch of up to
  REPORT_BATCH_SIZE jobs; services/usecases/report_groups.py): its mean says how many jobs a
  transaction carries.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

LABELS = ("queue_name", "actor_name")

#: Dramatiq's own buckets, in milliseconds.
DURATION_BUCKETS_MS = (
    5, 10, 25, 50, 75, 100, 250, 500, 750, 1_000, 2_500, 5_000, 7_500, 10_000, 30_000, 60_000,
)  # fmt: skip
#: Submission to report: seconds to minutes (the retry schedule adds 10 + 30 + 60 s).
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 45, 60, 120, 300, 600)
#: Records per transaction: 1 (an idle worker) up to REPORT_BATCH_SIZE (100 by default).
GROUP_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)

messages_total = Counter("dramatiq_messages_total", "The number of messages processed.", LABELS)
message_errors_total = Counter("dramatiq_message_errors_total", "The number of errored messages.", LABELS)
message_retries_total = Counter("dramatiq_message_retries_total", "The number of retried messages.", LABELS)
message_rejects_total = Counter(
    "dramatiq_message_rejects_total", "The number of dead-lettered (rejected) messages.", LABELS
)
messages_inprogress = Gauge(
    "dramatiq_messages_inprogress",
    "The number of messages in progress.",
    LABELS,
    multiprocess_mode="livesum",
)
message_duration_ms = Histogram(
    "dramatiq_message_duration_milliseconds",
    "The time spent processing messages.",
    LABELS,
    buckets=DURATION_BUCKETS_MS,
)
report_latency_s = Histogram(
    "mi_report_latency_seconds",
    "Time from a record's submission to its report (submitted_at to completed_at).",
    buckets=LATENCY_BUCKETS_S,
)
report_group_size = Histogram(
    "mi_report_group_size",
    "Records whose reports were generated together in one transaction (a batch).",
    buckets=GROUP_SIZE_BUCKETS,
)


@dataclass(frozen=True)
class ActorMetrics:
    """The labelled series of one actor: looked up once, not at every job."""

    messages: Any
    errors: Any
    retries: Any
    rejects: Any
    inprogress: Any
    duration_ms: Any


@functools.cache
def for_actor(queue_name: str, actor_name: str) -> ActorMetrics:
    labels = (queue_name, actor_name)
    return ActorMetrics(
        messages=messages_total.labels(*labels),
        errors=message_errors_total.labels(*labels),
        retries=message_retries_total.labels(*labels),
        rejects=message_rejects_total.labels(*labels),
        inprogress=messages_inprogress.labels(*labels),
        duration_ms=message_duration_ms.labels(*labels),
    )
