"""gunicorn's threaded worker, answering its own errors with the JSON envelope.

The Procfile names it (``--worker-class web.gunicorn_worker.EnvelopeThreadWorker``).
Why `gthread`: a connection waits in the worker's poller, not in a thread, until its
request has arrived, and between keep-alive requests, so idle or slow clients do not take
the threads the application needs; and a request blocked on a server (a hung Redis,
a slow query) holds one thread, not the whole process as a sync worker does.

Requests are read whole in the poller (web/request_reader.py): the head, and the body up
to MAX_CONTENT_LENGTH, before a thread takes them. A client that sends its head and part of
a body, then waits, holds a descriptor and a few kilobytes, never a thread; it has
`REQUEST_TIMEOUT_S` from its connection (or from its first byte after a keep-alive wait)
to send the request, then gets a 408 and the connection is closed. A head over
MAX_HEAD_BYTES is answered 431 from the poller. A client that waits for "100 Continue"
before sending its body gets it from the poller (gunicorn sends a second one before the
application runs: a client must accept several). In a thread every read and write of the
connection has a timeout (`THREAD_IO_TIMEOUT_S`): nothing holds a thread without a deadline.

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

import contextlib
import errno
import json
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from gunicorn import util
from gunicorn.workers.gthread import TConn, ThreadWorker

from config.collector import space_collections
from config.settings import Settings
from observability.heartbeat import Heartbeat
from redis_adapters.redis_clients import redis_client
from services.domain.errors import ParamError, ServiceError
from web.fields import MAX_CONTENT_LENGTH
from web.request_reader import Progress, RequestReader

#: Envelope messages of the statuses gunicorn answers by itself (see web/errors.py).
GUNICORN_ERROR_MESSAGE: dict[int, str] = {
    400: "请求格式错误",
    403: "无权访问该接口",
    414: "请求行过长",
    408: "请求未在时限内发送完整",
    417: "不支持该 Expect 请求头",
    431: "请求头过大",
    501: "不支持该 Transfer-Encoding",
}


#: How long, and how many bytes, a 413's connection reads and drops the rest of its body.
LINGER_S = 5.0
LINGER_MAX_BYTES = 16 * 1024 * 1024
#: How long a client has to send its whole request (head and body up to the cap), from its
#: connection or from its first byte after a keep-alive wait: 64 KiB in 10 s is 6.4 KB/s.
REQUEST_TIMEOUT_S = 10.0
#: Longest wait of one read or write of a connection in a thread (the request is there
#: already; this bounds a response to a client that does not read it).
THREAD_IO_TIMEOUT_S = 30.0
#: Bytes taken from the socket per read in the poller.
READ_CHUNK = 65536
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"

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


class TimedSocket(socket.socket):
    """A client connection whose blocking mode is a timeout: gunicorn sets a connection
    blocking before a thread serves it; this one then waits at most THREAD_IO_TIMEOUT_S per
    read or write (a write of a whole answer counts as one, Python's sendall)."""

    def setblocking(self, flag: bool) -> None:
        if flag:
            self.settimeout(THREAD_IO_TIMEOUT_S)
        else:
            super().setblocking(False)


class _Reading:
    """A connection whose request is being read in the poller."""

    def __init__(self, deadline: float) -> None:
        self.reader = RequestReader(MAX_CONTENT_LENGTH)
        self.deadline = deadline
        self.continued = False


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

    # -- reading each request whole in the poller -------------------------------------------

    def init_process(self) -> None:
        self._reading: dict[TConn, _Reading] = {}
        super().init_process()

    def accept(self, listener: socket.socket) -> None:
        """gunicorn's accept, with the connection as a `TimedSocket`."""
        try:
            client_sock, client_addr = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        sock = TimedSocket(fileno=client_sock.detach())
        self.enqueue_req(TConn(self.cfg, sock, client_addr, listener.getsockname()))

    def enqueue_req(self, conn: TConn) -> None:
        """Every way to a thread (a new connection, a kept-alive one that became readable, the
        next request already read behind the last) goes through the poller's reading first."""
        if self.cfg.is_ssl:  # the handshake needs a thread; this deployment has no TLS
            super().enqueue_req(conn)
            return
        reading = _Reading(time.monotonic() + REQUEST_TIMEOUT_S)
        self._reading[conn] = reading
        if conn.parser is not None:
            held = conn.parser.unreader.take_buffered()
            if held and reading.reader.feed(held) is not Progress.MORE:
                self._settle(conn, reading)
                return
        conn.sock.setblocking(False)
        self._read(conn, registered=False)

    def _on_readable(self, conn: TConn, _client: Any) -> None:
        self._read(conn, registered=True)

    def _read(self, conn: TConn, *, registered: bool) -> None:
        reading = self._reading[conn]
        while True:
            try:
                data = conn.sock.recv(READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                self._drop(conn, registered=registered)
                return
            if not data:  # the client closed, or gave up halfway
                self._drop(conn, registered=registered)
                return
            progress = reading.reader.feed(data)
            if progress is not Progress.MORE:
                if registered:
                    self.poller.unregister(conn.sock)
                self._settle(conn, reading)
                return
            if reading.reader.waits_for_body and not reading.continued:
                reading.continued = True
                self._send_quietly(conn, CONTINUE)
        if not registered:
            self.poller.register(
                conn.sock, selectors.EVENT_READ, lambda client: self._on_readable(conn, client)
            )

    def _settle(self, conn: TConn, reading: _Reading) -> None:
        """The request is here (or its head is too large): to a thread, or answered 431 now."""
        del self._reading[conn]
        if reading.reader.progress is Progress.HEAD_TOO_LARGE:
            self.log.info("closing %s: a request head over %d bytes", conn.client, len(reading.reader.data))
            self._send_quietly(conn, envelope_response(431, "Request Header Fields Too Large"))
            self._close(conn)
            return
        conn.init()  # the parser, reading from the socket: the request's bytes go in front
        conn.parser.unreader.unread(bytes(reading.reader.data))
        conn.data_ready = True
        super().enqueue_req(conn)

    def murder_pending(self) -> None:
        """gunicorn's expiry of waiting connections, and of requests not sent in time: a 408
        for one begun, a plain close for a connection that sent nothing."""
        super().murder_pending()
        now = time.monotonic()
        for conn, reading in list(self._reading.items()):
            if reading.deadline > now:
                continue
            del self._reading[conn]
            self.poller.unregister(conn.sock)
            if reading.reader.data:
                self.log.info(
                    "closing %s: its request was not sent within %.0f s", conn.client, REQUEST_TIMEOUT_S
                )
                self._send_quietly(conn, envelope_response(408, "Request Timeout"))
            self._close(conn)

    def _drop(self, conn: TConn, *, registered: bool) -> None:
        del self._reading[conn]
        if registered:
            self.poller.unregister(conn.sock)
        self._close(conn)

    def _close(self, conn: TConn) -> None:
        self.nr_conns -= 1
        conn.close()

    @staticmethod
    def _send_quietly(conn: TConn, data: bytes) -> None:
        """A short answer on a non-blocking socket: what fits in its buffer (all of it, in practice)."""
        with contextlib.suppress(OSError):
            conn.sock.send(data)

    # -- the application's answers -------------------------------------------------------------

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
