"""HTTP request counts and durations by endpoint, for Prometheus (served by web/metrics.py).

Labelled by the URL rule (`/api/admin/records/<int:record_id>`), never the raw path, so
the number of series stays bounded whatever clients send; a path no rule matches is
`<unmatched>`. Multiprocess-safe like every metric here (PROMETHEUS_MULTIPROC_DIR).
"""

from __future__ import annotations

import time

from flask import Flask, Response, g, request
from prometheus_client import Counter, Histogram

UNMATCHED = "<unmatched>"

requests_total = Counter("http_requests_total", "HTTP requests answered.", ["method", "endpoint", "status"])
request_duration_s = Histogram(
    "http_request_duration_seconds",
    "Time to answer an HTTP request.",
    ["method", "endpoint"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


def _start() -> None:
    g.request_started = time.perf_counter()


def _record(response: Response) -> Response:
    started: float | None = g.get("request_started")
    endpoint = request.url_rule.rule if request.url_rule is not None else UNMATCHED
    requests_total.labels(request.method, endpoint, str(response.status_code)).inc()
    if started is not None:
        request_duration_s.labels(request.method, endpoint).observe(time.perf_counter() - started)
    return response


def install(app: Flask) -> None:
    app.before_request(_start)
    app.after_request(_record)
