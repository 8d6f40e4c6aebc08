"""A command in a process group of its own, its output in a log file: the one wrapper the
tests (tests/support/processes.py, the e2e fault test) and the benchmarks (bench/launch.py)
start the stack's processes with; `ProcfileProcess` runs a type of the Procfile from the
Procfile's own line, so what tests and benchmarks run is what ships.

It lives here, with the servers harness, rather than in tests/: the benchmarks are tooling
too and import scripts (servers) already, while nothing outside tests/ should import tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from scripts import lifeline, procfile_exec

ROOT = Path(__file__).resolve().parent.parent


#: The longest pause between two checks of a long wait (`wait_until`).
MAX_POLL_INTERVAL_S = 0.5


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    error: type[Exception] = TimeoutError,
) -> None:
    """Poll `check` until it is true; raise `error` after `timeout` s.

    Every `interval` s at first; a wait that lasts polls less often, every tenth of the time
    waited so far (at most `MAX_POLL_INTERVAL_S`): a check is a query or a request, and the
    long waits (a retry's 60 s, a stack's start) would otherwise spend the cores other work
    needs, for an answer at most a tenth later."""
    started = time.monotonic()
    deadline = started + timeout
    while not check():
        now = time.monotonic()
        if now > deadline:
            raise error(f"timed out after {timeout} s waiting for {what}")
        time.sleep(max(interval, min((now - started) / 10, MAX_POLL_INTERVAL_S)))


class SessionProcess:
    """`argv` started with `start_new_session` (so a signal reaches its children too), stdout
    and stderr appended to `log_path`, run from the project root unless `cwd` says otherwise.

    It ends with the process that started it, however that one ends (killed included): it
    carries the starter's lifeline marks (scripts/lifeline.py), whatever `env` says."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        log_path: Path,
        cwd: Path = ROOT,
        stdin: int | IO[bytes] | None = None,
    ) -> None:
        self.log_path = log_path
        self.log = log_path.open("ab")
        lifeline.attach()
        self.process = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env={**env, **lifeline.marks()},
            stdin=stdin,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        lifeline.track(self.process.pid)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        """Signal the whole process group: the program and whatever it started."""
        os.killpg(self.process.pid, signum)

    def kill(self, wait: float = 10.0) -> None:
        """SIGKILL the process group (whatever of it is left: again is harmless) and reap the program."""
        with contextlib.suppress(ProcessLookupError):
            self.signal(signal.SIGKILL)
        self.process.wait(timeout=wait)

    def stop(self, timeout: float = 30.0, *, graceful: bool = True) -> int:
        """SIGTERM the group (SIGKILL at once when not `graceful`), SIGKILL it after `timeout` s;
        then close the log. Returns the program's exit status."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.signal(signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.kill()
        self.log.close()
        return int(self.process.returncode)


def procfile_command(
    name: str, env: Mapping[str, str], args: Sequence[str] = (), procfile: Path = ROOT / "Procfile"
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that run process type `name` from the Procfile's own line
    (scripts/procfile_exec.py), as `make run`, honcho and the systemd units run it: through
    `sh -c`, the environment's variables filling the line's `${...}` (WORKER_PROCESSES,
    WORKER_THREADS, PORT, WEB_CONCURRENCY ...), `args` after the line's own. The
    interpreter's folder comes first on PATH, so the line's `python`, `gunicorn` ... are
    this environment's."""
    bin_dir = str(Path(sys.executable).parent)
    path = env.get("PATH", os.defpath)
    return procfile_exec.command_for(name, procfile, args), {**env, "PATH": f"{bin_dir}{os.pathsep}{path}"}


class ProcfileProcess(SessionProcess):
    """Process type `name` run from the Procfile's own line (`procfile_command`), from the
    Procfile's folder, in a session of its own."""

    def __init__(
        self,
        name: str,
        *,
        env: Mapping[str, str],
        log_path: Path,
        args: Sequence[str] = (),
        procfile: Path = ROOT / "Procfile",
    ) -> None:
        self.name = name
        argv, full_env = procfile_command(name, env, args, procfile)
        super().__init__(argv, env=full_env, log_path=log_path, cwd=procfile.resolve().parent)
