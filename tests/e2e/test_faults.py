"""Faults between the parts, on real processes: nothing submitted is ever lost.

web, worker and reconciler run from the Procfile's own lines (scripts/processes.ProcfileProcess),
against the test PostgreSQL and Redis reached through `FaultProxy`s, so a test can cut a
server off without stopping a server it does not own. Patient clients submit a burst; a
fault hits in the middle; every submitted record must end in status 4 (never lost, never
wrongly 5) within the heal time after the fault.

`MI_FAULT_RECORDS` sets the burst size (default 120; docs/reliability.md used more),
`MI_FAULT_REDIS_OUTAGE_S` / `MI_FAULT_DATABASE_OUTAGE_S` the outages (8 s / 12 s), and
`MI_FAULT_DEFAULT_RECONCILER=1` runs the reconciler with its default timings.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, text

from config.settings import Settings
from redis_adapters.queues import DEAD_LETTER_QUEUE_KEY
from scripts import servers
from scripts.faults import FaultProxy
from scripts.processes import ProcfileProcess
from tests.support import records
from tests.support.processes import WorkerProcess, row_locked, sessions_waiting_for_a_lock, wait_until
from tests.support.record_state import status_counts as statuses
from tests.support.records import RecordSpec
from tests.support.redis_keys import MARKER_KEYS
from web import issue_user_token

RECORDS = int(os.environ.get("MI_FAULT_RECORDS", "120"))
#: How long Redis is stopped, and PostgreSQL cut off from the worker (seconds).
REDIS_OUTAGE_S = float(os.environ.get("MI_FAULT_REDIS_OUTAGE_S", "8"))
DATABASE_OUTAGE_S = float(os.environ.get("MI_FAULT_DATABASE_OUTAGE_S", "12"))
USER_ID = 4242
ADMIN_TOKEN = "fault-test-admin-token-0123456789abcdef"
#: The reconciler's timings in these tests (the defaults are 30 s grace, 10 s interval);
#: MI_FAULT_DEFAULT_RECONCILER=1 keeps the defaults, to measure the heal time users get.
FAST_RECONCILER = (
    {}
    if os.environ.get("MI_FAULT_DEFAULT_RECONCILER") == "1"
    else {"RECONCILE_GRACE_MS": "2000", "RECONCILE_INTERVAL_MS": "1000"}
)
#: How long after the fault ends every record must be in status 4.
HEAL_TIMEOUT_S = 60.0


class Stack:
    def __init__(self, settings: Settings, logs: Path, *, redis_url: str, worker_db_url: str) -> None:
        self.port = servers.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("dramatiq_")},
            "DATABASE_URL": settings.database_url,
            "REDIS_URL": redis_url,
            "SECRET_KEY": settings.secret_key,
            "ADMIN_TOKENS": ADMIN_TOKEN,
            "PYTHONUNBUFFERED": "1",
            "dramatiq_restart_delay": "1000",
            **FAST_RECONCILER,
        }
        self.web = ProcfileProcess(
            "web", env={**env, "PORT": str(self.port), "WEB_CONCURRENCY": "2"}, log_path=logs / "web.log"
        )
        self.worker = WorkerProcess(
            database_url=worker_db_url,
            redis_url=redis_url,
            log_path=logs / "worker.log",
            threads=4,
            env={"dramatiq_restart_delay": "1000"},
        )
        self.reconciler = ProcfileProcess("reconciler", env=env, log_path=logs / "reconciler.log")
        wait_until(self.ready, timeout=30, what="the web process")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base + "/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self) -> None:
        self.web.stop(timeout=20)
        self.worker.stop()
        self.reconciler.stop(timeout=20)


def submit_patiently(base: str, token: str, record_id: int, answers: list[dict[str, int]]) -> dict[str, Any]:
    """Submit as a mini-program would: retry on a refused connection or a 5xx, for up to a minute."""
    body = json.dumps({"recordId": record_id, "answers": answers}).encode()
    deadline = time.monotonic() + 60
    while True:
        request = urllib.request.Request(
            base + "/api/assessment/submitAnswers",
            data=body,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return dict(json.load(response))
        except urllib.error.HTTPError as exc:
            reply = json.load(exc)
            if exc.code == 409:  # an earlier try went through, its answer was lost
                return dict(reply)
            if exc.code < 500 or time.monotonic() > deadline:
                raise AssertionError(f"record {record_id}: {exc.code} {reply}") from exc
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def insert_records(engine: Engine, count: int) -> list[int]:
    """`count` assessments under way (status 2, started) of the test's user."""
    return records.insert_records(engine, [RecordSpec(2, USER_ID)] * count)


def all_answers(engine: Engine) -> list[dict[str, int]]:
    with engine.connect() as conn:
        qids = conn.execute(text("SELECT id FROM questions WHERE is_active ORDER BY id")).scalars().all()
    return [{"questionId": int(q), "value": int(q) % 5 + 1} for q in qids]


@pytest.fixture
def clean(engine: Engine, redis_client: redis.Redis) -> Iterator[None]:
    yield
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM assessment_records WHERE user_id = :u"), {"u": USER_ID})


def burst(
    stack: Stack, engine: Engine, settings: Settings, ids: list[int], fault: Callable[[], None], at: int
) -> list[dict[str, Any]]:
    """Submit every record from 8 patient clients; run `fault` once `at` submissions are done."""
    token = issue_user_token(settings.secret_key, USER_ID)
    answers = all_answers(engine)
    done = threading.Semaphore(0)

    def fault_after_submissions() -> None:
        for _ in range(at):
            done.acquire()
        fault()

    fault_thread = threading.Thread(target=fault_after_submissions, daemon=True)
    fault_thread.start()

    def one(record_id: int) -> dict[str, Any]:
        try:
            return submit_patiently(stack.base, token, record_id, answers)
        finally:
            done.release()

    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(one, ids))
    fault_thread.join(timeout=120)
    assert not fault_thread.is_alive(), f"the fault did not run after {at} submissions"
    return replies


def wait_all_completed(engine: Engine, ids: list[int], since: float) -> float:
    wait_until(
        lambda: statuses(engine, ids) == {4: len(ids)},
        timeout=HEAL_TIMEOUT_S,
        what="every report",
        interval=0.2,
    )
    return time.monotonic() - since


@pytest.mark.parametrize("fault", ["redis_stopped", "redis_lost_its_data"])
def test_a_burst_through_a_redis_fault_ends_with_every_report(
    fault: str,
    settings: Settings,
    engine: Engine,
    redis_url: str,
    redis_client: redis.Redis,
    clean: None,
    tmp_path: Path,
) -> None:
    proxy = FaultProxy(redis_url)
    stack = Stack(settings, tmp_path, redis_url=proxy.url, worker_db_url=settings.database_url)
    ids = insert_records(engine, RECORDS)
    fault_ended: list[float] = []

    def redis_stopped() -> None:
        proxy.down()
        time.sleep(REDIS_OUTAGE_S)
        proxy.up()
        fault_ended.append(time.monotonic())

    def redis_lost_its_data() -> None:
        # A restart without persistence: every job, delayed retry and index entry gone.
        # One DEL, not clean_redis's batches: the data goes at once, as in a restart.
        keys = [k for k in redis_client.scan_iter(count=1000) if k not in MARKER_KEYS]
        if keys:
            redis_client.delete(*keys)
        fault_ended.append(time.monotonic())

    stack.worker.signal(signal.SIGSTOP)  # jobs pile up in Redis, so the fault has work to lose
    try:
        replies = burst(
            stack,
            engine,
            settings,
            ids,
            redis_stopped if fault == "redis_stopped" else redis_lost_its_data,
            RECORDS // 3,
        )
        not_enqueued = sum(1 for r in replies if r.get("data", {}).get("enqueued") is False)
        stack.worker.signal(signal.SIGCONT)
        heal = wait_all_completed(engine, ids, fault_ended[0])
    finally:
        stack.stop()
        proxy.close()
    healed = int(redis_client.hget("report:queue:reconciler", "total_enqueued") or 0)
    print(
        f"\n{fault}: {RECORDS} submitted, {not_enqueued} answered enqueued=false,"
        f" {healed} queued by the reconciler, all in status 4 {heal:.1f} s after the fault"
    )
    assert statuses(engine, ids) == {4: RECORDS}
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 0
    assert healed > 0  # the fault did cost jobs: the reconciler healed them
    if fault == "redis_stopped":
        assert not_enqueued > 0


def test_a_database_outage_spends_no_attempt_on_jobs_that_wait(
    settings: Settings, engine: Engine, redis_url: str, redis_client: redis.Redis, clean: None, tmp_path: Path
) -> None:
    """PostgreSQL cut off from the worker for 12 s with the jobs of 4 locked records in flight
    and the rest waiting.

    The worker's batch holds the 4 (its group skips their locked rows; each then runs alone,
    one after another: the first waits on its lock when the database goes). The attempt
    waiting loses its connection: not its record's failure (tried once more, then
    `DatabaseUnavailable`, as a group whose connection was lost twice), so it waits behind the
    availability gate, uncounted, as do the others of its batch and the jobs queued (before
    2026-12-02 they failed and followed the schedule); when the database answers again every
    record completes and nothing is dead-lettered or set to 5. Without the gate each of the
    40 jobs would spend an attempt (and, over a long outage, all of them).
    """
    pg = FaultProxy(settings.database_url.replace("postgresql+psycopg://", "postgresql://"))
    worker_db = pg.url.replace("postgresql://", "postgresql+psycopg://", 1)
    stack = Stack(settings, tmp_path, redis_url=redis_url, worker_db_url=worker_db)
    ids = insert_records(engine, 40)
    token = issue_user_token(settings.secret_key, USER_ID)
    answers = all_answers(engine)
    first = ids[:4]
    try:
        # Queue every job while the worker is paused, then let it take the first ones (FIFO)
        # into its batch: the four locked records' jobs are attempts in flight, one blocked on
        # its row lock.
        stack.worker.signal(signal.SIGSTOP)
        for record_id in ids:
            submit_patiently(stack.base, token, record_id, answers)
        with contextlib.ExitStack() as locks:
            for record_id in first:
                locks.enter_context(row_locked(settings.database_url, record_id))
            stack.worker.signal(signal.SIGCONT)
            wait_until(
                lambda: sessions_waiting_for_a_lock(settings.database_url) >= 1,
                timeout=20,
                what="a locked record's generation blocked mid-transaction",
            )
            pg.down()
        time.sleep(DATABASE_OUTAGE_S)
        pg.up()
        restored = time.monotonic()
        heal = wait_all_completed(engine, ids, restored)
    finally:
        stack.stop()
        pg.close()
    failures = [
        e
        for e in (json.loads(raw) for raw in redis_client.lrange("eventlog:queue", 0, -1))
        if e.get("type") == "report.generation_failed"
    ]
    print(
        f"\ndatabase outage {DATABASE_OUTAGE_S:.0f} s: 40 jobs, {len(failures)} attempt(s) failed,"
        f" all done {heal:.1f} s after"
    )
    assert statuses(engine, ids) == {4: 40}
    assert redis_client.llen(DEAD_LETTER_QUEUE_KEY) == 0
    assert failures == []  # neither the attempts in flight nor the 36 waiting


def test_a_web_process_killed_between_its_commit_and_its_lpush_loses_nothing(
    settings: Settings, engine: Engine, redis_url: str, redis_client: redis.Redis, clean: None, tmp_path: Path
) -> None:
    """Redis hangs, so a submission commits and then waits on its LPUSH; its web worker is
    SIGKILLed right there. The record is in status 3 with no job anywhere: the reconciler
    queues it once Redis answers again."""
    proxy = FaultProxy(redis_url)
    stack = Stack(settings, tmp_path, redis_url=proxy.url, worker_db_url=settings.database_url)
    (record_id,) = insert_records(engine, 1)
    token = issue_user_token(settings.secret_key, USER_ID)
    answers = all_answers(engine)
    try:
        proxy.hang()
        # Its connection dies with the worker: the user never hears back.
        client = threading.Thread(
            target=submit_once, args=(stack.base, token, record_id, answers), daemon=True
        )
        client.start()
        wait_until(lambda: statuses(engine, [record_id]) == {3: 1}, timeout=20, what="the commit")
        for pid in web_workers(stack.web.process.pid):
            os.kill(pid, signal.SIGKILL)
        proxy.up()
        up = time.monotonic()
        assert redis_client.llen("report:queue") == 0  # the LPUSH never happened
        heal = wait_all_completed(engine, [record_id], up)
    finally:
        stack.stop()
        proxy.close()
    print(f"\nweb killed after its commit: record in status 4 {heal:.1f} s after Redis answered again")
    assert int(redis_client.hget("report:queue:reconciler", "total_enqueued") or 0) == 1


def submit_once(base: str, token: str, record_id: int, answers: list[dict[str, int]]) -> None:
    request = urllib.request.Request(
        base + "/api/assessment/submitAnswers",
        data=json.dumps({"recordId": record_id, "answers": answers}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with contextlib.suppress(OSError):
        urllib.request.urlopen(request, timeout=30).close()


def web_workers(master: int) -> list[int]:
    """The gunicorn worker processes (children of the master)."""
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return [int(pid) for pid in children]
