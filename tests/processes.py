"""Helpers for tests that run the real processes: `dramatiq actors` workers, the Procfile's
process types under honcho, private Redis servers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import servers  # noqa: E402  (scripts/servers.py: the same code `make test` starts servers with)

RedisServer = servers.RedisServer


def wait_until(check: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class WorkerProcess:
    """`python -m dramatiq actors` in a session of its own, as the Procfile's worker line runs it."""

    def __init__(
        self,
        *,
        database_url: str,
        redis_url: str,
        log_path: Path,
        threads: int = 1,
        processes: int = 1,
        env: dict[str, str] | None = None,
    ) -> None:
        self.log_path = log_path
        full_env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        self.log = log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dramatiq",
                "actors",
                "--processes",
                str(processes),
                "--threads",
                str(threads),
            ],
            cwd=ROOT,
            env=full_env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def signal(self, signum: int) -> None:
        """Signal the whole process group: the dramatiq supervisor and its worker processes."""
        os.killpg(self.process.pid, signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self, timeout: float = 30) -> int:
        if self.process.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()
        return int(self.process.returncode)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextmanager
def row_locked(database_url: str, record_id: int) -> Iterator[None]:
    """Hold the record's row lock: generation blocks on it, i.e. is stopped mid-transaction."""
    with psycopg.connect(database_url.replace("+psycopg", "")) as conn:
        conn.execute("SELECT id FROM assessment_records WHERE id = %s FOR UPDATE", (record_id,))
        yield
        conn.rollback()


def sessions_waiting_for_a_lock(database_url: str) -> int:
    with psycopg.connect(database_url.replace("+psycopg", ""), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
        return int(row[0]) if row else 0


# -- the Procfile's processes, as `make run` runs them ---------------------------------------

#: In the environment of every process a `ProcfileStack` starts: finds them all at clean-up.
STACK_MARKER = "MI_TEST_STACK"


def procfile(path: Path = ROOT / "Procfile") -> dict[str, str]:
    """The Procfile's process types and commands, parsed as honcho parses it."""
    from honcho.environ import parse_procfile

    return dict(parse_procfile(path.read_text()).processes)


class ProcfileStack:
    """`honcho start TYPES` on the repository's Procfile, as `make run` runs it.

    honcho runs each line through `sh -c` in a session of its own with `env` (no .env file
    is read) and stops them as platforms do: SIGTERM to each process group, SIGKILL 5 s
    later. `stop()` asks honcho for that; `kill()` SIGKILLs whatever is left, found by a
    marker in the processes' environment, so nothing survives a failed test.
    """

    def __init__(self, types: list[str], *, env: dict[str, str], log_path: Path) -> None:
        self.types = types
        self.log_path = log_path
        self.marker = f"{os.getpid()}-{time.monotonic_ns()}"
        honcho = Path(sys.executable).parent / "honcho"
        full_env = {
            **env,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', os.defpath)}",
            "PYTHONUNBUFFERED": "1",
            STACK_MARKER: self.marker,
        }
        self.log = log_path.open("ab")
        self.process = subprocess.Popen(
            [
                *(str(honcho), "start", "--no-colour", "--env", os.devnull),
                *("--app-root", str(ROOT), "--procfile", "Procfile", *types),
            ],
            cwd=ROOT,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def pids(self) -> list[int]:
        """Every live process of this stack (honcho, the shells and what they run)."""
        return servers.pids_with_env(STACK_MARKER, self.marker)

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Stop as a Procfile runner does: honcho signals every process group, kills after 5 s."""
        if self.alive():
            self.process.send_signal(signum)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=timeout)
        self.kill()
        return int(self.process.returncode) if self.process.returncode is not None else -9

    def kill(self) -> None:
        """SIGKILL whatever of this stack is still running (nothing, after a clean stop)."""
        groups = set()
        for pid in [*self.pids(), self.process.pid]:
            with contextlib.suppress(ProcessLookupError):
                groups.add(os.getpgid(pid))
        groups.discard(os.getpgrp())
        servers.stop_process_groups(groups, grace=0)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if not self.log.closed:
            self.log.close()
