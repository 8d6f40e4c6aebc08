"""gunicorn's threaded worker, answering its own errors with the JSON envelope.

The Procfile names it (``--worker-class web.gunicorn_worker.EnvelopeThreadWorker``).
Why `gthread`: a connection waits in the worker's poller, not in a thread, until its
first bytes arrive and between keep-alive requests, so idle or slow clients do not take
the threads the application needs; and a request blocked on a server (a hung Redis,
a slow query) holds one thread, not the whole process as a sync worker does.

Why a subclass: gunicorn answers the requests it rejects before the application sees
them (a request line over ``--limit-request-line``: 414; headers over
``--limit-request-fields`` / ``--limit-request-field_size``: 431; a malformed request:
400) with an HTML page, in `Worker.handle_error`. No setting changes that page, so this
worker lets gunicorn choose the status and log the request as usual, then sends the
envelope of web/errors.py with that status instead of the HTML.

A 413 (a body over MAX_CONTENT_LENGTH, refused before it is read) closes its connection
cleanly: the answer says ``Connection: close`` (gunicorn drops an application's own
Connection header, so the worker marks the response), then the connection lingers: the
write side is shut (FIN after the answer), and what the client still sends is read and
dropped, for at most `LINGER_S` and `LINGER_MAX_BYTES`, until it closes. A client that
sends its whole body before reading (most do) then reads the 413 instead of a reset, and
never sends a next request on a connection the server has given up. The bounds cap what
one such client holds: one thread for `LINGER_S` at most.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from gunicorn import util
from gunicorn.workers.gthread import ThreadWorker

from config.collector import space_collections
from config.settings import Settings
from observability.heartbeat import Heartbeat
from redis_adapters.redis_clients import redis_client
from services.domain.errors import ParamError, ServiceError

#: Envelope messages of the statuses gunicorn answers by itself (see web/errors.py).
GUNICORN_ERROR_MESSAGE: dict[int, str] = {
    400: "请求格式错误",
    403: "无权访问该接口",
    414: "请求行过长",
    417: "不支持该 Expect 请求头",
    431: "请求头过大",
    501: "不支持该 Transfer-Encoding",
}


#: How long, and how many bytes, a 413's connection reads and drops the rest of its body.
LINGER_S = 5.0
LINGER_MAX_BYTES = 16 * 1024 * 1024

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def linger(sock: socket.socket, *, timeout_s: float = LINGER_S, max_bytes: int = LINGER_MAX_BYTES) -> int:
    """Shut the write side, then read and drop until the client closes or a bound is hit; bytes read."""
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        return 0
    deadline = time.monotonic() + timeout_s
    drained = 0
    while drained < max_bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            sock.settimeout(remaining)
            data = sock.recv(65536)
        except OSError:  # socket.timeout included
            break
        if not data:
            break
        drained += len(data)
    return drained


class _CapturedSocket:
    """Stands in for the client socket while gunicorn writes its HTML answer."""

    def __init__(self) -> None:
        self.data = b""

    def gettimeout(self) -> float:
        return 0.0  # util.write_nonblock then calls sendall() without touching blocking mode

    def sendall(self, data: bytes) -> None:
        self.data += data


def envelope_response(status: int, reason: str) -> bytes:
    """The raw HTTP response of gunicorn's error `status`, with the envelope as its body."""
    if status >= 500 and status != 501:
        code, message = ServiceError.code, ServiceError.default_message
    else:
        code = ParamError.code if status == 400 else status
        message = GUNICORN_ERROR_MESSAGE.get(status, reason)
    body = json.dumps({"code": code, "message": message, "data": None}, ensure_ascii=False).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "\r\n"
    )
    return head.encode("latin-1") + body


def _status_line(raw: bytes) -> tuple[int, str] | None:
    first = raw.split(b"\r\n", 1)[0].decode("latin-1")
    parts = first.split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        return None
    return int(parts[1]), parts[2] if len(parts) > 2 else ""


class EnvelopeThreadWorker(ThreadWorker):  # type: ignore[misc]  # gunicorn has no type hints
    def run(self) -> None:
        """gunicorn's loop, with this process's heartbeat in the process registry
        (observability/liveness.py): kind `web`, doing `serving N connection(s)`."""
        # The client every process makes from REDIS_URL: a Sentinel or Cluster URL too.
        client = redis_client(Settings.from_env().redis_url, socket_connect_timeout=2, socket_timeout=5)
        heartbeat = Heartbeat(client, "web", lambda: f"serving {self.nr_conns} connection(s)").start()
        try:
            super().run()
        finally:
            heartbeat.stop(timeout=1)
            client.close()

    def load_wsgi(self) -> None:
        """The app, wrapped so that a 413 answer closes its connection (see the module's doc)."""
        super().load_wsgi()
        space_collections()  # a request's objects set off the collector many times otherwise
        app: WSGIApp = getattr(self, "wsgi")  # noqa: B009 - set by gunicorn, untyped
        self._closing = closing = threading.local()

        def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                if status.startswith("413"):
                    # gunicorn's Response: its start_response is a bound method of it.
                    start_response.__self__.force_close()  # type: ignore[attr-defined]
                    closing.linger = True
                return start_response(status, headers, exc_info)

            return app(environ, start)

        self.wsgi = wsgi

    def handle_request(self, req: Any, conn: Any) -> bool:
        self._closing.linger = False
        keepalive = bool(super().handle_request(req, conn))
        if self._closing.linger:
            self._closing.linger = False
            linger(conn.sock)
        return keepalive

    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: BaseException) -> None:
        captured = _CapturedSocket()
        # gunicorn picks the status, logs and writes the access log line; only its
        # HTML body is replaced.
        super().handle_error(req, captured, addr, exc)
        parsed = _status_line(captured.data)
        answer = envelope_response(*parsed) if parsed else captured.data
        try:
            util.write_nonblock(client, answer)
        except Exception:
            self.log.debug("Failed to send error message.")
