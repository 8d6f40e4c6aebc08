"""The web tier at its edge, on a real gunicorn run from the Procfile's web line.

Loopback only, every wait bounded. The test PostgreSQL and Redis are reached through
`FaultProxy`s, so a test can stop or hang them without touching the machine's servers.
The measuring helpers are bench/web_edge.py's (`python -m bench.web_edge` prints the
same figures with more samples). The tests assert outcomes (answered, and with what), the
latencies are printed: a loaded machine stretches them, a server that blocks never answers
within TIMEOUT_S, which stays under gunicorn's own 30 s worker timeout.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, text

from bench import launch, stats
from bench.web_edge import ADMIN_TOKEN, SECRET_KEY, Records, SlowClients, call, procfile_web_line, start_web
from config.settings import Settings
from scripts.faults import FaultProxy
from web.errors import RETRY_AFTER_S
from web.fields import MAX_CONTENT_LENGTH

#: How long a request may take before it fails: far beyond any answer on a loaded machine,
#: short of gunicorn's worker timeout (30 s), after which a blocked worker would be replaced.
TIMEOUT_S = 10.0


@dataclass
class Web:
    port: int
    redis: FaultProxy
    database: FaultProxy
    records: Records
    service: launch.Service


@pytest.fixture(scope="module")
def web(engine: Engine, redis_url: str, settings: Settings) -> Iterator[Web]:
    redis_proxy = FaultProxy(redis_url)
    database_proxy = FaultProxy(settings.database_url)
    env = {
        **launch.stack_env(redis_proxy.url, database_proxy.url),
        "SECRET_KEY": SECRET_KEY,
        "ADMIN_TOKENS": ADMIN_TOKEN,
        "APP_ENV": "production",
        "WEB_CONCURRENCY": "2",
    }
    service, port = start_web(procfile_web_line(), env)
    records = Records(settings.database_url)
    try:
        yield Web(port, redis_proxy, database_proxy, records, service)
    finally:
        service.stop()
        records.close()
        redis_proxy.close()
        database_proxy.close()


@pytest.fixture
def healthy(web: Web, redis_client: redis.Redis) -> Iterator[Web]:
    """Both servers reachable before and after the test, Redis clean."""
    web.redis.up()
    web.database.up()
    yield web
    web.redis.up()
    web.database.up()


def submit(web: Web, record_id: int) -> tuple[float, int, dict[str, Any]]:
    started = time.monotonic()
    status, reply = call(
        web.port,
        "POST",
        "/api/assessment/submitAnswers",
        token=web.records.token,
        body={"recordId": record_id, "answers": web.records.answers},
        timeout=TIMEOUT_S,
    )
    return time.monotonic() - started, status, reply


def probe(web: Web, path: str, count: int) -> list[float]:
    """Latencies of `count` GETs; each must succeed."""
    latencies = []
    for _ in range(count):
        started = time.monotonic()
        status, _ = call(web.port, "GET", path, token=web.records.token, timeout=TIMEOUT_S)
        latencies.append(time.monotonic() - started)
        assert status == 200, f"{path}: {status} after {latencies[-1]:.2f} s"
    return latencies


def raw_exchange(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read the whole answer (the server closes): status, headers, body."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body


def assert_envelope(headers: dict[str, str], body: bytes, code: int) -> dict[str, Any]:
    assert headers["content-type"].startswith("application/json"), headers
    envelope = json.loads(body)
    assert set(envelope) == {"code", "message", "data"}
    assert envelope["code"] == code
    assert envelope["data"] is None
    assert isinstance(envelope["message"], str)
    assert envelope["message"]
    return dict(envelope)


# -- slow clients ---------------------------------------------------------------------------


def test_fifty_slow_clients_leave_the_api_answering_in_well_under_a_second(healthy: Web) -> None:
    web = healthy
    ids = web.records.make(5)
    clients = SlowClients(web.port, 50)
    try:
        time.sleep(2)  # all accepted, each holding a half-sent request
        healthz = probe(web, "/healthz", 30)
        submissions = [submit(web, record_id) for record_id in ids]
    finally:
        clients.close()
    # Answered at all while 50 clients hold half-sent requests for the whole test (a sync
    # worker would wait on them, each, until gunicorn's worker timeout).
    for _, status, reply in submissions:
        assert status == 200, reply
        assert reply["data"]["enqueued"] is True
    print(
        f"with 50 slow clients: /healthz p99 {stats.percentile(healthz, 99):.3f} s,"
        f" submissions up to {max(e for e, _, _ in submissions):.3f} s"
    )


# -- a hung Redis ---------------------------------------------------------------------------


def test_a_hung_redis_costs_a_submission_about_a_second_and_other_endpoints_nothing(
    healthy: Web, engine: Engine
) -> None:
    web = healthy
    ids = web.records.make(4)
    before = probe(web, "/api/assessment/questions", 20)
    web.redis.hang()
    submissions = [submit(web, record_id) for record_id in ids]
    during = probe(web, "/api/assessment/questions", 20) + probe(web, "/healthz", 10)
    web.redis.up()
    # Answered while Redis hangs for the whole test: the wait on Redis is bounded (its socket
    # timeout, then the guard fails fast), else they would time out. The database-only
    # endpoint answered throughout too (`probe` asserts each answer).
    for _, status, reply in submissions:
        assert status == 200, reply  # the answers are saved...
        assert reply["data"]["enqueued"] is False  # ...and the job is the reconciler's
    print(
        f"Redis hung: submissions {', '.join(f'{e:.2f}' for e, _, _ in submissions)} s;"
        f" /api/assessment/questions p99 {stats.percentile(before, 99):.3f} s before,"
        f" {stats.percentile(during, 99):.3f} s during"
    )
    with engine.connect() as conn:
        statuses = conn.execute(
            text("SELECT status FROM assessment_records WHERE id = ANY(:ids)"), {"ids": ids}
        ).scalars()
        assert set(statuses) == {3}


def test_a_stopped_redis_answers_a_save_503_with_retry_after(healthy: Web) -> None:
    web = healthy
    (record_id,) = web.records.make(1)
    web.redis.down()
    status, reply = call(
        web.port,
        "POST",
        "/api/assessment/saveAnswers",
        token=web.records.token,
        body={"recordId": record_id, "answers": web.records.answers[:1]},
        timeout=TIMEOUT_S,
    )
    assert (status, reply["code"]) == (503, 5003)


# -- PostgreSQL down --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/assessment/questions"),
        ("GET", "/api/assessment/records"),
        ("POST", "/api/assessment/createRecord"),
    ],
)
def test_a_stopped_database_is_503_with_retry_after(healthy: Web, method: str, path: str) -> None:
    web = healthy
    probe(web, "/api/assessment/questions", 1)  # the pools hold connections, which die now
    web.database.down()
    token = web.records.token
    request = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
    request += "Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
    status, headers, body = raw_exchange(web.port, request.encode())
    assert status == 503
    assert headers["retry-after"] == str(RETRY_AFTER_S)
    assert_envelope(headers, body, 5003)


# -- answers gunicorn gives by itself, and bodies over the cap ---------------------------------


def test_a_request_line_over_the_limit_is_414_as_the_envelope(healthy: Web) -> None:
    request = b"GET /healthz?" + b"a" * 5000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    status, headers, body = raw_exchange(healthy.port, request)
    assert status == 414
    assert_envelope(headers, body, 414)


@pytest.mark.parametrize(
    "header_block",
    [
        b"X-Big: " + b"a" * 9000 + b"\r\n",  # one field over --limit-request-field_size
        b"".join(b"X-H%d: 1\r\n" % i for i in range(120)),  # over --limit-request-fields
    ],
)
def test_headers_over_the_limit_are_431_as_the_envelope(healthy: Web, header_block: bytes) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header_block + b"\r\n"
    status, headers, body = raw_exchange(healthy.port, request)
    assert status == 431
    assert_envelope(headers, body, 431)


def test_a_malformed_request_is_400_as_the_envelope(healthy: Web) -> None:
    status, headers, body = raw_exchange(healthy.port, b"NOT A REQUEST\r\n\r\n")
    assert status == 400
    assert_envelope(headers, body, 1001)


@pytest.mark.parametrize("size", [MAX_CONTENT_LENGTH + 1, 4 * MAX_CONTENT_LENGTH])
def test_a_chunked_body_over_the_cap_is_413(healthy: Web, size: int) -> None:
    body = b'{"recordId": 1, "pad": "' + b"x" * size + b'"}'
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(piece), piece)
        for piece in (body[i : i + 16384] for i in range(0, len(body), 16384))
    )
    request = (
        b"POST /api/assessment/startAssessment HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer " + healthy.records.token.encode() + b"\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        + chunks
        + b"0\r\n\r\n"
    )
    status, headers, reply = raw_exchange(healthy.port, request)
    assert status == 413
    assert_envelope(headers, reply, 413)


# -- production settings ------------------------------------------------------------------------


def test_production_refuses_to_start_with_a_weak_secret(
    redis_url: str, settings: Settings, tmp_path: Path
) -> None:
    env = {
        **launch.stack_env(redis_url, settings.database_url),
        "SECRET_KEY": "a",
        "ADMIN_TOKENS": "x",
        "APP_ENV": "production",
        "PORT": "0",
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
    }
    done = subprocess.run(
        ["/bin/sh", "-c", f"exec {procfile_web_line()}"],
        cwd=Path(__file__).parents[2],
        env=env,
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "ConfigError" in output
    assert "SECRET_KEY is 1 bytes long" in output
