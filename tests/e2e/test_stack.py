"""End to end: the Procfile's processes as `make run` runs them, driven over HTTP and Redis.

The processes are the real ones, started by scripts/run_stack.py (what `make run` runs:
the release step, then supervisord on every long-running type of the Procfile, each
line through `sh -c`, no .env file) on the test PostgreSQL and Redis. The tests talk to
them only as clients do: the HTTP API, and Redis for what other producers and operators
do (LPUSH a .NET job, LLEN a queue). The database is used to set up what no API can (a
record whose answers were lost) and to hold a record's row lock, so that a generation
is stopped mid-transaction.
"""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

import pytest
import redis
import requests
from listbroker import QueueKeys
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, func, select

from redis_adapters.queue_figures import queue_figures
from redis_adapters.queues import (
    DEAD_LETTER_QUEUE_KEY,
    INVALID_QUEUE_KEY,
    REPORT_DELAYED_KEY,
    REPORT_QUEUE_KEY,
    REPORT_QUEUE_NAME,
)
from redis_adapters.report_message import ReportQueueMessage
from redis_adapters.report_queue import RedisReportQueue
from services.domain.status import RecordStatus
from services.persistence.models import DimensionResult, ReportSummary
from tests.support.processes import procfile, row_locked, sessions_waiting_for_a_lock
from tests.support.redis_keys import bytes_list
from tests.support.stack import ADMIN_TOKEN, Stack, add_answers, db_status, insert_record

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: The .NET producer's text, with its 7-digit fraction and offset.
NET_ENQUEUE_TIME = "2025-01-15T10:30:00.1234567+08:00"


def net_job(record_id: int, retry_count: int = 0) -> str:
    """A job exactly as the original .NET producer LPUSHes it."""
    return f'{{"RecordId":{record_id},"RetryCount":{retry_count},"EnqueueTime":"{NET_ENQUEUE_TIME}"}}'


# -- database checks ---------------------------------------------------------------------------


def report_rows(engine: Engine, record_id: int) -> tuple[int, int]:
    with engine.connect() as conn:
        results = conn.execute(select(func.count()).where(DimensionResult.record_id == record_id)).scalar()
        summaries = conn.execute(select(func.count()).where(ReportSummary.record_id == record_id)).scalar()
    return int(results or 0), int(summaries or 0)


# -- the tests ---------------------------------------------------------------------------------


def test_a_user_takes_the_assessment_and_gets_the_report(stack: Stack) -> None:
    token = stack.user(7)
    record = stack.ok("POST", "/api/assessment/createRecord", token)
    record_id = record["id"]
    assert record["status"] == RecordStatus.PENDING
    assert stack.ok("POST", "/api/assessment/startAssessment", token, {"recordId": record_id})["status"] == 2
    questions = stack.ok("GET", "/api/assessment/questions", token)
    assert len(questions) == 40
    answers = [{"questionId": q["id"], "value": q["id"] * 7 % 5 + 1} for q in questions]

    body = {"recordId": record_id, "answers": answers}
    submitted = stack.ok("POST", "/api/assessment/submitAnswers", token, body)
    assert submitted == {"recordId": record_id, "status": 3, "enqueued": True}
    stack.wait_for_status(token, record_id, RecordStatus.COMPLETED)

    report = stack.ok("GET", f"/api/assessment/report?recordId={record_id}", token)
    assert report["recordId"] == record_id
    assert sorted(d["rank"] for d in report["dimensions"]) == list(range(1, 9))
    assert len(report["topDimensions"]) == 3
    assert report["summary"]
    listed = stack.ok("GET", "/api/admin/assessmentRecord/list?status=4&userId=7", ADMIN_TOKEN)
    assert [item["id"] for item in listed["items"]] == [record_id]

    # A completed record cannot be regenerated: 2005, and nothing changes.
    status, envelope = stack.call(
        "POST", "/api/admin/assessmentRecord/regenerateReport", ADMIN_TOKEN, {"id": record_id}
    )
    assert (status, envelope["code"]) == (409, 2005)
    assert stack.status(token, record_id)["status"] == RecordStatus.COMPLETED


def test_metrics_sum_the_stacks_processes_and_every_process_beats(stack: Stack) -> None:
    """/metrics of one gunicorn worker shows the job counters of the Dramatiq worker processes
    (PROMETHEUS_MULTIPROC_DIR, set by make run); workers, hotpath and reconciler beat."""
    token = stack.user(8)
    record_id = stack.ok("POST", "/api/assessment/createRecord", token)["id"]
    stack.ok("POST", "/api/assessment/startAssessment", token, {"recordId": record_id})
    questions = stack.ok("GET", "/api/assessment/questions", token)
    answers = [{"questionId": q["id"], "value": 3} for q in questions]
    stack.ok("POST", "/api/assessment/submitAnswers", token, {"recordId": record_id, "answers": answers})
    stack.wait_for_status(token, record_id, RecordStatus.COMPLETED)
    response = requests.get(
        f"{stack.base_url}/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10
    )
    assert response.status_code == 200
    found = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }
    labels = frozenset({"queue_name": "report", "actor_name": "generate_report"}.items())
    assert found[("dramatiq_messages_total", labels)] >= 1
    assert found[("mi_report_latency_seconds_count", frozenset())] >= 1
    submit = {"method": "POST", "endpoint": "/api/assessment/submitAnswers", "status": "200"}
    assert found[("http_requests_total", frozenset(submit.items()))] >= 1
    stack.wait_until(
        lambda: requests.get(f"{stack.base_url}/healthz/workers", timeout=10).status_code == 200,
        timeout=30,
        what="worker and hotpath beating",
    )
    counts = requests.get(f"{stack.base_url}/healthz/workers", timeout=10).json()["data"]
    assert counts["worker"]["alive"] >= 1
    assert counts["reconciler"]["alive"] == 1
    assert counts["web"]["alive"] >= 1  # the gunicorn workers beat too


def test_every_process_of_the_stack_is_in_the_procfile(stack: Stack) -> None:
    """What runs is what the Procfile says, every long-running type under supervisord:
    gunicorn for web (on $PORT), `python -m actors.run_worker` (Dramatiq) for worker, and so on."""
    lines = procfile()
    supervised = {info["name"]: info for info in stack.current.supervisor().getAllProcessInfo()}
    assert sorted(name for name in supervised if name != "output") == sorted(set(lines) - {"release"})
    commands = {}
    for name, info in supervised.items():
        assert info["statename"] in {"STARTING", "RUNNING"}, info
        commands[name] = Path(f"/proc/{info['pid']}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    # `sh -c 'exec LINE'`: the shell became the program, so supervisord watches the program itself.
    assert "gunicorn web:create_app()" in commands["web"]
    assert f"127.0.0.1:{stack.env['PORT']}" in commands["web"]  # loopback unless BIND says otherwise
    assert "python -m actors.run_worker --processes 1 --threads 2" in commands["worker"]
    assert "hotpath" in commands["hotpath"]


def test_a_dead_lettered_record_is_regenerated_by_an_admin(
    stack: Stack, engine: Engine, redis_conn: redis.Redis
) -> None:
    token = stack.user(8)
    record_id = insert_record(engine, 8, answers=False)  # its answers were lost
    job = net_job(record_id, retry_count=3)  # its last attempt
    redis_conn.lpush(REPORT_QUEUE_KEY, job)

    stack.wait_for_status(token, record_id, RecordStatus.FAILED)
    assert stack.status(token, record_id)["description"] == "报告生成失败，请联系客服"
    # The .NET fields as they came, then why and when it died.
    dead_letters = bytes_list(redis_conn.lrange(DEAD_LETTER_QUEUE_KEY, 0, -1))
    [entry] = [e for e in dead_letters if e.startswith(job[:-1].encode())]
    assert entry.startswith(job[:-1].encode() + b',"DeadAt":')
    assert b'"LastError":"ServiceError: ' in entry

    add_answers(engine, record_id)  # the data is repaired; an admin triggers the report again
    regenerate = "/api/admin/assessmentRecord/regenerateReport"
    assert stack.ok("POST", regenerate, ADMIN_TOKEN, {"id": record_id}) is None
    assert entry not in redis_conn.lrange(DEAD_LETTER_QUEUE_KEY, 0, -1)  # superseded by the new job
    stack.wait_for_status(token, record_id, RecordStatus.COMPLETED)
    assert stack.ok("GET", f"/api/assessment/report?recordId={record_id}", token)["recordId"] == record_id
    assert report_rows(engine, record_id) == (8, 1)


def test_queue_figures_match_the_redis_lists(stack: Stack, engine: Engine, redis_conn: redis.Redis) -> None:
    processing = QueueKeys.for_queue(REPORT_QUEUE_NAME).processing_prefix + "*"

    def in_flight() -> int:
        """The jobs in the worker's processing lists, read from Redis itself."""
        return sum(int(redis_conn.llen(key)) for key in redis_conn.scan_iter(match=processing))

    dead = insert_record(engine, 9, answers=False)
    redis_conn.lpush(REPORT_QUEUE_KEY, net_job(dead, retry_count=3))
    stack.wait_until(lambda: db_status(engine, dead) == RecordStatus.FAILED, timeout=60, what="a dead letter")

    first, second, *rest = [insert_record(engine, 9) for _ in range(7)]
    url = stack.settings.database_url
    with row_locked(url, first), row_locked(url, second):
        RedisReportQueue(redis_conn).enqueue_many([first, second, *rest])
        # A worker thread waits for a lock with a locked record's job; the other locked job
        # waits too, in another thread or behind it in the same batch (a batch's locked jobs
        # run alone, one after the other); the jobs done beside them are acknowledged (a
        # batch's done jobs at once), and the worker holds its prefetch of the rest: once it
        # has fetched it, a still picture with both locked jobs in flight.
        stack.wait_until(
            lambda: sessions_waiting_for_a_lock(url) >= 1, timeout=60, what="a locked job waiting"
        )
        picture: list[tuple[int, int]] = []

        def still() -> bool:
            figures = queue_figures(redis_conn)
            picture.append((figures.queued, figures.in_flight))
            time.sleep(0.5)
            return len(picture) > 1 and picture[-1] == picture[-2]

        stack.wait_until(still, timeout=60, what="the queue's figures to stay put")
        before = redis_conn.llen(REPORT_QUEUE_KEY), redis_conn.llen(DEAD_LETTER_QUEUE_KEY), in_flight()
        figures = stack.ok("GET", "/api/admin/queue/stats", ADMIN_TOKEN)
        after = redis_conn.llen(REPORT_QUEUE_KEY), redis_conn.llen(DEAD_LETTER_QUEUE_KEY), in_flight()
    assert before == after
    assert (figures["queued"], figures["dead"], figures["inFlight"]) == after
    assert figures["dead"] >= 1
    assert figures["inFlight"] >= 2  # the two locked records' jobs at least
    assert (figures["delayed"], figures["invalid"]) == (0, 0)

    stack.wait_until(
        lambda: all(db_status(engine, r) == RecordStatus.COMPLETED for r in [first, second, *rest]),
        timeout=60,
        what="the 7 reports once the locks are released",
    )
    figures = stack.ok("GET", "/api/admin/queue/stats", ADMIN_TOKEN)
    assert (figures["queued"], figures["inFlight"]) == (0, 0)
    assert figures["dead"] == redis_conn.llen(DEAD_LETTER_QUEUE_KEY)


def test_a_job_lpushed_by_the_net_producer_is_processed(
    stack: Stack, engine: Engine, redis_conn: redis.Redis
) -> None:
    token = stack.user(10)
    record_id = insert_record(engine, 10)
    invalid_before = redis_conn.llen(INVALID_QUEUE_KEY)
    redis_conn.lpush(REPORT_QUEUE_KEY, net_job(record_id))

    stack.wait_for_status(token, record_id, RecordStatus.COMPLETED)
    assert stack.ok("GET", f"/api/assessment/report?recordId={record_id}", token)["recordId"] == record_id
    assert redis_conn.llen(INVALID_QUEUE_KEY) == invalid_before


def test_a_net_job_dying_beside_the_records_own_retrying_job_leaves_the_record_to_that_job(
    stack: Stack, engine: Engine, redis_conn: redis.Redis
) -> None:
    """The last job of a record decides, whoever queued it: a .NET job of the record dies at
    RetryCount 3 while the record's own job waits for its retry; the record stays in status 3,
    and the own job, once the record's data is repaired, completes it."""
    token = stack.user(12)
    record_id = insert_record(engine, 12, answers=False)  # every attempt fails for now
    RedisReportQueue(redis_conn).enqueue(record_id)  # the web tier's job, counted
    own = f'"RecordId":{record_id},"RetryCount":1,'.encode()
    stack.wait_until(
        lambda: any(own in m for m in bytes_list(redis_conn.zrange(REPORT_DELAYED_KEY, 0, -1))),
        timeout=30,
        what="the record's own job waiting for its first retry",
    )
    job = net_job(record_id, retry_count=3)
    redis_conn.lpush(REPORT_QUEUE_KEY, job)  # another producer's job, at its last attempt
    stack.wait_until(
        lambda: any(
            e.startswith(job[:-1].encode())
            for e in bytes_list(redis_conn.lrange(DEAD_LETTER_QUEUE_KEY, 0, -1))
        ),
        timeout=30,
        what="the .NET job dead-lettered",
    )
    assert db_status(engine, record_id) == RecordStatus.GENERATING  # not 5: a job of it is alive
    add_answers(engine, record_id)
    stack.wait_for_status(token, record_id, RecordStatus.COMPLETED, timeout=120)


def test_sigterm_to_the_stack_loses_nothing(stack: Stack, engine: Engine, redis_conn: redis.Redis) -> None:
    quick, stuck, prefetched = (insert_record(engine, 11) for _ in range(3))
    url = stack.settings.database_url
    with contextlib.ExitStack() as quick_lock, row_locked(url, stuck):
        quick_lock.enter_context(row_locked(url, quick))
        # One at a time, each once the one before is taken: the worker hands out what it holds
        # as one batch (docs/queue.md, "Batches"), so `quick` and `stuck` are each a batch of their own
        # on one of its two threads, and `prefetched` a third that no thread is free to start.
        queue = RedisReportQueue(redis_conn)
        queue.enqueue(quick)
        stack.wait_until(
            lambda: sessions_waiting_for_a_lock(url) >= 1, timeout=60, what="a generation mid-transaction"
        )
        queue.enqueue(stuck)
        stack.wait_until(
            lambda: sessions_waiting_for_a_lock(url) >= 2, timeout=60, what="two generations mid-transaction"
        )
        queue.enqueue(prefetched)
        stack.wait_until(
            lambda: queue_figures(redis_conn).in_flight == 3,
            timeout=60,
            what="two generations mid-transaction and one job prefetched",
        )
        # SIGTERM to `make run`: supervisord signals each process group, and kills what
        # still runs MI_STOP_TIMEOUT_S (6 s) later. Each of supervisord and Dramatiq's worker
        # process looks at a signal within a second: the shutdown starts when `prefetched`
        # is back in the queue, and only then may a thread come free.
        started = time.monotonic()
        run = stack.current.process
        run.send_signal(signal.SIGTERM)
        stack.wait_until(
            lambda: redis_conn.llen(REPORT_QUEUE_KEY) == 1,
            timeout=8,  # < the kill (6 s) + the reaper (3 s): only the shutdown can return it
            what="the prefetched job back in the queue at the start of the shutdown",
        )
        assert run.poll() is None  # the worker waits for its jobs in flight
        quick_lock.close()  # `quick` can finish now, during the shutdown; `stuck` cannot
        stack.wait_until(
            lambda: db_status(engine, quick) == RecordStatus.COMPLETED,
            timeout=10,  # after the kill (6 s) it cannot complete at all
            what="the job in flight to finish during the shutdown",
        )
        stack.stop()
        stopped_in = time.monotonic() - started
        # `stuck`: SIGKILLed mid-transaction by supervisord once MI_STOP_TIMEOUT_S had passed
        # (the stop's bound, by supervisord's own doing: not a duration measured here).
        assert "killing 'worker'" in stack.current.output()
        assert stack.current.pids() == [], "a process of the stack survived"
    print(f"make run stopped {stopped_in:.1f} s after SIGTERM")

    # `stuck` waits in the killed worker's processing list (not finished, not failed, not
    # lost); `prefetched` never started and went back to the queue when the shutdown began.
    assert [db_status(engine, r) for r in (stuck, prefetched)] == [RecordStatus.GENERATING] * 2
    queued = [ReportQueueMessage.decode(m) for m in redis_conn.lrange(REPORT_QUEUE_KEY, 0, -1)]
    assert [(m.record_id, m.retry_count) for m in queued] == [(prefetched, 0)]
    assert queue_figures(redis_conn).in_flight == 1

    stack.start()
    stack.wait_until(
        lambda: all(db_status(engine, r) == RecordStatus.COMPLETED for r in (stuck, prefetched)),
        timeout=25,
        what="the two reports after the restart (the reaper returns the killed worker's jobs)",
    )
    assert [report_rows(engine, r) for r in (quick, stuck, prefetched)] == [(8, 1)] * 3
    stack.wait_until(
        lambda: (queue_figures(redis_conn).queued, queue_figures(redis_conn).in_flight) == (0, 0),
        timeout=30,
        what="the queue to settle",
    )
