"""Helpers for tests that run the real processes: the Procfile's worker line, the Procfile's
process types as `make run` runs them (under supervisord), private Redis servers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import xmlrpc.client
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from scripts import (
    processes,
    servers,  # the same code `make test` starts servers with
)
from scripts.processes import ProcfileProcess, SessionProcess

ROOT = Path(__file__).resolve().parents[2]

RedisServer = servers.RedisServer


def wait_until(check: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.05) -> None:
    """scripts.processes.wait_until failing as a test fails: with an AssertionError."""
    processes.wait_until(check, timeout=timeout, what=what, interval=interval, error=AssertionError)


class WorkerProcess(ProcfileProcess):
    """The Procfile's worker line (`python -m actors.run_worker ...`, read from the Procfile
    itself) in a session of its own, shaped by WORKER_PROCESSES / WORKER_THREADS."""

    def __init__(
        self,
        *,
        database_url: str,
        redis_url: str,
        log_path: Path,
        threads: int = 1,
        processes: int = 1,
        env: dict[str, str] | None = None,
        queues: tuple[str, ...] = (),
    ) -> None:
        """`queues`: consume only these (Dramatiq's `--queues`, after the line's options);
        all declared ones by default."""
        full_env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "PYTHONUNBUFFERED": "1",
            "WORKER_PROCESSES": str(processes),
            "WORKER_THREADS": str(threads),
            **(env or {}),
        }
        super().__init__(
            "worker", env=full_env, log_path=log_path, args=("--queues", *queues) if queues else ()
        )


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


def procfile(path: Path = ROOT / "Procfile") -> dict[str, str]:
    """The Procfile's process types and commands, parsed as honcho parses it."""
    from honcho.environ import parse_procfile

    return dict(parse_procfile(path.read_text()).processes)


class RunStack:
    """`python -m scripts.run_stack` (what `make run` runs) on given servers, in a state folder of its own.

    It runs the Procfile's release step, then supervisord on the long-running types, and
    stops as `make run` does on SIGTERM: supervisord signals every process group and
    SIGKILLs what still runs after MI_STOP_TIMEOUT_S. `kill()` SIGKILLs whatever is left,
    found by the marker run_stack puts in its processes' environment, so nothing
    survives a failed test. No .env file is read (MI_ENV_FILE=/dev/null).
    """

    def __init__(
        self, *, env: dict[str, str], state: Path, log_path: Path, procfile: Path | None = None
    ) -> None:
        self.state = state
        self.log_path = log_path
        full_env = {k: v for k, v in env.items() if not k.startswith(("MI_", "dramatiq_", "HONCHO_"))}
        full_env.update(
            MI_STATE_DIR=str(state),
            MI_ENV_FILE=os.devnull,
            PYTHONUNBUFFERED="1",
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', os.defpath)}",
        )
        for key in ("MI_STOP_TIMEOUT_S",):
            if key in env:
                full_env[key] = env[key]
        if procfile is not None:
            full_env["MI_PROCFILE"] = str(procfile)
        self.service = SessionProcess(
            [sys.executable, "-m", "scripts.run_stack"],
            env=full_env,
            log_path=log_path,
            stdin=subprocess.DEVNULL,
        )
        self.process = self.service.process

    def output(self) -> str:
        return self.service.output()

    def alive(self) -> bool:
        return self.service.alive()

    def pids(self) -> list[int]:
        """Every live process of this stack (supervisord and what it runs), run_stack aside."""
        return servers.pids_with_env("MI_STACK_STATE", str(self.state))

    def supervisor(self) -> Any:
        """supervisord's XML-RPC interface (`supervisorctl` speaks it) on the state folder's socket,
        with the credentials of its configuration's [supervisorctl] section, as supervisorctl."""
        import configparser

        from supervisor.xmlrpc import SupervisorTransport

        conf = configparser.RawConfigParser()
        conf.read(self.state / "supervisord.conf")
        user = conf.get("supervisorctl", "username", fallback=None)
        password = conf.get("supervisorctl", "password", fallback=None)
        transport = SupervisorTransport(user, password, f"unix://{self.state / 'supervisor.sock'}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport).supervisor

    def info(self, name: str) -> dict[str, Any]:
        """supervisord's view of a Procfile type: state name, pid, …"""
        return dict(self.supervisor().getProcessInfo(f"stack:{name}"))

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Stop as Ctrl-C / SIGTERM stops `make run`: the processes gracefully, then it exits."""
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
        if not self.service.log.closed:
            self.service.log.close()
