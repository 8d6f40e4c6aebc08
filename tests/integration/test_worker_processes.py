"""`dramatiq actors.worker` as real processes: killed mid-generation, stopped by SIGTERM, Redis restarted."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from listbroker.keys import HEARTBEATS_KEY, PROCESSING_INFIX
from listbroker.retries import DEFAULT_MAX_LOST_DELIVERIES
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from redis_adapters.queue_figures import QueueFigures, queue_figures
from redis_adapters.queues import ADMIN_QUEUE_NAME, REPORT_QUEUE_KEY
from redis_adapters.report_message import ReportQueueMessage
from redis_adapters.report_queue import RedisReportQueue
from redis_adapters.task_store import RedisTaskStore
from services.domain.status import RecordStatus
from services.persistence.uow import UnitOfWork
from services.usecases.regeneration_tasks import MatchFilter, TaskState, start_regenerate_matching
from tests.support.processes import (
    RedisServer,
    WorkerProcess,
    row_locked,
    sessions_waiting_for_a_lock,
    wait_until,
)
from tests.support.record_state import report_rows, status_of
from tests.support.records import RecordSpec, insert_records

pytestmark = pytest.mark.slow

#: Short heartbeat timeout so a killed worker's messages come back in seconds.
FAST_REAPER = {"BROKER_HEARTBEAT_TIMEOUT_MS": "3000"}

MakeRecord = Callable[..., int]


@pytest.fixture
def start_worker(
    settings: Settings, tmp_path: Path, redis_url: str
) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(
        *,
        redis: str | None = None,
        threads: int = 1,
        queues: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> WorkerProcess:
        worker = WorkerProcess(
            queues=queues,
            database_url=settings.database_url,
            redis_url=redis or redis_url,
            log_path=tmp_path / f"worker-{len(started)}.log",
            threads=threads,
            env={**FAST_REAPER, **(env or {})},
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def consuming(client: redis.Redis) -> Callable[[], bool]:
    return lambda: client.zcard(HEARTBEATS_KEY) > 0


def test_worker_killed_mid_generation_redelivers_and_completes_once(
    start_worker: Callable[..., WorkerProcess],
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    settings: Settings,
) -> None:
    record_id = make_record(RecordStatus.GENERATING)
    with row_locked(settings.database_url, record_id):
        worker = start_worker()
        wait_until(consuming(redis_client), timeout=30, what="the worker to start consuming")
        RedisReportQueue(redis_client).enqueue(record_id)
        wait_until(
            lambda: sessions_waiting_for_a_lock(settings.database_url) > 0,
            timeout=30,
            what="generation to start",
        )
        worker.kill()  # SIGKILL to the supervisor and its worker process, mid-transaction
    assert status_of(session_factory, record_id) == RecordStatus.GENERATING
    assert queue_figures(redis_client).in_flight == 1  # held by the dead consumer, not lost

    start_worker()
    wait_until(
        lambda: status_of(session_factory, record_id) == RecordStatus.COMPLETED,
        timeout=3 + 5 + 10,
        what="the redelivered message to complete",
    )
    assert report_rows(session_factory, record_id) == (8, 1)
    wait_until(
        lambda: queue_figures(redis_client) == QueueFigures(0, 0, 0, 0, 0),
        timeout=30,
        what="the queue to settle",
    )
    assert not redis_client.exists(f"{REPORT_QUEUE_KEY}:crashed")


def test_worker_killed_mid_task_resumes_at_the_cursor_and_queues_each_record_once(
    start_worker: Callable[..., WorkerProcess],
    engine: Engine,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    settings: Settings,
) -> None:
    """A regenerateMatching task, its worker SIGKILLed while page 2 waits for a row lock:
    the reaper gives the message back, and the next worker resumes after page 1."""
    ids = insert_records(engine, [RecordSpec(status=RecordStatus.FAILED)] * 2_500)
    store = RedisTaskStore(redis_client)
    started = start_regenerate_matching(UnitOfWork(session_factory), store, MatchFilter(status=5))
    with row_locked(settings.database_url, ids[1_500]):
        # Only the admin queue: the report jobs stay in report:queue to be counted.
        worker = start_worker(queues=(ADMIN_QUEUE_NAME,))
        wait_until(
            lambda: sessions_waiting_for_a_lock(settings.database_url) > 0,
            timeout=30,
            what="page 2 to wait for the locked row",
        )
        worker.kill()
    task = store.get(started.task_id)
    assert task is not None
    assert (task.state, task.pages, task.cursor) == (TaskState.RUNNING, 1, ids[999])

    start_worker(queues=(ADMIN_QUEUE_NAME,))

    def done() -> bool:
        task = store.get(started.task_id)
        return task is not None and task.state is TaskState.DONE

    wait_until(done, timeout=3 + 5 + 20, what="the redelivered task to finish")
    task = store.get(started.task_id)
    assert task is not None
    assert (task.pages, task.regenerated) == (3, 2_500)
    queued = [
        ReportQueueMessage.decode(raw).record_id for raw in redis_client.lrange(REPORT_QUEUE_KEY, 0, -1)
    ]
    assert sorted(queued) == ids  # each record queued once


@pytest.mark.parametrize(
    ("batch_size", "prefetch"),
    [
        (1, 2),  # one job per call: `first` runs, `second` waits in the worker
        (2, 4),  # batches of 2: `first` and `second` run together, `third` and `fourth` wait
    ],
)
def test_sigterm_finishes_in_flight_work_and_returns_prefetched_messages(
    start_worker: Callable[..., WorkerProcess],
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    settings: Settings,
    batch_size: int,
    prefetch: int,
) -> None:
    records = [make_record(RecordStatus.GENERATING) for _ in range(prefetch + 1)]
    running, waiting, left = records[:batch_size], records[batch_size:prefetch], records[prefetch:]
    with row_locked(settings.database_url, records[0]):
        # Queued before the worker starts: its first fetch takes its whole prefetch at once.
        RedisReportQueue(redis_client).enqueue_many(records)
        worker = start_worker(
            threads=1, env={"REPORT_BATCH_SIZE": str(batch_size), "dramatiq_queue_prefetch": str(prefetch)}
        )
        wait_until(
            lambda: sessions_waiting_for_a_lock(settings.database_url) > 0,
            timeout=30,
            what="generation to start",
        )
        wait_until(lambda: queue_figures(redis_client).in_flight == prefetch, timeout=30, what="the prefetch")
        worker.signal(signal.SIGTERM)
        time.sleep(1.0)
        assert worker.process.poll() is None  # waiting for the work in flight
    assert worker.process.wait(timeout=30) == 0, worker.output()

    for record_id in running:
        assert status_of(session_factory, record_id) == RecordStatus.COMPLETED, worker.output()
    for record_id in waiting:
        assert status_of(session_factory, record_id) == RecordStatus.GENERATING, worker.output()
    queued = [ReportQueueMessage.decode(m) for m in redis_client.lrange(REPORT_QUEUE_KEY, 0, -1)]
    # The prefetched ones are next, in their order, as before.
    assert [m.record_id for m in queued] == [*waiting, *left][::-1]
    assert all(m.retry_count == 0 for m in queued)
    assert not redis_client.exists(f"{REPORT_QUEUE_KEY}:crashed")  # no attempt counted
    assert queue_figures(redis_client).in_flight == 0
    assert redis_client.zcard(HEARTBEATS_KEY) == 0


def test_worker_recovers_when_redis_restarts(
    start_worker: Callable[..., WorkerProcess],
    make_record: MakeRecord,
    session_factory: sessionmaker[Session],
    tmp_path: Path,
) -> None:
    server = RedisServer(tmp_path / "redis", appendonly=True).start()
    try:
        client = redis.Redis.from_url(server.url)
        worker = start_worker(redis=server.url, threads=2)
        wait_until(consuming(client), timeout=30, what="the worker to start consuming")
        before = make_record(RecordStatus.GENERATING)
        RedisReportQueue(client).enqueue(before)
        wait_until(
            lambda: status_of(session_factory, before) == RecordStatus.COMPLETED,
            timeout=30,
            what="the first report",
        )

        server.stop()
        time.sleep(2)  # the worker sees connection errors meanwhile
        server.start()
        after = make_record(RecordStatus.GENERATING)
        RedisReportQueue(client).enqueue(after)
        wait_until(
            lambda: status_of(session_factory, after) == RecordStatus.COMPLETED,
            timeout=30,
            what="a report after the restart",
        )
        assert worker.process.poll() is None
        assert worker.stop() == 0, worker.output()
    finally:
        server.stop()


def _worker_processes(group: int) -> dict[int, int]:
    """pid -> parent pid of the `actors.run_worker` processes in a process group."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[2]) == group and b"actors.run_worker" in command and fields[0] != "Z":
            found[int(entry.name)] = int(fields[1])
    return found


def test_the_worker_processes_die_with_their_main_process(
    start_worker: Callable[..., WorkerProcess], redis_url: str
) -> None:
    """SIGKILL of the worker's main process (the OOM killer, an operator): its worker
    processes end too, as a SIGKILL of the group would end them. Found by the soak
    (bench/soak.py): they lived on as orphans, unsupervised, next to the main process
    supervisord started again, taking jobs; their output went nowhere and reports they
    wrote never had their event logged."""
    worker = start_worker(threads=1)
    wait_until(consuming(redis.Redis.from_url(redis_url)), timeout=60, what="the worker to start consuming")
    processes = _worker_processes(worker.pid)
    (master,) = [pid for pid, parent in processes.items() if parent not in processes]
    children = [pid for pid, parent in processes.items() if parent == master]
    assert children, processes
    os.kill(master, signal.SIGKILL)
    wait_until(
        lambda: not set(children) & set(_worker_processes(worker.pid)),
        timeout=15,
        what=f"the worker processes {children} to end with their main process {master}",
    )


def test_a_worker_process_writes_its_lines_itself_not_through_its_main_process(
    start_worker: Callable[..., WorkerProcess],
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
) -> None:
    """Dramatiq pipes a worker process's stderr to its main process, which writes each line out
    again (~0.05 ms of its CPU per report line). The job lines go straight to the
    stderr the worker process inherited: they arrive while the main process is stopped."""
    worker = start_worker(threads=1)
    wait_until(consuming(redis_client), timeout=60, what="the worker to start consuming")
    processes = _worker_processes(worker.pid)
    (master,) = [pid for pid, parent in processes.items() if parent not in processes]
    record_id = make_record(RecordStatus.GENERATING)
    os.kill(master, signal.SIGSTOP)
    try:
        RedisReportQueue(redis_client).enqueue(record_id)
        wait_until(
            lambda: f"report of record {record_id} generated" in worker.output(),
            timeout=30,
            what="the job's line in the worker's log while its main process is stopped",
        )
    finally:
        os.kill(master, signal.SIGCONT)
    assert status_of(session_factory, record_id) == RecordStatus.COMPLETED


def report_lists(client: redis.Redis) -> list[bytes]:
    """The report queue's processing lists (one per live or not yet reaped consumer)."""
    return list(client.scan_iter(match=f"{REPORT_QUEUE_KEY}{PROCESSING_INFIX}*", count=1000))


def test_a_poison_record_takes_no_job_held_beside_it(
    start_worker: Callable[..., WorkerProcess],
    make_record: MakeRecord,
    redis_client: redis.Redis,
    session_factory: sessionmaker[Session],
    settings: Settings,
) -> None:
    """The report worker's process SIGKILLed while a record's job runs (held up by its row lock,
    as a poison pill that kills its worker would be) and it holds a batch of other records' jobs,
    again after each restart, one more time than the poison-pill threshold allows: the jobs held
    beside it go back uncounted each time and complete; only the running one is dead-lettered."""
    poison = make_record(RecordStatus.GENERATING)
    others = [make_record(RecordStatus.GENERATING) for _ in range(6)]
    # One thread, which the poison's job holds; the consumer holds every other job beside it.
    env = {"dramatiq_queue_prefetch": "10", "REPORT_BATCH_SIZE": "4"}
    charged: set[str] = set()
    kills = DEFAULT_MAX_LOST_DELIVERIES + 1
    with row_locked(settings.database_url, poison):
        for kill in range(kills):
            # A killed worker's session waits on the lock until it is released: count new ones.
            waiting = sessions_waiting_for_a_lock(settings.database_url)
            worker = start_worker(env=env)
            if kill == 0:
                wait_until(consuming(redis_client), timeout=60, what="the worker to start consuming")
                RedisReportQueue(redis_client).enqueue(poison)
                wait_until(
                    lambda: sessions_waiting_for_a_lock(settings.database_url) > waiting,  # noqa: B023
                    timeout=60,
                    what="the poison's job to start",
                )
                RedisReportQueue(redis_client).enqueue_many(others)

            def holding(waiting: int = waiting) -> bool:
                lists = report_lists(redis_client)
                return (
                    sessions_waiting_for_a_lock(settings.database_url) > waiting
                    and len(lists) == 1
                    and redis_client.llen(lists[0]) == 1 + len(others)
                )

            wait_until(holding, timeout=60, what=f"run {kill + 1}: the poison's job running, the others held")
            worker.kill()
            charged |= {str(job) for job in redis_client.hkeys(f"{REPORT_QUEUE_KEY}:crashed")}
    start_worker(env=env)
    wait_until(
        lambda: all(
            status_of(session_factory, r) in (RecordStatus.COMPLETED, RecordStatus.FAILED)
            for r in [poison, *others]
        ),
        timeout=60,
        what="every record to settle",
    )
    assert {r: status_of(session_factory, r) for r in others} == {r: RecordStatus.COMPLETED for r in others}
    assert status_of(session_factory, poison) == RecordStatus.FAILED
    assert len(charged) == 1  # only the poison's job ever counted a lost delivery
    (dead,) = redis_client.lrange(f"{REPORT_QUEUE_KEY}:dead", 0, -1)
    assert f"lost with its worker {kills} times".encode() in dead
