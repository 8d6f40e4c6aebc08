"""The web process's listening socket, bound by `make run` and handed to gunicorn.

Why: `make run` announces the web URL (banner, `export` line, `.state/stack.json`) before
gunicorn starts, and gunicorn binds its `--bind` address seconds later. Another stack
could take the port in between; the banner then pointed at someone else's server while
web crash-looped on "Address already in use". So `make run` binds the socket itself,
before it announces anything, and keeps it open while the stack runs: the port is owned
from the first moment, and stays owned while gunicorn restarts (connections wait in the
backlog instead of being refused).

How gunicorn gets it: supervisord closes every inherited descriptor above 2 in the
processes it starts, so the socket cannot simply be inherited. `make run` serves it on
a unix socket (`Handoff`, SCM_RIGHTS, to processes of its own account only), and the
Procfile's web line runs under `python -m scripts.web_socket PATH -- sh -c LINE`, which
fetches it, puts it at descriptor 3 with LISTEN_FDS=1 and LISTEN_PID set, and execs the
line: gunicorn takes it by systemd's socket-activation protocol (documented, and the
same `deploy/` could use with a `.socket` unit) and ignores its `--bind`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
import sys
import threading
from pathlib import Path

#: The first descriptor of systemd's socket-activation protocol (sd_listen_fds).
LISTEN_FDS_START = 3
#: gunicorn's own default `--backlog`.
BACKLOG = 2048


class PortInUse(OSError):
    """The port asked for explicitly (PORT) is taken by another process."""


def bind_listener(host: str, port: int, *, fallback: bool) -> socket.socket:
    """A listening TCP socket on `host`:`port`, bound as gunicorn binds (SO_REUSEADDR).

    With `fallback`, a taken port moves to a free one chosen by the kernel (the bind is the
    check, so no other process can take it in between); without, PortInUse.
    """
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        try:
            listener.bind(address)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            if not fallback:
                raise PortInUse(exc.errno, f"port {port} on {host} is in use by another process") from exc
            listener.bind((address[0], 0, *address[2:]))
        listener.listen(BACKLOG)
    except BaseException:
        listener.close()
        raise
    listener.set_inheritable(False)
    return listener


class Handoff(threading.Thread):
    """Serves `listener`'s descriptor on the unix socket `path` to processes of this account."""

    def __init__(self, listener: socket.socket, path: Path) -> None:
        super().__init__(name="web-socket-handoff", daemon=True)
        self.listener = listener
        self.path = path
        path.unlink(missing_ok=True)
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o077)  # its owner only, from its first moment
        try:
            self._server.bind(str(path))
        finally:
            os.umask(old_umask)
        self._server.listen(16)

    def run(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return  # closed by stop()
            with conn:
                creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                _pid, uid, _gid = struct.unpack("3i", creds)
                if uid != os.geteuid():
                    continue  # the folder is 0700 already; never hand the port to another account
                with contextlib.suppress(OSError):
                    socket.send_fds(conn, [b"L"], [self.listener.fileno()])

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self.path.unlink(missing_ok=True)


def receive(path: Path, timeout: float = 10.0) -> int:
    """The listening descriptor served at `path` (a new descriptor of this process)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(str(path))
        _, fds, _, _ = socket.recv_fds(conn, 1, 1)
    if len(fds) != 1:
        raise OSError(f"no listening socket received from {path}")
    return fds[0]


def exec_with_listener(path: Path, argv: list[str]) -> None:
    """Exec `argv` with the listener at descriptor 3, announced by LISTEN_FDS / LISTEN_PID.

    LISTEN_PID is this pid, which the exec keeps (and `sh -c "exec …"` keeps in turn), so
    the program that reads it, gunicorn's arbiter, finds its own pid there.
    """
    fd = receive(path)
    if fd != LISTEN_FDS_START:
        os.dup2(fd, LISTEN_FDS_START)
        os.close(fd)
    os.set_inheritable(LISTEN_FDS_START, True)
    env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
    os.execvpe(argv[0], argv, env)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m scripts.web_socket SOCKET_PATH -- COMMAND...", file=sys.stderr)
        return 2
    try:
        exec_with_listener(Path(argv[0]), argv[2:])
    except OSError as exc:
        print(f"web_socket: cannot get the web's listening socket from {argv[0]}: {exc}", file=sys.stderr)
        return 1
    return 0  # not reached: exec


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
