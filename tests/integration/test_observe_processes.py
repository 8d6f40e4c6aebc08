"""Metrics, liveness and logs of real worker processes (`python -m actors.run_worker`, the
Procfile's worker line): after a known workload the scraped counters equal what happened,
the processes beat and say `stopped` at a clean exit, a killed one shows as gone after the
heartbeat timeout, and with LOG_FORMAT=json every line of their output is one JSON object."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from observability.liveness import BEAT_TIMEOUT_S, live_processes
from redis_adapters.queues import DEAD_LETTER_QUEUE_KEY, MAX_RETRY_COUNT, REPORT_ACTOR_NAME
from redis_adapters.report_queue import RedisReportQueue
from scripts.processes import ProcfileProcess, SessionProcess
from services.domain.status import RecordStatus
from tests.support.processes import WorkerProcess, wait_until
from tests.support.record_state import status_of

#: Good records (reports generated) and records without answers (every attempt fails).
GOOD, BAD = 4, 2
#: The process kinds of the background (not web).
BACKGROUND_KINDS = ("worker", "hotpath", "reconciler")
#: The documented setting that shortens the retry schedule (redis_adapters/queues.py).
FAST_SCHEDULE = {"REPORT_RETRY_DELAYS_MS": "50,50,50"}


def start_worker(
    settings: Settings, redis_url: str, log: Path, *, processes: int, **env: str
) -> SessionProcess:
    return WorkerProcess(
        database_url=settings.database_url,
        redis_url=redis_url,
        log_path=log,
        processes=processes,
        threads=2,
        env=env,
    )


@pytest.fixture
def workers(settings: Settings, redis_url: str, tmp_path: Path) -> Iterator[Callable[..., SessionProcess]]:
    started: list[SessionProcess] = []

    def start(processes: int = 1, **env: str) -> SessionProcess:
        worker = start_worker(
            settings, redis_url, tmp_path / f"worker-{len(started)}.log", processes=processes, **env
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def samples(body: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def worker_beats(client: redis.Redis, **kwargs: Any) -> list[Any]:
    return [b for b in live_processes(client, **kwargs) if b.kind == "worker"]


def test_scraped_counters_equal_a_known_workload_and_every_log_line_is_json(
    workers: Callable[..., SessionProcess],
    make_record: Callable[..., int],
    engine: Engine,
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
    client: FlaskClient,
    admin_headers: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    good = [make_record(status=3) for _ in range(GOOD)]
    bad = [make_record(status=3, answers={}) for _ in range(BAD)]  # no answers: never a report
    with engine.begin() as conn:  # a submission time, so the latency is measured
        conn.execute(
            text("UPDATE assessment_records SET submitted_at = now() WHERE id = ANY(:ids)"), {"ids": good}
        )
    queue = RedisReportQueue(redis_client)
    for record_id in good + bad:
        queue.enqueue(record_id)
    worker = workers(
        processes=2, PROMETHEUS_MULTIPROC_DIR=str(metrics_dir), LOG_FORMAT="json", **FAST_SCHEDULE
    )
    wait_until(
        lambda: (
            redis_client.llen(DEAD_LETTER_QUEUE_KEY) == BAD
            and all(status_of(session_factory, r) == RecordStatus.COMPLETED for r in good)
        ),
        timeout=60,
        what="the workload done",
    )
    wait_until(lambda: len(worker_beats(redis_client)) == 2, timeout=20, what="both worker processes beating")
    assert all(b.alive for b in worker_beats(redis_client))

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(metrics_dir))
    response = client.get("/metrics", headers=admin_headers)
    assert response.status_code == 200
    found = samples(response.get_data(as_text=True))
    labels = {"queue_name": "report", "actor_name": REPORT_ACTOR_NAME}
    attempts_failed = BAD * (MAX_RETRY_COUNT + 1)
    # Delivery is at least once: a message delivered again (its record already in 4) is
    # processed, counted and logged as skipped. Each such line is one more message.
    skipped = worker.output().count(" skipped: record ")
    processed = GOOD + attempts_failed + skipped
    assert value(found, "dramatiq_messages_total", **labels) == processed, worker.output()[-4000:]
    assert value(found, "dramatiq_message_errors_total", **labels) == attempts_failed
    assert value(found, "dramatiq_message_retries_total", **labels) == BAD * MAX_RETRY_COUNT
    assert value(found, "dramatiq_message_rejects_total", **labels) == BAD
    assert value(found, "dramatiq_message_duration_milliseconds_count", **labels) == processed
    assert value(found, "mi_report_latency_seconds_count") == GOOD
    assert value(found, "mi_queue_dead", queue_name="report") == BAD
    assert value(found, "mi_queue_depth", queue_name="report") == 0
    assert value(found, "mi_redis_up") == 1

    health = client.get("/healthz/workers")
    assert health.status_code == 503  # no hotpath process runs in this test
    assert health.json is not None
    assert health.json["data"]["worker"] == {"alive": 2, "gone": 0, "stopped": 0}

    assert worker.stop() == 0
    assert [b.doing for b in worker_beats(redis_client)] == ["stopped", "stopped"]
    # A clean stop is not a loss: an alert on `gone > 0` does not fire after a restart.
    stopped = client.get("/healthz/workers").json
    assert stopped is not None
    assert stopped["data"]["worker"] == {"alive": 0, "gone": 0, "stopped": 2}
    lines = [line for line in worker.output().splitlines() if line.strip()]
    assert lines
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    assert {e["process_kind"] for e in entries} == {"worker"}
    generated = [e for e in entries if "generated" in e["message"]]
    assert sorted(e["record_id"] for e in generated) == sorted(good)  # one line per report
    assert all(e["message_id"] for e in generated)
    # One line per failed attempt, saying why; the traceback once, with the dead letter.
    attempts = [e for e in entries if e.get("record_id") == bad[0] and " failed (attempt " in e["message"]]
    assert len(attempts) == MAX_RETRY_COUNT + 1
    assert all("ServiceError" in e["message"] for e in attempts)
    tracebacks = [e for e in entries if e.get("record_id") == bad[0] and "exc_info" in e]
    assert len(tracebacks) == 1
    assert "Traceback" in tracebacks[0]["exc_info"]
    assert "dead-lettering it" in tracebacks[0]["message"]


def test_a_killed_worker_shows_as_gone_after_the_heartbeat_timeout(
    workers: Callable[..., SessionProcess], redis_client: redis.Redis
) -> None:
    worker = workers(processes=1)
    wait_until(lambda: len(worker_beats(redis_client)) == 1, timeout=20, what="the worker's beat")
    (beat,) = worker_beats(redis_client)
    assert beat.alive
    status = Path(f"/proc/{beat.pid}/status").read_text()
    assert f"PPid:\t{worker.pid}\n" in status  # a worker process of this Dramatiq
    worker.kill()
    assert worker_beats(redis_client)[0].doing != "stopped"  # no clean exit was recorded
    later = time.time() + BEAT_TIMEOUT_S + 1
    assert [b.alive for b in worker_beats(redis_client, now=later)] == [False]


def test_healthz_workers_passes_once_worker_and_hotpath_beat(
    workers: Callable[..., SessionProcess],
    settings: Settings,
    redis_url: str,
    redis_client: redis.Redis,
    client: FlaskClient,
    tmp_path: Path,
) -> None:
    env = {**os.environ, "DATABASE_URL": settings.database_url, "REDIS_URL": redis_url, "LOG_FORMAT": "json"}
    assert client.get("/healthz/workers").status_code == 503
    others = [
        ProcfileProcess(kind, env=env, log_path=tmp_path / f"{kind}.log")
        for kind in ("hotpath", "reconciler")
    ]
    try:
        workers(processes=1)
        wait_until(
            lambda: {b.kind for b in live_processes(redis_client) if b.alive} == set(BACKGROUND_KINDS),
            timeout=60,
            what="worker, hotpath and reconciler beating",
        )
        response = client.get("/healthz/workers")
        assert response.status_code == 200
        assert response.json is not None
        data = response.json["data"]
        assert {kind: data[kind]["alive"] for kind in ("worker", "hotpath", "reconciler", "web")} == {
            "worker": 1,
            "hotpath": 1,
            "reconciler": 1,
            "web": 0,
        }
        doing = {b.kind: b.doing for b in live_processes(redis_client)}
        assert doing["hotpath"] in {"idle", "flushing answers", "flushing progress", "consuming events"}
    finally:
        for process in others:
            process.stop()
    beats = {b.kind: b for b in live_processes(redis_client)}
    assert (beats["hotpath"].doing, beats["reconciler"].doing) == ("stopped", "stopped")
    for process in others:  # with LOG_FORMAT=json, their every line is JSON too
        lines = [line for line in process.output().splitlines() if line.strip()]
        assert lines
        assert all(json.loads(line)["process_kind"] in {"hotpath", "reconciler"} for line in lines)
