"""/healthz while many clients stall in the middle of a request body.

    python -m bench.slow_bodies [--connections 500] [--probes 100] [--stack]

Each stalled client sends the head of ``POST /admin/login`` with ``Content-Length: 5000``
and 10 bytes of body, then waits; one the server closes (its time is up) is opened again, so
`--connections` stay stalled for the whole measure. Meanwhile /healthz is probed one request
after another; a probe without an answer within `--timeout` counts as that long and as failed.

By default two web processes run one after the other on TEST_DATABASE_URL / TEST_REDIS_URL,
each on the Procfile's web line: the product's worker class, and gunicorn's stock `gthread`
as the baseline (what reads a body in a thread); the table gives their p99 and the ratio.
`--stack` measures the running `make run` instead (its .state/stack.json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import selectors
import socket
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import output, stats, stores
from bench.web_edge import procfile_web_line, web_under_test

ROOT = Path(__file__).resolve().parent.parent
STALLED_REQUEST = (
    b"POST /admin/login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 5000\r\n\r\ntoken=0123"
)
PRODUCT_WORKER = "web.gunicorn_worker.EnvelopeThreadWorker"


class StalledBodies:
    """`count` connections stalled in the middle of their body, reopened when closed."""

    def __init__(self, port: int, count: int) -> None:
        self.port = port
        self.selector = selectors.DefaultSelector()
        self.reopened = 0
        self._stop = threading.Event()
        for _ in range(count):
            self._open()
        self._thread = threading.Thread(target=self._keep, daemon=True)
        self._thread.start()

    def _open(self) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        sock.sendall(STALLED_REQUEST)
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ)

    def _keep(self) -> None:
        while not self._stop.is_set():
            for key, _ in self.selector.select(timeout=0.2):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                with contextlib.suppress(BlockingIOError):
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                    if not data:  # closed (after a 408): stall a new one in its place
                        self.selector.unregister(sock)
                        sock.close()
                        with contextlib.suppress(OSError):
                            self._open()
                            self.reopened += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for key in list(self.selector.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        self.selector.close()


def probe(base_url: str, count: int, timeout: float) -> tuple[list[float], int]:
    latencies, failures = [], 0
    for _ in range(count):
        started = time.monotonic()
        try:
            with urllib.request.urlopen(f"{base_url}/healthz", timeout=timeout) as response:
                ok = response.status == 200
        except OSError:
            ok = False
        latencies.append(time.monotonic() - started if ok else timeout)
        failures += not ok
        time.sleep(0.02)
    return latencies, failures


def measure(port: int, connections: int, probes: int, timeout: float) -> dict[str, Any]:
    base_url = f"http://127.0.0.1:{port}"
    idle, _ = probe(base_url, 10, timeout)
    stalled = StalledBodies(port, connections)
    try:
        time.sleep(2)  # every connection past its head
        latencies, failures = probe(base_url, probes, timeout)
    finally:
        stalled.close()
    return {
        "idle_p99_s": stats.percentile(idle, 99),
        "p50_s": stats.percentile(latencies, 50),
        "p99_s": stats.percentile(latencies, 99),
        "max_s": max(latencies),
        "failures": failures,
        "reopened": stalled.reopened,
    }


def launched(line: str, connections: int, probes: int, timeout: float) -> dict[str, Any]:
    with web_under_test(line, stores.database_url(), stores.redis_url()) as (port, _redis_proxy):
        return measure(port, connections, probes, timeout)


def row(name: str, result: dict[str, Any]) -> list[Any]:
    return [
        name,
        f"{result['idle_p99_s'] * 1000:.0f}",
        f"{result['p50_s'] * 1000:.0f}",
        f"{result['p99_s'] * 1000:.0f}",
        f"{result['max_s'] * 1000:.0f}",
        result["failures"],
        result["reopened"],
    ]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.slow_bodies", description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--probes", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--stack", action="store_true", help="measure the running `make run`")
    args = parser.parse_args(list(argv) if argv is not None else None)
    header = ["web", "idle p99", "p50", "p99", "max", "failed", "reopened"]
    title = f"GET /healthz (ms) with {args.connections} connections stalled mid-body"
    if args.stack:
        info = json.loads((ROOT / ".state" / "stack.json").read_text())
        result = measure(int(info["port"]), args.connections, args.probes, args.timeout)
        return {
            "results": {"make run": result},
            "tables": [output.print_table(title, header, [row("make run", result)])],
        }
    line = procfile_web_line()
    assert PRODUCT_WORKER in line, line
    results = {
        "product": launched(line, args.connections, args.probes, args.timeout),
        "baseline (gthread)": launched(
            line.replace(PRODUCT_WORKER, "gthread"), args.connections, args.probes, args.timeout
        ),
    }
    rows = [row(name, result) for name, result in results.items()]
    ratio = results["product"]["p99_s"] / results["baseline (gthread)"]["p99_s"]
    rows.append(["p99 ratio product / baseline", "", "", f"{ratio:.3f}", "", "", ""])
    return {"results": results, "tables": [output.print_table(title, header, rows)]}


if __name__ == "__main__":
    main()
