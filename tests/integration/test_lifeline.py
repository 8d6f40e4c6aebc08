"""What tests start ends when the test runner ends, however it ends (scripts/lifeline.py).

Without it, a worker started by a `make test` that is killed runs on unattended. Here a
real pytest (with the project's conftest) starts a worker from the Procfile's line and a
private Redis server, each in a session of its own, and is SIGKILLed; then
`scripts.with_test_services`, having started its private PostgreSQL and Redis and the
command, is SIGKILLed. Every process below either must end, and the temporary folder go.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from scripts import lifeline
from scripts.processes import SessionProcess
from tests.support.proc_stats import descendants, identity, still_running
from tests.support.processes import ROOT, wait_until

pytestmark = pytest.mark.slow

#: The test an inner pytest runs: it starts processes the way tests do, then waits to be killed.
PROBE = """
import os
import time
from pathlib import Path

from scripts.servers import RedisServer
from tests.support.processes import WorkerProcess


def test_starts_processes_then_waits(settings, redis_url, tmp_path):
    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(database_url=settings.database_url, redis_url=redis_url, log_path=log_path)
    server = RedisServer(tmp_path / "redis").start()
    Path(os.environ["PROBE_READY"]).write_text(f"{worker.pid} {server.process.pid}")
    time.sleep(600)
"""


def children_once_ready(
    process: subprocess.Popen[bytes], ready: Path, *, at_least: int
) -> set[tuple[int, int]]:
    """The processes below `process` once it has written `ready` and started `at_least` of them."""

    def started() -> bool:
        assert process.poll() is None, f"exited with {process.returncode}"
        return ready.exists() and len(descendants(process.pid)) > at_least

    wait_until(started, timeout=180, what="the probe's processes", interval=0.2)
    found = {identity(pid) for pid in descendants(process.pid) if pid != process.pid}
    return {p for p in found if p is not None}


def kill_and_expect_nothing_left(process: subprocess.Popen[bytes], below: set[tuple[int, int]]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    try:
        wait_until(lambda: not still_running(below), timeout=60, what="its processes to end", interval=0.2)
    except AssertionError as exc:
        left = [
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ") for pid, _ in still_running(below)
        ]
        raise AssertionError(f"{exc}; still running: {left}") from None


def test_a_killed_pytest_leaves_no_process_behind(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.conftest"]\n')
    (tmp_path / "test_probe.py").write_text(PROBE)
    ready = tmp_path / "ready"
    inner = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_probe.py")],
        cwd=ROOT,
        env={**os.environ, "PROBE_READY": str(ready)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Its watchdog, the worker (its main process and a worker process) and redis-server.
        below = children_once_ready(inner, ready, at_least=4)
        worker, server = (int(pid) for pid in ready.read_text().split())
        assert {worker, server} <= {pid for pid, _ in below}
        assert os.getsid(worker) != os.getsid(inner.pid) != os.getsid(server)  # sessions of their own
        kill_and_expect_nothing_left(inner, below)
    finally:
        if inner.poll() is None:
            inner.kill()


def test_a_killed_with_test_services_stops_its_servers_and_command(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    command = (
        "import os, pathlib, time;"
        "pathlib.Path(os.environ['PROBE_READY']).write_text(os.environ['TEST_REDIS_URL']);"
        "time.sleep(600)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TEST_DATABASE_URL", "TEST_REDIS_URL")}
    runner = subprocess.Popen(
        [sys.executable, "-m", "scripts.with_test_services", "--", sys.executable, "-c", command],
        cwd=ROOT,
        env={**env, "MI_TEST_PRIVATE_SERVERS": "1", "PROBE_READY": str(ready)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Its watchdog, postgres (and its backends), redis-server and the command.
        below = children_once_ready(runner, ready, at_least=5)
        with redis.Redis.from_url(ready.read_text(), decode_responses=True) as client:
            folder = Path(str(client.config_get("dir")["dir"])).parent
        assert folder.name.startswith("mi-test-")
        kill_and_expect_nothing_left(runner, below)
        wait_until(lambda: not folder.exists(), timeout=30, what=f"{folder} to be removed")
    finally:
        if runner.poll() is None:
            runner.kill()


def test_a_session_process_carries_the_marks_whatever_its_environment(tmp_path: Path) -> None:
    """An environment built by hand (RunStack's, bench's) still gets the starter's marks."""
    mark = lifeline.attach()
    assert lifeline.attach() == mark  # once per process
    shown = SessionProcess(["/usr/bin/env"], env={"PATH": "/usr/bin:/bin"}, log_path=tmp_path / "env.log")
    assert shown.process.wait(timeout=30) == 0
    shown.stop()
    assert f"{mark}=1" in shown.output().splitlines()
