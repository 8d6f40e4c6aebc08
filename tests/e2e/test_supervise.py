"""End to end: a crash is contained. Under `make run` (supervisord, from the Procfile) a
process that dies is started again and the others keep serving.

The stack is scripts/run_stack.py on the test servers, with a copy of the Procfile that
has one more type, `crasher`, which exits at once every time it is started. While
processes are killed, a thread polls /healthz and counts every failed answer.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pytest
import redis
import requests
from sqlalchemy import Engine

from redis_adapters.report_queue import RedisReportQueue
from services.domain.status import RecordStatus
from tests.support.processes import wait_until
from tests.support.stack import Stack, StackOptions, db_status, insert_record

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CRASHER = "crasher"
CRASHER_LINE = f"{CRASHER}: python -c \"import sys; print('crasher: giving up'); sys.exit(3)\""
#: supervisord's log line for a start: its own clock, to the millisecond.
SPAWNED = re.compile(r"^(\S+ \S+) INFO spawned: '(\w+)' with pid (\d+)", re.MULTILINE)
#: supervisord's log line for an exit, on the same clock.
EXITED = re.compile(r"^(\S+ \S+) [A-Z]+ exited: (\w+) \(", re.MULTILINE)
STAMP = "%Y-%m-%d %H:%M:%S,%f"
#: How late supervisord may start a process again after its planned delay, by its own log:
#: it looks at its processes once a second, later on a busy machine.
RESTART_TOLERANCE_S = 2.5


@pytest.fixture(scope="module")
def stack_options() -> StackOptions:
    return StackOptions(procfile_lines=(CRASHER_LINE,))


@pytest.fixture(scope="module", autouse=True)
def running(stack: Stack) -> None:
    """Up past START_SECONDS: a crash from now on is one of a running process (restarted at
    once), not a failed start (restarted after a backoff)."""
    stack.wait_until(
        lambda: all(
            stack.current.info(name)["statename"] == "RUNNING" for name in ("web", "worker", "hotpath")
        ),
        timeout=20,
        what="web, worker and hotpath to be RUNNING",
    )


class HealthPoller:
    """GET /healthz every 20 ms in a thread; every answer but a 200 is a failure."""

    def __init__(self, base_url: str) -> None:
        self.url = f"{base_url}/healthz"
        self.ok = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with requests.Session() as session:
            while not self._stop.is_set():
                try:
                    status = session.get(self.url, timeout=2).status_code
                    if status == 200:
                        self.ok += 1
                    else:
                        self.failures.append(f"HTTP {status}")
                except requests.RequestException as exc:
                    self.failures.append(repr(exc))
                self._stop.wait(0.02)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@contextmanager
def web_keeps_answering(stack: Stack) -> Iterator[HealthPoller]:
    web_pid = stack.current.info("web")["pid"]
    with HealthPoller(stack.base_url) as poller:
        yield poller
        # The scenario may be over in a fraction of a second; web must still have answered a
        # run of polls (not one or two that happened to fall before the fault) to pass.
        wait_until(lambda: poller.ok >= 10 or bool(poller.failures), timeout=30, what="10 /healthz answers")
    assert poller.failures == [], f"{len(poller.failures)} failed /healthz calls: {poller.failures[:5]}"
    assert poller.ok >= 10
    assert stack.current.info("web")["pid"] == web_pid, "web was restarted"


def report_completes(stack: Stack, engine: Engine, redis_conn: redis.Redis, *, timeout: float) -> float:
    """Submit a job and wait for its report; the seconds it took."""
    record_id = insert_record(engine, 21)
    started = time.monotonic()
    RedisReportQueue(redis_conn).enqueue_many([record_id])
    stack.wait_until(
        lambda: db_status(engine, record_id) == RecordStatus.COMPLETED,
        timeout=timeout,
        what=f"the report of record {record_id}",
    )
    return time.monotonic() - started


def spawns(stack: Stack, name: str) -> list[tuple[datetime, int]]:
    """When supervisord started `name`, and with which pid, from `make run`'s output."""
    return [
        (datetime.strptime(stamp, STAMP), int(pid))
        for stamp, program, pid in SPAWNED.findall(stack.current.output())
        if program == name
    ]


def backoffs(stack: Stack, name: str) -> list[float]:
    """How long supervisord waited, after each exit of `name`, before starting it again.

    Measured from the exit, not from the previous start: how long a start takes to fail
    (an interpreter starting on a loaded machine) is no part of the backoff.
    """
    output = stack.current.output()
    starts = [
        datetime.strptime(stamp, STAMP) for stamp, program, _ in SPAWNED.findall(output) if program == name
    ]
    exits = [datetime.strptime(stamp, STAMP) for stamp, program in EXITED.findall(output) if program == name]
    waits = []
    for exited in exits:
        following = [start for start in starts if start >= exited]
        if following:
            waits.append((following[0] - exited).total_seconds())
    return waits


@pytest.mark.timeout(300)
def test_a_killed_dramatiq_worker_process_is_replaced_while_web_keeps_answering(
    stack: Stack, engine: Engine, redis_conn: redis.Redis
) -> None:
    report_completes(stack, engine, redis_conn, timeout=60)  # the worker is up
    main_pid = stack.current.info("worker")["pid"]
    children = psutil.Process(main_pid).children()
    assert children, "no Dramatiq worker process"
    with web_keeps_answering(stack):
        killed_at = time.monotonic()
        os.kill(children[0].pid, signal.SIGKILL)
        # Dramatiq's main process stops when one of its worker processes dies; supervisord
        # starts the worker type again.
        stack.wait_until(
            lambda: stack.current.info("worker")["pid"] not in (0, main_pid),
            timeout=30,
            what="a new worker",
        )
        report_completes(stack, engine, redis_conn, timeout=60)
        back_in = time.monotonic() - killed_at
        time.sleep(0.5)  # web still answering a little after
    print(f"worker process killed: a job submitted afterwards completed {back_in:.2f} s after the kill")
    assert "exited: worker (exit status 1; not expected)" in stack.current.output()
    # Started again at once (it ran longer than START_SECONDS): supervisord's own timestamps,
    # with the tolerance of its once-a-second look (more on a busy machine).
    assert backoffs(stack, "worker")[-1] <= RESTART_TOLERANCE_S, backoffs(stack, "worker")


@pytest.mark.timeout(300)
def test_a_killed_hotpath_is_started_again_while_the_others_keep_serving(
    stack: Stack, engine: Engine, redis_conn: redis.Redis
) -> None:
    old_pid = stack.current.info("hotpath")["pid"]
    assert old_pid
    worker_pid = stack.current.info("worker")["pid"]
    with web_keeps_answering(stack):
        killed_at = time.monotonic()
        os.kill(old_pid, signal.SIGKILL)
        stack.wait_until(
            lambda: stack.current.info("hotpath")["pid"] not in (0, old_pid),
            timeout=5,
            what="a new hotpath process",
        )
        new_pid = stack.current.info("hotpath")["pid"]
        restarted_in = time.monotonic() - killed_at
        # Its log says it runs: the process is up, not only spawned.
        hotpath_log = stack.current.state / "logs" / "hotpath.log"
        stack.wait_until(
            lambda: (
                f"hotpath running: answers, progress, events, retention (pid {new_pid})"
                in hotpath_log.read_text()
            ),
            timeout=30,
            what="the new hotpath to run",
        )
        report_completes(stack, engine, redis_conn, timeout=60)
    print(f"hotpath killed: a new one (pid {new_pid}) {restarted_in:.2f} s later")
    assert backoffs(stack, "hotpath")[-1] <= RESTART_TOLERANCE_S, backoffs(stack, "hotpath")
    # The terminal says it was started again (a start after the first) but not its INFO lines.
    assert f"INFO spawned: 'hotpath' with pid {new_pid}" in stack.current.output()
    assert "hotpath running" not in stack.current.output()
    assert stack.current.info("worker")["pid"] == worker_pid


@pytest.mark.timeout(300)
def test_a_process_that_keeps_crashing_is_retried_with_backoff_and_harms_no_other(
    stack: Stack, engine: Engine, redis_conn: redis.Redis
) -> None:
    worker_pid = stack.current.info("worker")["pid"]
    with web_keeps_answering(stack):
        # supervisord waits 1 s, 2 s, 3 s … between starts of a type that dies within
        # START_SECONDS (5 s): four starts take about 6 s. One more start is awaited while
        # web answers: retries go on, and harm no other process.
        wanted = max(4, len(spawns(stack, CRASHER)) + 1)
        stack.wait_until(
            lambda: len(spawns(stack, CRASHER)) >= wanted, timeout=20, what=f"{wanted} crasher starts"
        )
        report_completes(stack, engine, redis_conn, timeout=60)
    gaps = backoffs(stack, CRASHER)
    # supervisord looks at its processes once a second: a delay of n s is seen n to n + 1 s
    # after the exit (more on a busy machine).
    assert len(gaps) >= 3, gaps
    for expected, gap in zip((1, 2, 3), gaps, strict=False):
        assert expected - 0.2 <= gap <= expected + RESTART_TOLERANCE_S, gaps
    assert gaps[2] > gaps[0] + 1, gaps  # the delay grows
    print("crasher started again after " + ", ".join(f"{gap:.2f}" for gap in gaps) + " s")
    crasher = stack.current.info(CRASHER)
    assert crasher["statename"] in {"BACKOFF", "STARTING", "FATAL"}, crasher
    # Its own output, prefixed with its name: every line that is not an INFO log line is shown.
    assert len(re.findall(r"^\S+ crasher +\| crasher: giving up$", stack.current.output(), re.M)) >= 4
    assert stack.current.info("worker")["pid"] == worker_pid
    assert stack.current.alive()


def zombies_below(pid: int) -> list[tuple[int, int, str]]:
    """(pid, parent, name) of every zombie among the descendants of `pid`."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.status() == psutil.STATUS_ZOMBIE:
                found.append((child.pid, child.ppid(), child.name()))
    return found


def _has_children(pid: int) -> bool:
    return bool(psutil.Process(pid).children())


def _started_again(stack: Stack, name: str, old: int) -> bool:
    info = stack.current.info(name)
    return info["pid"] not in (0, old) and info["statename"] == "RUNNING"


def _all_gone(pids: list[int]) -> bool:
    return not any(psutil.pid_exists(pid) for pid in pids)  # a zombie still exists


def _serves(base_url: str) -> bool:
    try:
        return requests.get(f"{base_url}/healthz", timeout=10).status_code == 200
    except requests.RequestException:
        return False


@pytest.mark.timeout(300)
def test_a_sigkill_of_a_master_process_leaves_no_zombie(stack: Stack) -> None:
    """gunicorn's master killed twice and the Dramatiq worker's main process once: their
    children die too (they watch their parent) and are reaped by `make run`, whose children
    they became; supervisord starts the masters again."""
    for name in ("web", "web", "worker"):
        old = stack.current.info(name)["pid"]
        stack.wait_until(
            functools.partial(_has_children, old), timeout=60, what=f"the {name} master's children"
        )
        children = [child.pid for child in psutil.Process(old).children()]
        os.kill(old, signal.SIGKILL)
        stack.wait_until(
            functools.partial(_started_again, stack, name, old), timeout=60, what=f"{name} started again"
        )
        stack.wait_until(
            functools.partial(_all_gone, children),
            timeout=60,
            what=f"the children of the killed {name} to be gone (reaped)",
        )
    assert zombies_below(stack.current.process.pid) == []
    # The web started again serves (its new workers boot at the machine's pace).
    stack.wait_until(functools.partial(_serves, stack.base_url), timeout=120, what="/healthz 200 again")


@pytest.mark.timeout(300)
def test_make_run_killed_outright_stops_its_processes_and_a_rerun_starts_clean(stack: Stack) -> None:
    """kill -9 of `make run`: supervisord is told (parent-death signal) and stops every
    process gracefully; a second `make run` on the same state folder starts as usual."""
    run = stack.current
    pids = run.pids()
    assert pids
    run.process.kill()
    wait_until(lambda: run.pids() == [], timeout=20, what="every process of the killed make run to stop")
    assert "received SIGTERM indicating exit request" in (run.state / "console.log").read_text()
    stack.start()
    assert stack.current.info("web")["statename"] in {"STARTING", "RUNNING"}
    assert not set(pids) & set(stack.current.pids())


def test_the_generated_configuration_is_private_and_follows_the_procfile(stack: Stack) -> None:
    conf = stack.current.state / "supervisord.conf"
    assert conf.stat().st_mode & 0o777 == 0o600
    programs = re.findall(r"^\[program:(\w+)\]", conf.read_text(), re.MULTILINE)
    assert stack.procfile is not None
    names = [line.split(":", 1)[0] for line in stack.procfile.read_text().splitlines() if ":" in line]
    assert programs == [n for n in names if n != "release"]  # the Procfile's order, release aside
    assert Path(stack.current.state / "stack.json").exists()
