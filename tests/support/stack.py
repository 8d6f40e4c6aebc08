"""The stack of the end-to-end tests: scripts/run_stack.py (`make run`) on the test servers.

tests/e2e/conftest.py's module-scoped `stack` fixture starts it once per module; a module
says how its stack differs from the default (`STACK_SETTINGS`) by overriding the
`stack_options` fixture with a `StackOptions`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import requests
from sqlalchemy import Engine, insert, select

from config.settings import Settings
from services.domain.status import RecordStatus
from services.persistence.models import Answer, AssessmentRecord, Question
from tests.support.processes import RunStack, procfile, wait_until
from tests.support.records import RecordSpec, clear_records, default_answer, insert_records
from tests.support.redis_keys import clean_redis
from web import issue_user_token

ADMIN_TOKEN = "stack-admin-token-Vq3x9LrT0bWk7ZsN2yHc5u"  # strong enough for `make run`
#: One worker process with two threads (so prefetch is 4), a short heartbeat timeout so
#: the jobs of a killed worker come back within seconds, and supervisord's stop timeout
#: (`make run` derives it from WORKER_SHUTDOWN_TIMEOUT_MS) about as short as honcho's 5 s.
STACK_SETTINGS = {
    "WEB_CONCURRENCY": "2",
    "WORKER_PROCESSES": "1",
    "WORKER_THREADS": "2",
    "BROKER_HEARTBEAT_TIMEOUT_MS": "3000",
    "MI_STOP_TIMEOUT_S": "6",
}
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Stack:
    """The Procfile's processes under `make run`, (re)startable, and an HTTP client for them."""

    env: dict[str, str]
    logs: Path
    settings: Settings
    procfile: Path | None = None
    runs: list[RunStack] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.env['PORT']}"

    @property
    def current(self) -> RunStack:
        return self.runs[-1]

    def start(self) -> None:
        """Start `make run` on the state folder (again: as a second `make run` would)."""
        log_path = self.logs / f"stack-{len(self.runs)}.log"
        run = RunStack(env=self.env, state=self.logs / "state", log_path=log_path, procfile=self.procfile)
        self.runs.append(run)
        self.wait_until(self.ready, timeout=120, what="the web process to answer /readyz")
        # `make run` polls /readyz itself until it says so: its requests end before a test starts.
        self.wait_until(lambda: "ready: " in run.output(), timeout=120, what="make run's ready line")

    def stop(self) -> int:
        return self.current.stop(signal.SIGTERM)

    def ready(self) -> bool:
        assert self.current.alive(), "make run exited:\n" + self.current.output()[-3000:]
        try:
            return requests.get(f"{self.base_url}/readyz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def wait_until(self, check: Callable[[], bool], *, timeout: float, what: str) -> None:
        try:
            wait_until(check, timeout=timeout, what=what, interval=0.05)
        except AssertionError as exc:
            output = self.current.output()[-4000:] if self.runs else ""
            raise AssertionError(f"{exc}\n--- stack output (end) ---\n{output}") from None

    def call(self, method: str, path: str, token: str, body: Any = None) -> tuple[int, dict[str, Any]]:
        response = requests.request(
            method,
            f"{self.base_url}{path}",
            headers={"Authorization": f"Bearer {token}"},
            json=body,
            timeout=30,
        )
        return response.status_code, response.json()

    def ok(self, method: str, path: str, token: str, body: Any = None) -> Any:
        status, envelope = self.call(method, path, token, body)
        assert (status, envelope["code"]) == (200, 0), envelope
        return envelope["data"]

    def user(self, user_id: int) -> str:
        return issue_user_token(self.settings.secret_key, user_id)

    def status(self, token: str, record_id: int) -> dict[str, Any]:
        return dict(self.ok("GET", f"/api/assessment/resultStatus?recordId={record_id}", token))

    def wait_for_status(self, token: str, record_id: int, status: int, *, timeout: float = 60) -> None:
        self.wait_until(
            lambda: self.status(token, record_id)["status"] == status,
            timeout=timeout,
            what=f"record {record_id} to reach status {status}",
        )


@dataclass(frozen=True)
class StackOptions:
    """How a module's stack differs from the default one."""

    #: Settings on top of `STACK_SETTINGS` (a retry schedule, more workers, ...).
    extra: Mapping[str, str] = field(default_factory=dict)
    #: Process types of the test's own, added to a copy of the Procfile.
    procfile_lines: tuple[str, ...] = ()
    #: Where the stack reaches the test servers, when not directly (a `FaultProxy`'s URL).
    database_url: str | None = None
    redis_url: str | None = None


def reset(engine: Engine, client: redis.Redis) -> None:
    """Empty records and the event log, so a module's audit and timelines are its own (keep the
    questionnaire), and our own Redis db index (keep its markers)."""
    clear_records(engine)
    clean_redis(client)


@contextmanager
def running_stack(
    settings: Settings,
    engine: Engine,
    redis_url: str,
    redis_conn: redis.Redis,
    logs: Path,
    options: StackOptions | None = None,
) -> Iterator[Stack]:
    """`make run` on the test servers, started and, at the end, stopped; nothing may be left."""
    from scripts import servers

    options = options or StackOptions()
    procfile_path = None
    if options.procfile_lines:
        procfile_path = logs / "Procfile"
        procfile_path.write_text(
            (ROOT / "Procfile").read_text().rstrip("\n")
            + "".join(f"\n{line}" for line in options.procfile_lines)
            + "\n"
        )
    assert {"release", "web", "worker"} <= procfile(procfile_path or ROOT / "Procfile").keys()
    reset(engine, redis_conn)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("dramatiq_", "HONCHO_", "MI_"))}
    env.update(
        STACK_SETTINGS,
        DATABASE_URL=options.database_url or settings.database_url,
        REDIS_URL=options.redis_url or redis_url,
        SECRET_KEY=settings.secret_key,
        ADMIN_TOKENS=ADMIN_TOKEN,
        PORT=str(servers.free_port()),
        **options.extra,
    )
    stack = Stack(env=env, logs=logs, settings=settings, procfile=procfile_path)
    try:
        stack.start()
        yield stack
    finally:
        for run in stack.runs:
            run.stop()
        leftovers = [pid for run in stack.runs for pid in run.pids()]
        reset(engine, redis_conn)
    assert leftovers == []


def insert_record(engine: Engine, user_id: int, *, answers: bool = True) -> int:
    """A record in status 3 (submitted), with a full answer sheet unless `answers` is False
    (lost: every attempt to generate its report fails)."""
    (record_id,) = insert_records(engine, [RecordSpec(RecordStatus.GENERATING, user_id, answers=answers)])
    return record_id


def add_answers(engine: Engine, record_id: int) -> None:
    """Give a record whose answers were lost its answer sheet back (its next attempt succeeds)."""
    with engine.begin() as conn:
        ids = conn.execute(select(Question.id).where(Question.is_active)).scalars().all()
        conn.execute(
            insert(Answer),
            [{"record_id": record_id, "question_id": q, "value": default_answer(q)} for q in ids],
        )


def db_status(engine: Engine, record_id: int) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(select(AssessmentRecord.status).where(AssessmentRecord.id == record_id)).scalar_one()
        )
