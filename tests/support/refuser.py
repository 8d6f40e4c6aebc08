"""A server that is down, and counts how often it is tried.

`CountingRefuser` listens on a loopback port and resets every connection as soon as it
arrives, counting them. To a client it is a server that is gone (a connection error at
once); to a test it says how many times the client tried, so "no retry was made" or "the
database was not even tried" is asserted as a count, not as a duration a loaded machine
can stretch (a closed port, tests/support/urls.py, refuses before anything can count).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


class CountingRefuser:
    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._count = 0
        threading.Thread(target=self._serve, name="counting-refuser", daemon=True).start()

    @property
    def attempts(self) -> int:
        """Connections taken so far."""
        with self._lock:
            return self._count

    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def database_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/nothing"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                self._count += 1
            # SO_LINGER 0: close() sends a reset, as a port nobody listens on would.
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
