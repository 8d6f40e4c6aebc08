"""A command in a process group of its own, its output in a log file: the one wrapper the
tests (tests/support/processes.py, the e2e fault test) and the benchmarks (bench/launch.py)
start the stack's processes with.

It lives here, with the servers harness, rather than in tests/: the benchmarks are tooling
too and import scripts (servers) already, while nothing outside tests/ should import tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from scripts import lifeline

ROOT = Path(__file__).resolve().parent.parent


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    error: type[Exception] = TimeoutError,
) -> None:
    """Poll `check` every `interval` s until it is true; raise `error` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise error(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


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
        """SIGKILL the process group and reap the program."""
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
