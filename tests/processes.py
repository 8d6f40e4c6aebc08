"""Helpers for tests that run the real processes: `dramatiq actors` workers, private Redis servers."""

from __future__ import annotations

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
