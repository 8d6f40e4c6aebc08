"""Processes of a benchmark: children that hand back a JSON result, and the stack's own
processes (the worker, the web app) started from the Procfile's own lines."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors.run_worker import WORKER_MODULE
from bench import ROOT
from bench.stores import redis_client
from scripts.processes import SessionProcess, procfile_command, wait_until

#: Marks the line of a child's stdout that carries its JSON result.
RESULT_PREFIX = "BENCH-RESULT "


def emit_result(data: dict[str, Any]) -> None:
    """Called by a child process: hand its result to the parent."""
    print(RESULT_PREFIX + json.dumps(data), flush=True)


def run_child(
    module: str,
    args: Sequence[str],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    show_stderr: bool = False,
) -> Any:
    """Run `python -m module args...` in a fresh interpreter and return its emitted result."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=None if show_stderr else subprocess.PIPE,
        text=True,
        timeout=timeout,
        check=False,
    )
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    raise RuntimeError(
        f"{module} {' '.join(args)} exited {proc.returncode} without a result:\n"
        f"{proc.stdout[-2000:]}\n{(proc.stderr or '')[-4000:]}"
    )


# -- processes of the stack: `dramatiq` workers, the web app under gunicorn -------------------


class Service(SessionProcess):
    """A process of the stack in a session of its own, logging to a temporary file
    (deleted by stop())."""

    def __init__(self, name: str, argv: Sequence[str], env: dict[str, str], *, cwd: Path = ROOT) -> None:
        import tempfile

        self.name = name
        fd, log_name = tempfile.mkstemp(prefix=f"mi-bench-{name}-", suffix=".log")
        os.close(fd)
        super().__init__(
            argv, env={**os.environ, "PYTHONUNBUFFERED": "1", **env}, log_path=Path(log_name), cwd=cwd
        )

    def stop(self, timeout: float = 30.0, *, graceful: bool = True) -> int:
        """SIGTERM (SIGKILL after `timeout`), or SIGKILL at once when not `graceful`:
        a benchmark's worker is killed once the measurement is over, its keys deleted."""
        status = super().stop(timeout, graceful=graceful)
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)
        return status

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stack_env(redis: str, database: str) -> dict[str, str]:
    """Environment of the stack's processes: our servers, a secret, an admin token."""
    return {
        "REDIS_URL": redis,
        "DATABASE_URL": database,
        "SECRET_KEY": BENCH_SECRET,
        "ADMIN_TOKENS": BENCH_ADMIN_TOKEN,
        "DB_POOL_SIZE": "10",
    }


BENCH_SECRET = "bench-secret-key"
BENCH_ADMIN_TOKEN = "bench-admin-token"


def start_worker(
    redis: str,
    database: str,
    *,
    module: str = "actors.worker",
    processes: int = 1,
    threads: int = 8,
    env: dict[str, str] | None = None,
    queues: int = 1,
    via: Sequence[str] = (),
    cwd: Path = ROOT,
) -> Service:
    """The Procfile's worker line (for `module` actors.worker; a benchmark's own worker module,
    e.g. bench.workers.slow, runs as `dramatiq MODULE` with the same options), shaped by
    WORKER_PROCESSES / WORKER_THREADS; returns once its consumers beat (`queues` per process).
    `via` prefixes the command (e.g. `ip netns exec NAME`); `env` may then point REDIS_URL /
    DATABASE_URL at addresses seen from there, while `redis` is where this process watches
    the heartbeats. `cwd` runs the code of another tree (an export of another commit: before
    and after in one run); the virtualenv, and so the broker library, stay this one's."""
    client = redis_client(redis)
    before = set(client.zrange("broker:heartbeats", 0, -1))
    shape = {"WORKER_PROCESSES": str(processes), "WORKER_THREADS": str(threads)}
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **stack_env(redis, database), **shape, **(env or {})}
    if module == WORKER_MODULE:
        argv, full_env = procfile_command("worker", full_env)
    else:
        argv = [
            sys.executable,
            "-m",
            "dramatiq",
            module,
            "--processes",
            str(processes),
            "--threads",
            str(threads),
        ]
    service = Service("worker", [*via, *argv], full_env, cwd=cwd)

    def ready() -> bool:
        if not service.alive():
            raise RuntimeError(f"worker exited:\n{service.output()[-3000:]}")
        return len(set(client.zrange("broker:heartbeats", 0, -1)) - before) >= processes * queues

    try:
        wait_until(ready, timeout=60, what="the worker's consumers", interval=0.05)
    except TimeoutError as exc:
        log = service.output()[-3000:]
        service.stop(graceful=False)
        raise TimeoutError(f"{exc}; worker log:\n{log}") from None
    return service


def free_port() -> int:
    """A TCP port free on loopback now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_http(service: Service, port: int, path: str = "/api/assessment/questions") -> None:
    """Until `service` answers HTTP on `port` (any status: it is up); raises if it exits."""
    import urllib.request

    def ready() -> bool:
        if not service.alive():
            raise RuntimeError(f"{service.name} exited:\n{service.output()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1):
                return True
        except OSError as exc:
            return getattr(exc, "code", None) is not None  # any HTTP answer: the app is up

    wait_until(ready, timeout=60, what=service.name, interval=0.1)


def start_web(redis: str, database: str, *, workers: int = 2, threads: int = 1) -> tuple[Service, int]:
    """The real app from the Procfile's web line on a free loopback port (WEB_CONCURRENCY
    workers of WEB_THREADS threads)."""
    port = free_port()
    shape = {"PORT": str(port), "WEB_CONCURRENCY": str(workers), "WEB_THREADS": str(threads)}
    argv, full_env = procfile_command(
        "web", {**os.environ, "PYTHONUNBUFFERED": "1", **stack_env(redis, database), **shape}
    )
    service = Service("web", argv, full_env)
    wait_for_http(service, port)
    return service, port
