"""The web tier under slow clients and a hung Redis, on the Procfile's web line.

    python -m bench.web_edge [--line 'gunicorn ...'] [--slow 50] [--probes 60] [--submissions 20]

Runs the Procfile's web command (or `--line`, e.g. an older one, to compare) as honcho
runs it (``sh -c 'exec LINE'``) on a loopback port, against TEST_DATABASE_URL /
TEST_REDIS_URL reached through a `FaultProxy` (scripts/faults.py), then measures, each
phase with submissions running back to back while /healthz and /api/assessment/questions
(a database read, no Redis) are probed one after the other:

* ``baseline``: nothing wrong;
* ``slow clients``: `--slow` connections dripping request headers one byte per second;
* ``redis hung``: the proxy forwards nothing (as a SIGSTOPped Redis).

A request that gets no answer within `--timeout` counts as that long and as a failure.
The database must hold the schema and the questionnaire (any test run leaves them).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench import launch, output, stats, stores
from config.settings import normalize_database_url
from scripts.faults import FaultProxy
from scripts.processes import wait_until
from services.persistence.db import make_engine
from web.auth import issue_user_token

ROOT = Path(__file__).resolve().parent.parent

#: Secrets of the measured web process: production-strength, so APP_ENV=production passes.
SECRET_KEY = "web-edge-secret-key-0123456789abcdef"
ADMIN_TOKEN = "web-edge-admin-token-0123456789abcdef"
USER_ID = stores.BENCH_USER_BASE + 11
DEFAULT_TIMEOUT_S = 10.0


def procfile_web_line() -> str:
    from honcho.environ import parse_procfile

    return str(parse_procfile((ROOT / "Procfile").read_text()).processes["web"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_web(line: str, env: dict[str, str]) -> tuple[launch.Service, int]:
    """`line` through sh, as honcho and supervisord run it, with $PORT free on loopback."""
    port = free_port()
    bin_dir = str(Path(sys.executable).parent)
    full_env = {"PORT": str(port), "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", **env}
    service = launch.Service("web", ["/bin/sh", "-c", f"exec {line}"], full_env)

    def ready() -> bool:
        if not service.alive():
            raise RuntimeError(f"web exited:\n{service.output()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return True
        except OSError:
            return False

    wait_until(ready, timeout=60, what="the web process", interval=0.1)
    return service, port


class SlowClients:
    """`count` connections sending request headers one byte every `interval_s`, never done."""

    def __init__(self, port: int, count: int, interval_s: float = 1.0) -> None:
        self._stop = threading.Event()
        self.socks: list[socket.socket] = []
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            self.socks.append(sock)
        self._header = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
        self._interval_s = interval_s
        self._thread = threading.Thread(target=self._drip, daemon=True)
        self._thread.start()

    def _drip(self) -> None:
        sent = 0
        while not self._stop.is_set():
            byte = self._header[sent : sent + 1] or b"a"  # then an endless header value
            for sock in self.socks:
                with contextlib.suppress(OSError):
                    sock.send(byte)
            sent += 1
            self._stop.wait(self._interval_s)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for sock in self.socks:
            with contextlib.suppress(OSError):
                sock.close()


def call(
    port: int, method: str, path: str, *, token: str | None = None, body: Any = None, timeout: float
) -> tuple[int, dict[str, Any]]:
    """One request on a fresh connection; (0, {}) when no answer came within `timeout`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = conn.getresponse()
        payload = response.read()
        return response.status, json.loads(payload) if payload else {}
    except OSError:
        return 0, {}
    finally:
        conn.close()


@dataclass
class Series:
    latencies_s: list[float] = field(default_factory=list)
    failures: int = 0

    def add(self, started: float, ok: bool) -> None:
        self.latencies_s.append(time.monotonic() - started)
        self.failures += not ok

    def row(self, name: str) -> list[Any]:
        values = self.latencies_s
        return [
            name,
            len(values),
            f"{stats.percentile(values, 50) * 1000:.0f}",
            f"{stats.percentile(values, 99) * 1000:.0f}",
            f"{max(values, default=float('nan')) * 1000:.0f}",
            self.failures,
        ]


@dataclass
class Phase:
    healthz: Series = field(default_factory=Series)
    questions: Series = field(default_factory=Series)
    submissions: Series = field(default_factory=Series)
    not_enqueued: int = 0


class Records:
    """Records in status 2 of one user, ready to be submitted; deleted at the end."""

    def __init__(self, database_url: str) -> None:
        self.engine = make_engine(normalize_database_url(database_url), pool_size=1)
        with self.engine.connect() as conn:
            ids = conn.execute(text("SELECT id FROM questions WHERE is_active ORDER BY id")).scalars().all()
        self.answers = [{"questionId": int(q), "value": int(q) % 5 + 1} for q in ids]
        self.token = issue_user_token(SECRET_KEY, USER_ID)

    def make(self, count: int) -> list[int]:
        with self.engine.begin() as conn:
            return list(
                conn.execute(
                    text(
                        "INSERT INTO assessment_records (user_id, status, started_at)"
                        " SELECT :u, 2, now() FROM generate_series(1, :n) RETURNING id"
                    ),
                    {"u": USER_ID, "n": count},
                ).scalars()
            )

    def close(self) -> None:
        with self.engine.begin() as conn:
            conn.execute(text("DELETE FROM assessment_records WHERE user_id = :u"), {"u": USER_ID})
        self.engine.dispose()


def run_phase(port: int, records: Records, *, probes: int, submissions: int, timeout: float) -> Phase:
    """Submissions back to back in a thread while the Redis-free endpoints are probed."""
    phase = Phase()
    ids = records.make(submissions)

    def submit_all() -> None:
        for record_id in ids:
            started = time.monotonic()
            status, reply = call(
                port,
                "POST",
                "/api/assessment/submitAnswers",
                token=records.token,
                body={"recordId": record_id, "answers": records.answers},
                timeout=timeout,
            )
            phase.submissions.add(started, status == 200)
            if status == 200 and not reply["data"]["enqueued"]:
                phase.not_enqueued += 1

    submitter = threading.Thread(target=submit_all)
    submitter.start()
    for _ in range(probes):
        started = time.monotonic()
        status, _ = call(port, "GET", "/healthz", timeout=timeout)
        phase.healthz.add(started, status == 200)
        started = time.monotonic()
        status, _ = call(port, "GET", "/api/assessment/questions", token=records.token, timeout=timeout)
        phase.questions.add(started, status == 200)
        time.sleep(0.02)
    submitter.join()
    return phase


@contextlib.contextmanager
def web_under_test(line: str, database_url: str, redis_url: str) -> Iterator[tuple[int, FaultProxy]]:
    proxy = FaultProxy(redis_url)
    env = {
        **launch.stack_env(proxy.url, database_url),
        "SECRET_KEY": SECRET_KEY,
        "ADMIN_TOKENS": ADMIN_TOKEN,
        "APP_ENV": "production",
    }
    service, port = start_web(line, env)
    try:
        yield port, proxy
    finally:
        service.stop()
        proxy.close()


def measure(
    line: str,
    database_url: str,
    redis_url: str,
    *,
    slow: int,
    probes: int,
    submissions: int,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Phase]:
    records = Records(database_url)
    phases: dict[str, Phase] = {}
    try:
        with web_under_test(line, database_url, redis_url) as (port, proxy):

            def phase() -> Phase:
                return run_phase(port, records, probes=probes, submissions=submissions, timeout=timeout)

            phases["baseline"] = phase()
            clients = SlowClients(port, slow)
            try:
                time.sleep(2)  # every slow connection accepted and a few bytes in
                phases[f"{slow} slow clients"] = phase()
            finally:
                clients.close()
            proxy.hang()
            try:
                phases["redis hung"] = phase()
            finally:
                proxy.up()
    finally:
        records.close()
        client = stores.redis_client(redis_url)
        stores.delete_own_keys(client)
        client.close()
    return phases


def table(phases: dict[str, Phase]) -> str:
    rows = []
    for name, phase in phases.items():
        rows.append(phase.healthz.row(f"{name}: GET /healthz"))
        rows.append(phase.questions.row(f"{name}: GET /questions"))
        rows.append(phase.submissions.row(f"{name}: POST submitAnswers ({phase.not_enqueued} not enqueued)"))
    return output.print_table(
        "web tier under faults (ms)", ["phase: request", "n", "p50", "p99", "max", "failed"], rows
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.web_edge", description=__doc__.split("\n")[0])
    parser.add_argument("--line", default=None, help="the web command (default: the Procfile's web line)")
    parser.add_argument("--slow", type=int, default=50)
    parser.add_argument("--probes", type=int, default=60)
    parser.add_argument("--submissions", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.quick:
        args.probes, args.submissions = 10, 4
    line = args.line or procfile_web_line()
    output.log(f"web: {line}")
    phases = measure(
        line,
        stores.database_url(),
        stores.redis_url(),
        slow=args.slow,
        probes=args.probes,
        submissions=args.submissions,
        timeout=args.timeout,
    )
    return {"tables": [table(phases)]}


if __name__ == "__main__":
    main()
