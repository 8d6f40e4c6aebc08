"""Regenerating every record matching a filter by one admin call (regenerateMatching), on the
real PostgreSQL and Redis: the call queues one task and returns; the worker's actor pages
through the records with batch_regenerate, resumes after a failure, leaves the others alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from listbroker import RedisListBroker
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session, sessionmaker

from actors import admin_tasks, bootstrap
from config.settings import Settings
from redis_adapters.keyspace import EventLogKeys, Keyspace
from redis_adapters.queue_ops import RedisQueueOperations
from redis_adapters.queues import ADMIN_QUEUE_NAME, REPORT_QUEUE_KEY
from redis_adapters.report_message import ReportQueueMessage
from redis_adapters.report_queue import RedisReportQueue
from redis_adapters.task_store import RedisTaskStore
from services.domain.events import EventType
from services.persistence.models import EventLogEntry
from services.persistence.uow import UnitOfWork
from services.usecases import admin, regeneration_tasks
from services.usecases.audit import list_audit
from services.usecases.regeneration_tasks import (
    MatchFilter,
    Task,
    TaskState,
    run_task,
    start_regenerate_matching,
)
from tests.support.actors import declare_actor
from tests.support.broker_fixtures import BrokerFactory, WorkerFactory
from tests.support.console import csrf_token, sign_in
from tests.support.envelope import data, error
from tests.support.operations import ACTOR
from tests.support.record_state import distinct_statuses as statuses
from tests.support.records import RecordSpec
from tests.support.urls import CLOSED_DATABASE_URL
from tests.support.web_app import ADMIN_PATH, Records
from web import create_app

MATCHING = ADMIN_PATH + "/assessmentRecord/regenerateMatching"
KEYS = Keyspace.of()
#: Short retries for the actor under test (the production schedule waits 10 s first).
FAST_RETRIES = (100, 100, 100)
#: What the task calls for each page (patched to fail on purpose).
PAGE_STEP = "services.usecases.regeneration_tasks.batch_regenerate"


def queued_record_ids(client: redis.Redis) -> list[int]:
    return [ReportQueueMessage.decode(raw).record_id for raw in client.lrange(REPORT_QUEUE_KEY, 0, -1)]


def set_submitted(engine: Engine, ids: list[int], at: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE assessment_records SET submitted_at = :at WHERE id = ANY(:ids)"),
            {"at": at, "ids": ids},
        )


# -- the admin call ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [3, 1_500])
def test_the_call_answers_202_at_once_and_queues_exactly_one_task(
    n: int,
    client: FlaskClient,
    admin_headers: dict[str, str],
    records: Records,
    redis_client: redis.Redis,
    event_log: Engine,
    engine: Engine,
) -> None:
    failed = records.insert(*[RecordSpec(status=5, results=True)] * n)
    records.insert(RecordSpec(status=4, results=True), RecordSpec(status=5, deleted=True))
    response = client.post(MATCHING, json={"status": 5}, headers=admin_headers)
    answer = data(response, 202)
    assert answer["matched"] == n
    # One message whatever N; the records are left to the worker.
    assert redis_client.llen(KEYS.admin.queue) == 1
    assert redis_client.llen(REPORT_QUEUE_KEY) == 0
    assert statuses(engine, failed) == {5}
    task = data(client.get(f"{ADMIN_PATH}/tasks/{answer['taskId']}", headers=admin_headers))
    assert (task["state"], task["matched"], task["pages"], task["maxId"]) == ("queued", n, 0, failed[-1] + 2)
    assert task["filter"] == {"status": 5, "submittedFrom": None, "submittedTo": None, "userId": None}
    assert 0 < redis_client.ttl(KEYS.task_prefix + answer["taskId"]) <= regeneration_tasks.TASK_TTL_S
    [entry] = data(client.get(f"{ADMIN_PATH}/audit?action=regenerate_matching", headers=admin_headers))[
        "items"
    ]
    assert (entry["ids"], entry["outcome"]) == ([answer["taskId"]], "ok")
    assert f"{n} matched" in entry["detail"]


# Bad filters (1001, nothing queued or changed) are in tests/integration/test_web_bad_input.py.


def test_only_an_admin_may_start_or_read_a_task(
    client: FlaskClient, user_headers: Callable[[int], dict[str, str]], redis_client: redis.Redis
) -> None:
    assert client.post(MATCHING, json={"status": 5}).status_code == 401
    assert client.post(MATCHING, json={"status": 5}, headers=user_headers(1)).status_code == 403
    assert client.get(f"{ADMIN_PATH}/tasks/{'0' * 32}", headers=user_headers(1)).status_code == 403
    assert redis_client.llen(KEYS.admin.queue) == 0


def test_an_unknown_task_is_3241(
    client: FlaskClient, admin_headers: dict[str, str], redis_client: redis.Redis
) -> None:
    for task_id in ("0" * 32, "not-a-task", "A" * 32):
        error(client.get(f"{ADMIN_PATH}/tasks/{task_id}", headers=admin_headers), 404, 3241)


def test_the_call_is_refused_when_its_audit_cannot_be_written(
    settings: Settings, admin_headers: dict[str, str], redis_client: redis.Redis
) -> None:
    app = create_app(settings.with_overrides(database_url=CLOSED_DATABASE_URL), redis_client=redis_client)
    error(app.test_client().post(MATCHING, json={"status": 5}, headers=admin_headers), 503, 5003)
    assert redis_client.llen(KEYS.admin.queue) == 0


def test_cli_starts_a_task_and_shows_its_progress(
    app: Flask, records: Records, redis_client: redis.Redis, event_log: Engine
) -> None:
    records.insert(RecordSpec(status=5), RecordSpec(status=5, user_id=2))
    runner = app.test_cli_runner()
    assert runner.invoke(args=["regenerate-matching", "--status", "4"]).exit_code == 2
    started = runner.invoke(args=["regenerate-matching", "--status", "5", "--user", "2"])
    assert started.exit_code == 0, started.output
    words = started.output.split()
    assert words[2:4] == ["1", "record(s)"]
    task_id = words[1].rstrip(":")
    shown = runner.invoke(args=["task", task_id])
    assert shown.exit_code == 0, shown.output
    assert shown.output.split("\n")[1].split()[:5] == [task_id, "queued", "status=5", "userId=2", "1"]
    assert runner.invoke(args=["task", "0" * 32]).exit_code == 1


# -- the task, run by the service and by the actor on a real broker and worker ------------------


@pytest.fixture
def store(redis_client: redis.Redis) -> RedisTaskStore:
    return RedisTaskStore(redis_client, KEYS)


def run(
    session_factory: sessionmaker[Session], redis_client: redis.Redis, store: RedisTaskStore, task_id: str
) -> Task | None:
    return run_task(
        lambda: UnitOfWork(session_factory),
        RedisReportQueue(redis_client),
        RedisQueueOperations(redis_client),
        store,
        task_id,
    )


def test_filters_select_status_user_and_submission_range(
    session_factory: sessionmaker[Session],
    records: Records,
    engine: Engine,
    redis_client: redis.Redis,
    store: RedisTaskStore,
) -> None:
    day = datetime(2025, 3, 1, tzinfo=UTC)
    inside = records.insert(RecordSpec(status=3, user_id=7), RecordSpec(status=3, user_id=7))
    early, late = records.insert(RecordSpec(status=3, user_id=7), RecordSpec(status=3, user_id=7))
    other_user, failed = records.insert(RecordSpec(status=3, user_id=8), RecordSpec(status=5, user_id=7))
    set_submitted(engine, [*inside, other_user, failed], day)
    set_submitted(engine, [early], day - timedelta(days=1))
    set_submitted(engine, [late], day + timedelta(days=1))  # the range is half-open: excluded
    match = MatchFilter(status=3, submitted_from=day, submitted_to=day + timedelta(days=1), user_id=7)
    started = start_regenerate_matching(UnitOfWork(session_factory), store, match)
    assert started.matched == 2
    task = run(session_factory, redis_client, store, started.task_id)
    assert task is not None
    assert (task.state, task.pages, task.regenerated, task.skipped) == (TaskState.DONE, 1, 2, 0)
    assert sorted(queued_record_ids(redis_client)) == inside
    assert statuses(engine, [failed]) == {5}
    # A record created after the call is out of the task's scope.
    (newer,) = records.insert(RecordSpec(status=3, user_id=7))
    set_submitted(engine, [newer], day)
    redo = start_regenerate_matching(UnitOfWork(session_factory), store, match)
    store.client.hset(store.key(redo.task_id), "maxId", inside[-1])
    assert run(session_factory, redis_client, store, redo.task_id) is not None
    assert newer not in queued_record_ids(redis_client)


@pytest.fixture
def task_broker(make_broker: BrokerFactory) -> RedisListBroker:
    broker = make_broker()
    spec = admin_tasks.regenerate_matching
    options = {**spec.options, "retry_delays": FAST_RETRIES}
    declare_actor(spec.fn, broker, actor_name=spec.actor_name, queue_name=spec.queue_name, **options)
    return broker


@pytest.fixture
def fresh_adapters(worker_services: bootstrap.WorkerServices) -> bootstrap.WorkerServices:
    """The actor's per-process adapters (actors/bootstrap.py), made on this test's Redis."""
    return worker_services


def wait_done(store: RedisTaskStore, task_id: str, timeout: float = 8) -> Task:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = store.get(task_id)
        if task is not None and task.state in (TaskState.DONE, TaskState.FAILED):
            return task
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} not finished: {store.get(task_id)}")


@pytest.mark.usefixtures("fresh_adapters")
def test_the_actor_regenerates_2500_matching_records_in_3_pages_and_leaves_the_rest(
    task_broker: RedisListBroker,
    make_worker: WorkerFactory,
    session_factory: sessionmaker[Session],
    records: Records,
    engine: Engine,
    redis_client: redis.Redis,
    store: RedisTaskStore,
) -> None:
    matching = records.insert(*[RecordSpec(status=5, results=True)] * 2_500)
    others = records.insert(
        RecordSpec(status=4, results=True), RecordSpec(status=1), RecordSpec(status=5, deleted=True)
    )
    started = start_regenerate_matching(UnitOfWork(session_factory), store, MatchFilter(status=5))
    make_worker(task_broker)
    task = wait_done(store, started.task_id)
    assert (task.state, task.matched, task.pages, task.regenerated, task.skipped) == (
        TaskState.DONE,
        2_500,
        3,
        2_500,
        0,
    )
    assert task.started_at is not None
    assert task.finished_at is not None
    assert sorted(queued_record_ids(redis_client)) == matching
    assert statuses(engine, matching) == {3}
    assert [records.status(i) for i in others] == [4, 1, 5]
    assert records.result_counts(matching[0]) == (0, 0)
    assert task_broker.pending(ADMIN_QUEUE_NAME) == 0


@pytest.mark.usefixtures("fresh_adapters")
def test_a_task_that_fails_after_one_page_resumes_at_its_cursor_without_double_work(
    task_broker: RedisListBroker,
    make_worker: WorkerFactory,
    session_factory: sessionmaker[Session],
    records: Records,
    redis_client: redis.Redis,
    store: RedisTaskStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    matching = records.insert(*[RecordSpec(status=5)] * 2_500)
    real = admin.batch_regenerate
    calls: list[int] = []

    def crash_on_second_page(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(args[2]))
        if len(calls) == 2:
            raise RuntimeError("worker lost mid-task")
        return real(*args, **kwargs)

    monkeypatch.setattr(PAGE_STEP, crash_on_second_page)
    started = start_regenerate_matching(UnitOfWork(session_factory), store, MatchFilter(status=5))
    make_worker(task_broker)
    task = wait_done(store, started.task_id)
    # Page 1, the failed page 2, then the retry resumed at page 2 (page 1 not redone).
    assert calls == [1_000, 1_000, 1_000, 500]
    assert (task.state, task.pages, task.regenerated, task.cursor) == (TaskState.DONE, 3, 2_500, matching[-1])
    queued = queued_record_ids(redis_client)
    assert len(queued) == len(set(queued)) == 2_500  # each record queued once
    assert sorted(queued) == matching


def test_a_run_started_again_while_the_first_still_runs_counts_each_page_once(
    session_factory: sessionmaker[Session],
    records: Records,
    redis_client: redis.Redis,
    store: RedisTaskStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The task's message is delivered at least once: a worker that looked dead to the broker
    (a loaded machine) still runs while the redelivered message starts a second run. Both walk
    the same first page; the counts stay exact (make test once saw 4 pages, 3,500 regenerated
    for 2,500 records) and the run that loses the race stops."""
    matching = records.insert(*[RecordSpec(status=5)] * 2_500)
    real = admin.batch_regenerate
    both_read_the_first_page = threading.Barrier(2, timeout=60)
    first_pages: list[list[int]] = []

    def page_step(*args: Any, **kwargs: Any) -> Any:
        ids = list(args[2])
        if ids[0] == matching[0]:
            first_pages.append(ids)
            both_read_the_first_page.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(PAGE_STEP, page_step)
    started = start_regenerate_matching(UnitOfWork(session_factory), store, MatchFilter(status=5))
    results: list[Task | None] = []
    runs = [
        threading.Thread(
            target=lambda: results.append(run(session_factory, redis_client, store, started.task_id))
        )
        for _ in range(2)
    ]
    for thread in runs:
        thread.start()
    for thread in runs:
        thread.join(timeout=120)
    assert len(results) == 2
    assert len(first_pages) == 2  # the race did happen
    assert first_pages[0] == first_pages[1]
    task = store.get(started.task_id)
    assert task is not None
    assert (task.state, task.pages, task.regenerated, task.cursor) == (TaskState.DONE, 3, 2_500, matching[-1])
    assert sorted(set(queued_record_ids(redis_client))) == matching


@pytest.mark.usefixtures("fresh_adapters")
def test_a_task_whose_attempts_are_used_up_is_marked_failed(
    task_broker: RedisListBroker,
    make_worker: WorkerFactory,
    session_factory: sessionmaker[Session],
    records: Records,
    store: RedisTaskStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records.insert(RecordSpec(status=5))

    def always_fails(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("broken")

    monkeypatch.setattr(PAGE_STEP, always_fails)
    started = start_regenerate_matching(UnitOfWork(session_factory), store, MatchFilter(status=5))
    make_worker(task_broker)
    task = wait_done(store, started.task_id)
    assert task.state is TaskState.FAILED
    assert task.error


def test_a_finished_or_unknown_task_is_not_run_again(
    session_factory: sessionmaker[Session], records: Records, redis_client: redis.Redis, store: RedisTaskStore
) -> None:
    records.insert(RecordSpec(status=5))
    started = start_regenerate_matching(
        UnitOfWork(session_factory), store, MatchFilter(status=5), actor=ACTOR
    )
    first = run(session_factory, redis_client, store, started.task_id)
    assert first is not None
    assert first.regenerated == 1
    again = run(session_factory, redis_client, store, started.task_id)
    assert again is not None
    assert (again.state, again.regenerated) == (TaskState.DONE, 1)
    assert redis_client.llen(REPORT_QUEUE_KEY) == 1
    assert run(session_factory, redis_client, store, "0" * 32) is None


# -- the console's button and progress page ------------------------------------------------------


def test_the_console_regenerates_every_failed_record_and_shows_the_progress(
    client: FlaskClient,
    records: Records,
    redis_client: redis.Redis,
    event_log: Engine,
    session_factory: sessionmaker[Session],
    store: RedisTaskStore,
) -> None:
    failed = records.insert(RecordSpec(status=5), RecordSpec(status=5, user_id=3))
    assert sign_in(client, name="王五") == 302
    page = client.get("/admin/records?status=4").get_data(as_text=True)
    assert 'id="regenerate-failed"' in page
    token = csrf_token(client, "/admin/records")
    response = client.post("/admin/records/regenerate-failed", data={"csrf_token": token})
    assert response.status_code == 302
    task_path = response.headers["Location"]
    task_id = task_path.rsplit("/", 1)[1]
    assert redis_client.llen(KEYS.admin.queue) == 1
    queued = client.get(task_path).get_data(as_text=True)
    assert 'data-state="queued"' in queued
    assert 'http-equiv="refresh"' in queued
    assert 'data-count="matched">2<' in queued
    run(session_factory, redis_client, store, task_id)
    done = client.get(task_path).get_data(as_text=True)
    assert 'data-state="done"' in done
    assert 'data-count="regenerated">2<' in done
    assert 'http-equiv="refresh"' not in done
    assert sorted(queued_record_ids(redis_client)) == failed
    # Beside the sign-in, which the audit keeps too.
    entries = [
        e for e in list_audit(UnitOfWork(session_factory), actor="console:王五").items if e.action != "signin"
    ]
    assert [(e.action, e.ids, e.outcome) for e in entries] == [("regenerate_matching", [task_id], "ok")]
    assert client.get(f"/admin/tasks/{'0' * 32}").status_code == 404


def test_a_count_beyond_its_timeout_is_refused_and_queues_nothing(
    client: FlaskClient,
    admin_headers: dict[str, str],
    records: Records,
    redis_client: redis.Redis,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The statement timeout counts lock waits: a table locked elsewhere stands for a COUNT too slow."""
    records.insert(RecordSpec(status=5))
    monkeypatch.setattr("services.usecases.regeneration_tasks.COUNT_TIMEOUT_MS", 200)
    with psycopg.connect(settings.database_url.replace("+psycopg", "")) as conn:
        conn.execute("LOCK TABLE assessment_records IN ACCESS EXCLUSIVE MODE")
        message = error(client.post(MATCHING, json={"status": 5}, headers=admin_headers), 400, 1001)
    assert "请缩小筛选范围" in message
    assert redis_client.llen(KEYS.admin.queue) == 0


@pytest.mark.usefixtures("fresh_adapters")
def test_each_record_a_task_regenerates_has_it_on_its_timeline(
    task_broker: RedisListBroker,
    make_worker: WorkerFactory,
    session_factory: sessionmaker[Session],
    records: Records,
    redis_client: redis.Redis,
    store: RedisTaskStore,
) -> None:
    """As a single or batch regeneration does, the task has `report.regenerated` stored for every
    record it reset (found by the soak, bench/soak.py: a record's timeline went from 5 to
    4 with nothing between, the regeneration only in the task's audit entry), committed with
    the page's reset (the 60-minute soak: a worker killed after that commit lost them)."""
    failed = records.insert(*[RecordSpec(status=5, results=True)] * 3)
    records.insert(RecordSpec(status=4, results=True))
    started = start_regenerate_matching(UnitOfWork(session_factory), store, MatchFilter(status=5))
    make_worker(task_broker)
    assert wait_done(store, started.task_id).state is TaskState.DONE
    with session_factory() as s:
        regenerated = s.execute(
            select(EventLogEntry.record_id, EventLogEntry.actor, EventLogEntry.data).where(
                EventLogEntry.event_type == EventType.REPORT_REGENERATED
            )
        ).all()
    assert sorted(r.record_id for r in regenerated) == failed
    assert {(r.actor, r.data.get("task")) for r in regenerated} == {
        (f"task:{started.task_id}", started.task_id)
    }
    # Not through Redis as well: stored once, by the reset's transaction.
    assert not [
        raw for raw in redis_client.lrange(EventLogKeys().queue, 0, -1) if b"report.regenerated" in raw
    ]
