"""A small HTTP load generator on loopback: threads + http.client, bounded in count and time."""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

#: (method, path, body, headers) of one request.
Request = tuple[str, str, dict[str, Any], dict[str, str]]


@dataclass
class LoadResult:
    latencies_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def count(self) -> int:
        return len(self.latencies_s)


def call(port: int, request: Request, timeout: float = 30.0) -> tuple[int, dict[str, Any]]:
    """One request on a fresh connection (gunicorn's sync workers close each one)."""
    method, path, body, headers = request
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(
            method, path, body=json.dumps(body), headers={"Content-Type": "application/json", **headers}
        )
        response = conn.getresponse()
        payload = response.read()
        return response.status, json.loads(payload) if payload else {}
    finally:
        conn.close()


def run_load(
    port: int,
    requests: Iterator[Request],
    *,
    concurrency: int,
    time_limit_s: float,
    rate: float | None = None,
    on_done: Callable[[], None] | None = None,
) -> LoadResult:
    """Send every request of `requests` from `concurrency` threads; stop at `time_limit_s`.

    With `rate` (requests/s) the load is open-loop: request i is sent at start + i / rate
    (or as soon as a client thread is free); without, each thread sends back to back.
    A request counts as an error unless it returns HTTP 200 with envelope code 0.
    """
    result = LoadResult()
    lock = threading.Lock()
    start = time.monotonic()
    deadline = start + time_limit_s
    index = itertools.count()

    def next_request() -> tuple[Request, float] | None:
        with lock:
            if time.monotonic() > deadline:
                return None
            request = next(requests, None)
            if request is None:
                return None
            return request, (start + next(index) / rate) if rate else 0.0

    def client() -> None:
        while (item := next_request()) is not None:
            request, send_at = item
            wait = send_at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            started = time.perf_counter()
            try:
                status, body = call(port, request)
                ok = status == 200 and body.get("code") == 0
                problem = "" if ok else f"HTTP {status}: {str(body)[:200]}"
            except (OSError, http.client.HTTPException, ValueError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            latency = time.perf_counter() - started
            with lock:
                if problem:
                    result.errors.append(problem)
                else:
                    result.latencies_s.append(latency)
            if on_done is not None:
                on_done()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.elapsed_s = time.perf_counter() - started
    return result
