"""The tests' TCP fault proxy itself: closing it ends every forwarding thread, hung or not (a
thread left spinning on a closed hung proxy held the GIL and slowed every later test of its
process to a crawl)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from scripts.faults import FaultProxy


@pytest.fixture
def upstream() -> Iterator[str]:
    """A server that accepts connections and keeps them open, as Redis would."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    listener.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize("hung", [False, True])
def test_closing_the_proxy_ends_its_forwarding_threads(upstream: str, hung: bool) -> None:
    before = set(forwarding_threads_any())
    proxy = FaultProxy(upstream)
    host, port = proxy.url.split("//")[1].split("/")[0].split(":")
    clients = [socket.create_connection((host, int(port)), timeout=5) for _ in range(3)]
    deadline = time.monotonic() + 10
    while len(set(forwarding_threads_any()) - before) < 3:
        assert time.monotonic() < deadline, "the proxy never served its three connections"
        time.sleep(0.01)
    if hung:
        proxy.hang()
        time.sleep(0.2)  # the threads are in their hung wait
    proxy.close()
    mine = set(forwarding_threads_any()) - before
    for thread in mine:
        thread.join(5)
    assert [t for t in mine if t.is_alive()] == []
    for client in clients:
        client.close()


def forwarding_threads_any() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.endswith("(_serve)") and t.is_alive()]
