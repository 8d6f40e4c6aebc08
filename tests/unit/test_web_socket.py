"""scripts/web_socket.py: `make run` owns the web port before it announces it.

Loopback sockets only: the bind that is the check, the fallback to a free port, the
refusal of an explicit port that is taken, and the hand-off of the listening socket
(SCM_RIGHTS) to another process, which then accepts on the same port.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scripts import web_socket


def test_a_free_preferred_port_is_taken_as_it_is() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    listener = web_socket.bind_listener("127.0.0.1", port, fallback=True)
    with listener:
        assert listener.getsockname()[1] == port


def test_a_taken_preferred_port_moves_to_a_free_one_already_bound() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        with web_socket.bind_listener("127.0.0.1", taken, fallback=True) as listener:
            moved = listener.getsockname()[1]
            assert moved != taken
            # Already listening: a client connects at once, nobody else can have it.
            with socket.create_connection(("127.0.0.1", moved), timeout=2):
                pass


def test_an_explicit_port_that_is_taken_is_refused_with_a_clear_error() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        taken = other.getsockname()[1]
        with pytest.raises(web_socket.PortInUse, match=f"port {taken} on 127.0.0.1 is in use"):
            web_socket.bind_listener("127.0.0.1", taken, fallback=False)


def test_the_listening_socket_is_handed_to_the_exec_ed_program_at_descriptor_3(tmp_path: Path) -> None:
    """What the web line's wrapper does: the program it execs finds LISTEN_FDS=1, its own pid
    in LISTEN_PID and the listener at fd 3, and accepts a connection made to the port."""
    listener = web_socket.bind_listener("127.0.0.1", 0, fallback=True)
    port = listener.getsockname()[1]
    handoff = web_socket.Handoff(listener, tmp_path / "web.sock")
    handoff.start()
    assert (tmp_path / "web.sock").stat().st_mode & 0o077 == 0  # its owner only
    program = textwrap.dedent(
        """
        import os, socket
        assert os.environ["LISTEN_FDS"] == "1", os.environ
        assert os.environ["LISTEN_PID"] == str(os.getpid())
        sock = socket.socket(fileno=3)
        conn, _ = sock.accept()
        conn.sendall(b"served by " + str(sock.getsockname()[1]).encode())
        conn.close()
        """
    )
    try:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "scripts.web_socket",
                str(tmp_path / "web.sock"),
                "--",
                sys.executable,
                "-c",
                program,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.settimeout(30)
            assert client.recv(100) == f"served by {port}".encode()
        _, err = child.communicate(timeout=30)
        assert child.returncode == 0, err
    finally:
        handoff.stop()
        listener.close()
    assert not (tmp_path / "web.sock").exists()
