"""HTTP request counts and durations by endpoint, for Prometheus (served by web/metrics.py).

Every label comes from a fixed set, so the number of series stays bounded whatever
clients send: the endpoint is the URL rule (`/api/admin/records/<int:record_id>`), never
the raw path, and a path no rule matches is `<unmatched>`; the method is one of
`METHODS`, any other token (gunicorn accepts any uppercase word as a method) is `OTHER`;
the status is the answer's, which the app chooses. Multiprocess-safe like every metric
here (PROMETHEUS_MULTIPROC_DIR).
"""

from __future__ import annotations

import time

from flask import Flask, Response, g, request
from prometheus_client import Counter, Histogram

UNMATCHED = "<unmatched>"
#: The methods counted by name; every other one is counted as `OTHER`.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
OTHER = "OTHER"

requests_total = Counter("http_requests_total", "HTTP requests answered.", ["method", "endpoint", "status"])
request_duration_s = Histogram(
    "http_request_duration_seconds",
    "Time to answer an HTTP request.",
    ["method", "endpoint"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


def method_label(method: str) -> str:
    """`method` if it is a standard one, else `OTHER`: invented methods add no series."""
    return method if method in METHODS else OTHER


def _start() -> None:
    g.request_started = time.perf_counter()


def _record(response: Response) -> Response:
    started: float | None = g.get("request_started")
    endpoint = request.url_rule.rule if request.url_rule is not None else UNMATCHED
    method = method_label(request.method)
    requests_total.labels(method, endpoint, str(response.status_code)).inc()
    if started is not None:
        request_duration_s.labels(method, endpoint).observe(time.perf_counter() - started)
    return response


def install(app: Flask) -> None:
    app.before_request(_start)
    app.after_request(_record)
