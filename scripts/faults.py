"""A TCP proxy that lets a test cut off or hang a server it does not own.

Tests may not stop or flush the machine's PostgreSQL or Redis, so processes under test
reach them through a `FaultProxy` on a loopback port: `down()` drops every open
connection and refuses new ones (as a stopped server does), `up()` serves again on the
same port, `hang()` keeps connections open but forwards nothing (as a SIGSTOPped
server does; its host's TCP stack still acknowledges), `silence()` drops every packet of
the proxy's port, both ways, with iptables (as a host gone off the network: no reset, no
acknowledgement; needs root) until `up()`. `lose_reply(request, reply)` lets the next
request that holds `request` reach the server, waits for the server's `reply` and resets the
client's connection instead of forwarding it: a request that took effect, its reply lost.
"""

from __future__ import annotations

import contextlib
import select
import shutil
import socket
import subprocess
import threading
import time
from urllib.parse import urlsplit, urlunsplit

BUFFER = 65536
#: How long `lose_reply()` waits for the server's reply before resetting the client anyway.
REPLY_WAIT_S = 10.0


class FaultProxy:
    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        self._parts = parts
        self.upstream = (parts.hostname or "127.0.0.1", int(parts.port or 0))
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        #: The threads forwarding the open connections (`_serve`), to wait for their resets.
        self._servers: set[threading.Thread] = set()
        self._listener: socket.socket | None = None
        self._hung = threading.Event()
        self._closed = False
        #: Seconds each forwarded chunk waits (`latency()`).
        self._latency = 0.0
        #: The iptables rules of `silence()`, to delete again.
        self._silenced: list[list[str]] = []
        #: (request marker, reply marker) of `lose_reply()`, until a request matched.
        self._lose: tuple[bytes, bytes] | None = None
        self.port = 0
        self.up()

    @property
    def url(self) -> str:
        """The upstream URL with this proxy's address in place of the server's."""
        auth = ""
        if self._parts.username:
            auth = self._parts.username + (f":{self._parts.password}" if self._parts.password else "") + "@"
        return urlunsplit(self._parts._replace(netloc=f"{auth}127.0.0.1:{self.port}"))

    def up(self) -> None:
        """Serve (again, on the same port)."""
        self._hung.clear()
        self._unsilence()
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(128)
            self.port = listener.getsockname()[1]
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        """Refuse connections and reset the open ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, set()
            servers = set(self._servers)
        if listener is not None:
            # close() alone leaves the socket listening while _accept() is blocked in
            # accept() on it, so up() could not bind the port again; shutdown() wakes it.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in conns:
            _reset(conn)
        _joined(servers)

    def hang(self) -> None:
        """Accept and keep connections, forward nothing, until `up()`."""
        self._hung.set()

    def silence(self) -> None:
        """Drop every packet to or from the proxy's port on loopback (iptables), until `up()`."""
        iptables = shutil.which("iptables")
        if iptables is None:
            raise RuntimeError("silence() needs iptables (Debian's iptables package) and root")
        for direction in ("--dport", "--sport"):
            rule = ["INPUT", "-i", "lo", "-p", "tcp", direction, str(self.port), "-j", "DROP"]
            subprocess.run([iptables, "-I", *rule], check=True, capture_output=True, timeout=10)
            self._silenced.append([iptables, "-D", *rule])

    def _unsilence(self) -> None:
        while self._silenced:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(self._silenced.pop(), check=False, capture_output=True, timeout=10)

    def latency(self, seconds: float) -> None:
        """Delay every chunk forwarded (either way) by `seconds`; 0 ends it."""
        self._latency = max(0.0, seconds)

    def lose_reply(self, request: bytes, reply: bytes) -> None:
        """The next chunk a client sends that holds `request` is forwarded; the server's answer is
        read until it holds `reply` (at most `REPLY_WAIT_S`) and thrown away, and the client's
        connection reset. Once; later connections and chunks are served normally."""
        with self._lock:
            self._lose = (request, reply)

    def drop(self) -> None:
        """Reset the open connections (RST), keep accepting new ones."""
        with self._lock:
            conns, self._conns = self._conns, set()
            servers = set(self._servers)
        for conn in conns:
            _reset(conn)
        _joined(servers)

    def half_close(self) -> None:
        """Shut the sending side of every open connection (both peers read an end of stream,
        may still write); new connections are served normally."""
        with self._lock:
            conns = set(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        # A forwarding thread of a hung proxy leaves its wait once closed: it must then end,
        # not spin on the hang (a closed hung proxy's threads held the GIL for good).
        self._closed = True
        self._unsilence()
        self.down()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by down()
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            client.close()
            return
        with self._lock:
            if self._listener is None:
                client.close()
                server.close()
                return
            self._conns |= {client, server}
            self._servers.add(threading.current_thread())
        pair = {client: server, server: client}
        try:
            while True:
                if self._closed:
                    return
                if self._hung.is_set():
                    self._hung_wait()
                    continue
                readable, _, _ = select.select(list(pair), [], [], 0.1)
                for sock in readable:
                    data = sock.recv(BUFFER)
                    if not data:
                        return
                    if self._latency:
                        time.sleep(self._latency)
                    pair[sock].sendall(data)
                    lost = self._reply_to_lose(data) if sock is client else None
                    if lost is not None:
                        _swallow_reply(server, lost)
                        _reset(client)
                        return
        except (OSError, ValueError):
            return
        finally:
            with self._lock:
                self._conns -= {client, server}
                self._servers.discard(threading.current_thread())
            for sock in (client, server):
                with contextlib.suppress(OSError):
                    sock.close()

    def _reply_to_lose(self, data: bytes) -> bytes | None:
        """The reply to wait for and lose if this chunk of a client's triggers `lose_reply()`
        (which it disarms), else None."""
        with self._lock:
            if self._lose is None or self._lose[0] not in data:
                return None
            reply, self._lose = self._lose[1], None
            return reply

    def _hung_wait(self) -> None:
        while self._hung.is_set() and not self._closed:
            threading.Event().wait(0.05)


def _joined(servers: set[threading.Thread]) -> None:
    """Wait (briefly) for the forwarding threads of reset connections to end. A socket closed
    while its thread sits in select() on it is only released, and its RST only sent, once that
    select() returns (up to its 0.1 s timeout): until then the peer would see a live connection
    that no longer exists, as no server that went away leaves one."""
    deadline = time.monotonic() + 2.0
    for thread in servers:
        if thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


def _swallow_reply(server: socket.socket, reply: bytes) -> None:
    """Read what the server sends until it holds `reply` (or it closes, or `REPLY_WAIT_S`)."""
    received = b""
    deadline = time.monotonic() + REPLY_WAIT_S
    while reply not in received and time.monotonic() < deadline:
        readable, _, _ = select.select([server], [], [], 0.1)
        if readable:
            data = server.recv(BUFFER)
            if not data:
                return
            received += data


def _reset(conn: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer gets a RST, as from a server that went away."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        conn.close()
