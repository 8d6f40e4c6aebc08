"""The Procfile's web line and its worker class (web/gunicorn_worker.py), without a server.

A real gunicorn answering 414 / 431 / chunked 413 is in tests/e2e/test_web_edge.py.
"""

from __future__ import annotations

import json
import shlex

import pytest

from tests.support.processes import procfile
from web.gunicorn_worker import EnvelopeThreadWorker, envelope_response


def web_args() -> list[str]:
    return shlex.split(procfile()["web"])


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_web_line_uses_the_envelope_gthread_worker_with_settable_threads() -> None:
    args = web_args()
    worker_class = option(args, "--worker-class")
    module, _, name = worker_class.rpartition(".")
    assert (module, name) == ("web.gunicorn_worker", EnvelopeThreadWorker.__name__)
    assert option(args, "--workers") == "${WEB_CONCURRENCY:-2}"
    assert option(args, "--threads") == "${WEB_THREADS:-64}"
    assert option(args, "--keep-alive") == "${WEB_KEEPALIVE_S:-5}"
    assert "--no-control-socket" in args
    assert option(args, "--access-logfile") == "-"
    assert option(args, "--graceful-timeout") == "30"


def test_web_line_binds_loopback_unless_bind_is_set() -> None:
    assert option(web_args(), "--bind") == "${BIND:-127.0.0.1}:${PORT:-8000}"


@pytest.mark.parametrize(
    ("status", "reason", "code", "message"),
    [
        (400, "Bad Request", 1001, "请求格式错误"),
        (414, "URI Too Long", 414, "请求行过长"),
        (431, "Request Header Fields Too Large", 431, "请求头过大"),
        (500, "Internal Server Error", 5000, "服务内部错误"),
    ],
)
def test_gunicorn_errors_become_the_envelope(status: int, reason: str, code: int, message: str) -> None:
    raw = envelope_response(status, reason)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0] == f"HTTP/1.1 {status} {reason}"
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert headers["Content-Type"] == "application/json"
    assert headers["Connection"] == "close"
    assert int(headers["Content-Length"]) == len(body)
    assert json.loads(body) == {"code": code, "message": message, "data": None}
