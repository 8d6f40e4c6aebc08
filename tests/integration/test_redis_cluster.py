"""The pipeline on a three-master Redis Cluster, keys hash-tagged (REDIS_HASH_TAGS).

A private cluster (scripts/cluster.py) is started for this module and stopped after
it. Every Lua script and transaction must stay on one slot: a key of another slot would
fail with CROSSSLOT, a key on another node with MOVED, so each step below passing is the
proof. In-process: the broker's fetch, retry, dead letter and reaper. As processes: the
web app, `dramatiq actors.worker` and `python -m hotpath` on `redis+cluster://`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
import redis
from dramatiq.middleware import CurrentMessage
from listbroker import RedisListBroker
from listbroker.scripts import DEAD_MARK
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from actors.bootstrap import default_middleware
from config.settings import Settings
from hotpath.retention_loop import RetentionJob, invalid_lists
from reconciler.loop import Reconciler
from redis_adapters.keyspace import Keyspace
from redis_adapters.queue_figures import QueueFigures, queue_figures
from redis_adapters.queues import REPORT_ACTOR_NAME, REPORT_QUEUE_NAME
from redis_adapters.redis_clients import UNREACHABLE, redis_client
from redis_adapters.report_codec import ReportCodec
from redis_adapters.report_message import ReportQueueMessage
from redis_adapters.report_queue import RedisReportQueue
from scripts.cluster import redis_cluster
from scripts.processes import ProcfileProcess, SessionProcess
from services.domain.status import RecordStatus
from tests.support.actors import declare_actor
from tests.support.broker_fixtures import FAST_BROKER, WorkerFactory
from tests.support.envelope import data
from tests.support.hotpath import QUESTION_IDS, stored_answers
from tests.support.processes import WorkerProcess, wait_until
from tests.support.record_state import status_of
from tests.support.records import clear_event_log
from tests.support.redis_keys import as_bytes
from tests.support.web_app import USER_PATH
from web import create_app, issue_user_token
from web.redis_guard import RedisFailFast, guarded_redis

pytestmark = pytest.mark.slow

KEYS = Keyspace.of(hash_tags=True)
ALICE = 1001


@pytest.fixture(scope="module")
def cluster_url() -> Iterator[str]:
    with redis_cluster() as url:
        yield url


@pytest.fixture
def cluster(cluster_url: str) -> Iterator[redis.Redis]:
    """A client of the cluster, every node emptied before and after the test (the cluster is ours)."""
    client = redis_client(cluster_url, socket_timeout=10)
    assert isinstance(client, RedisCluster)
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    yield client
    client.flushall(target_nodes=RedisCluster.PRIMARIES)
    client.close()


@pytest.fixture
def cluster_broker(cluster: redis.Redis) -> Iterator[RedisListBroker]:
    previous = dramatiq.get_broker()
    broker = RedisListBroker(
        client=cluster,
        hash_tags=True,
        middleware=default_middleware(),
        codecs={REPORT_QUEUE_NAME: ReportCodec(REPORT_QUEUE_NAME, REPORT_ACTOR_NAME)},
        **FAST_BROKER,  # type: ignore[arg-type]
    )
    dramatiq.set_broker(broker)
    yield broker
    broker.close()
    dramatiq.set_broker(previous)


def test_the_keys_of_each_family_are_spread_over_the_nodes(cluster: redis.Redis) -> None:
    """Three families, three slots: the test below exercises more than one node."""
    assert isinstance(cluster, RedisCluster)
    nodes = {
        cluster.get_node_from_key(key).name
        for key in (KEYS.report.queue, KEYS.autosave.answers.dirty, KEYS.eventlog.queue)
    }
    assert len(nodes) >= 2


def test_fetch_retry_dead_letter_and_reaper_on_the_cluster(
    cluster: redis.Redis, cluster_broker: RedisListBroker, make_worker: WorkerFactory
) -> None:
    """Record 1 succeeds, 2 fails once (a retry), 3 always fails (a dead letter), and 4 is
    held by a consumer that died: the reaper gives it back and it runs."""
    runs: dict[int, list[int]] = {}
    dead: list[int] = []
    lock = threading.Lock()

    def generate(record_id: int) -> None:
        message = CurrentMessage.get_current_message()
        with lock:
            runs.setdefault(record_id, []).append(int(getattr(message, "redeliveries", 0)))
            attempt = len(runs[record_id])
        if record_id == 3 or (record_id == 2 and attempt == 1):
            raise RuntimeError("generation failed")

    def on_dead_letter(message: dramatiq.Message[Any]) -> None:
        dead.append(int(message.args[0]))

    actor = declare_actor(
        generate,
        cluster_broker,
        actor_name=REPORT_ACTOR_NAME,
        queue_name=REPORT_QUEUE_NAME,
        retry_delays=(200, 200, 200),
        on_dead_letter=on_dead_letter,
    )
    report = KEYS.report
    # A consumer that died running record 4: its processing list, the job's started mark, its
    # last beat long ago.
    lost = report.processing("deadbeefdeadbeef")
    running = ReportQueueMessage.new(4).encode()
    cluster.lpush(lost, running)
    cluster.hset(report.started("deadbeefdeadbeef"), running, 1)
    cluster.zadd(report.heartbeats, {lost: 1})
    RedisReportQueue(cluster, key=report.queue, jobs_key=report.jobs).enqueue_many([1, 2, 3])
    cluster.lpush(report.queue, b"not a job")  # quarantined, verbatim
    actor.send_with_options(args=(5,), delay=300)  # the delayed set, then released on time
    assert queue_figures(cluster, hash_tag=True) == QueueFigures(
        queued=4, dead=0, delayed=1, in_flight=1, invalid=0
    )

    make_worker(cluster_broker)
    wait_until(lambda: 4 in runs, timeout=60, what="the reaper to give record 4 back")
    cluster_broker.join(REPORT_QUEUE_NAME, timeout=20_000)

    assert runs[1] == [0]
    assert len(runs[2]) == 2  # a failure, then the retry
    assert len(runs[3]) == 4  # the first attempt and three retries
    assert runs[4] == [1]  # one delivery lost with its worker
    assert runs[5] == [0]
    assert dead == [3]
    [letter] = cluster.lrange(report.dead, 0, -1)
    assert ReportQueueMessage.decode(as_bytes(letter)).record_id == 3
    assert cluster.lrange(report.invalid, 0, -1) == [b"not a job"]
    assert queue_figures(cluster, hash_tag=True) == QueueFigures(
        queued=0, dead=1, delayed=0, in_flight=0, invalid=1
    )
    assert not cluster.exists(lost)
    assert not cluster.exists(report.crashed)  # the lost delivery's count went with its ack
    assert cluster.hgetall(report.jobs) == {}  # every job ended
    assert not cluster.exists("report:queue", "report:queue:dead", "broker:heartbeats")  # no untagged key


def test_a_closing_consumer_gives_its_prefetched_messages_back(
    cluster: redis.Redis, cluster_broker: RedisListBroker
) -> None:
    """requeue.lua and release.lua on the cluster: what was fetched but never started returns."""
    declare_actor(
        lambda record_id: None, cluster_broker, actor_name=REPORT_ACTOR_NAME, queue_name=REPORT_QUEUE_NAME
    )
    report = KEYS.report
    RedisReportQueue(cluster, key=report.queue, jobs_key=report.jobs).enqueue_many([1, 2, 3])
    consumer = cluster_broker.consume(REPORT_QUEUE_NAME, prefetch=3, timeout=1000)
    first = next(consumer)
    assert first is not None
    assert cluster.llen(consumer.processing_key) == 3
    consumer.ack(first)
    consumer.close()
    queued = [ReportQueueMessage.decode(as_bytes(m)).record_id for m in cluster.lrange(report.queue, 0, -1)]
    assert queued == [3, 2]  # `2` is next, as before
    assert not cluster.exists(consumer.processing_key)
    assert cluster.zcard(report.heartbeats) == 0
    assert cluster.hgetall(report.jobs) == {b"2": b"1", b"3": b"1"}


def test_the_reconciler_on_the_cluster(
    cluster: redis.Redis, make_record: Callable[..., int], session_factory: sessionmaker[Session]
) -> None:
    """enqueue_missing.lua and clear_dead_marks.lua with hash-tagged keys, and its event log."""
    lost, dead_lettered = make_record(status=3), make_record(status=3)
    with session_factory() as session:
        session.execute(
            text(
                "UPDATE assessment_records SET updated_at = now() - interval '1 minute' WHERE id = ANY(:ids)"
            ),
            {"ids": [lost, dead_lettered]},
        )
        session.commit()
    report = KEYS.report
    cluster.hset(report.jobs, str(dead_lettered), DEAD_MARK)  # its status-5 write had failed
    healer = Reconciler(
        cluster,
        session_factory,
        Settings(reconcile_grace_ms=5_000),
        queue_key=report.queue,
        jobs_key=report.jobs,
        events_keys=KEYS.eventlog,
    )
    try:
        result = healer.run_once()
    finally:
        healer.close()
    assert result.enqueued == [lost]
    assert result.failed == [dead_lettered]
    assert status_of(session_factory, dead_lettered) == RecordStatus.FAILED
    [job] = cluster.lrange(report.queue, 0, -1)
    assert ReportQueueMessage.decode(as_bytes(job)).record_id == lost
    assert cluster.hgetall(report.jobs) == {str(lost).encode(): b"1"}  # the dead mark is cleared
    assert cluster.llen(KEYS.eventlog.queue) == 1  # the requeue's event
    with session_factory() as session:  # the failure's, committed with status 5
        recorded = session.scalars(
            text("SELECT record_id FROM event_log WHERE event_type = 'report.failure_recorded'")
        ).all()
    assert recorded == [dead_lettered]


@pytest.fixture
def cluster_settings(settings: Settings, cluster_url: str) -> Settings:
    return settings.with_overrides(redis_url=cluster_url, redis_hash_tags=True)


@pytest.fixture
def processes(cluster_settings: Settings, tmp_path: Path) -> Iterator[Callable[[str], SessionProcess]]:
    started: list[SessionProcess] = []
    env = {
        **os.environ,
        "DATABASE_URL": cluster_settings.database_url,
        "REDIS_URL": cluster_settings.redis_url,
        "PYTHONUNBUFFERED": "1",
        "HOTPATH_ANSWERS_INTERVAL_MS": "200",
        "HOTPATH_EVENTS_INTERVAL_MS": "200",
    }

    def start(kind: str) -> SessionProcess:
        log = tmp_path / f"{kind}.log"
        if kind == "worker":
            process: SessionProcess = WorkerProcess(
                database_url=cluster_settings.database_url,
                redis_url=cluster_settings.redis_url,
                log_path=log,
                env=env,
            )
        else:
            process = ProcfileProcess("hotpath", env=env, log_path=log)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def event_count(engine: Engine, record_id: int) -> int:
    with engine.connect() as conn:
        return int(
            conn.scalar(text("SELECT count(*) FROM event_log WHERE record_id = :id"), {"id": record_id}) or 0
        )


def test_submit_to_report_with_autosave_and_event_log_on_the_cluster(
    cluster: redis.Redis,
    cluster_settings: Settings,
    engine: Engine,
    session_factory: sessionmaker[Session],
    processes: Callable[[str], SessionProcess],
) -> None:
    clear_event_log(engine)
    app = create_app(cluster_settings)  # the web tier's own (guarded) cluster client
    web = app.test_client()
    alice = {"Authorization": f"Bearer {issue_user_token(cluster_settings.secret_key, ALICE)}"}
    hotpath = processes("hotpath")
    worker = processes("worker")

    record_id = int(data(web.post(f"{USER_PATH}/createRecord", headers=alice))["id"])
    data(web.post(f"{USER_PATH}/startAssessment", json={"recordId": record_id}, headers=alice))
    answers = [{"questionId": q, "value": q % 5 + 1} for q in QUESTION_IDS]
    saved = data(
        web.post(f"{USER_PATH}/saveAnswers", json={"recordId": record_id, "answers": answers}, headers=alice)
    )
    assert saved["answeredCount"] == len(QUESTION_IDS)
    assert cluster.sismember(KEYS.autosave.answers.dirty, str(record_id))

    # The hot path's answer flusher, on the cluster, writes the autosave to PostgreSQL.
    wait_until(
        lambda: len(stored_answers(engine, [record_id])[record_id]) == len(QUESTION_IDS),
        timeout=30,
        what=f"the autosave to be flushed ({hotpath.output()[-2000:]})",
    )
    result = data(
        web.post(f"{USER_PATH}/submitAnswers", json={"recordId": record_id, "answers": []}, headers=alice)
    )
    assert result["enqueued"] is True
    wait_until(
        lambda: status_of(session_factory, record_id) == RecordStatus.COMPLETED,
        timeout=60,
        what=f"the report ({worker.output()[-2000:]})",
    )
    # The event log (web and worker events through `{eventlog}:queue`) reaches its table.
    wait_until(lambda: event_count(engine, record_id) >= 3, timeout=30, what="the event log to be ingested")
    # The consumer clears its backup in Redis after the insert's commit, a step later: on a
    # loaded machine the rows could be read before the clear (make test under stress-ng).
    wait_until(
        lambda: cluster.llen(KEYS.eventlog.backup) == 0,
        timeout=30,
        what="the event log's backup to be cleared",
    )
    admin = {"Authorization": "Bearer test-admin-token"}
    settled = {"queued": 0, "dead": 0, "delayed": 0, "inFlight": 0, "invalid": 0}

    def queue_settled() -> bool:
        # The web tier's own reading (figures.lua on the cluster); the ack may still be on its way.
        stats = data(web.get("/api/admin/queue/stats", headers=admin))
        return {k: stats[k] for k in settled} == settled

    wait_until(queue_settled, timeout=30, what="the queue figures to settle")
    assert hotpath.alive()
    assert worker.alive()


def test_the_web_client_fails_fast_on_a_hung_node_only(cluster: redis.Redis) -> None:
    """The web tier's guarded client: a node that does not answer (CLIENT PAUSE) costs one call
    its reply timeout, then fails fast, as a single server does (a `redis.TimeoutError`, which
    every caller handles); the other nodes, and the slot map read from them, stay reachable.

    (One guard for the whole cluster made every node fail fast once one had: the slot map
    could not be read again, "Redis Cluster cannot be connected", and after a failover the
    web never followed the new master.)"""
    assert isinstance(cluster, RedisCluster)
    url = "redis+cluster://" + ",".join(node.name for node in cluster.get_primaries())
    hung, healthy = KEYS.report.queue, KEYS.autosave.answers.dirty
    hung_node = cluster.get_node_from_key(hung)
    assert cluster.get_node_from_key(healthy).name != hung_node.name
    client = guarded_redis(url)
    pause = redis.Redis(host=hung_node.host, port=hung_node.port)
    try:
        client.set(hung, b"1")
        client.set(healthy, b"1")
        pause.execute_command("CLIENT", "PAUSE", "3000", "ALL")
        with pytest.raises(UNREACHABLE):
            client.get(hung)  # the reply timeout, then the slot map read again from the others
        with pytest.raises(RedisFailFast):
            client.get(hung)  # fails fast
        assert client.get(healthy) == b"1"
    finally:
        pause.execute_command("CLIENT", "UNPAUSE")
        pause.close()
        client.close()


def test_a_retention_cycle_on_the_cluster(
    cluster: redis.Redis, session_factory: sessionmaker[Session]
) -> None:
    """The hot path's retention trims its three set-aside lists, one slot each (`{hotpath}` twice,
    `{eventlog}`): never in one transaction (CROSSSLOT, every cycle)."""
    job = RetentionJob(cluster, session_factory, invalid_keys=invalid_lists(KEYS))
    try:
        report = job.run_once(lock_ttl_ms=10_000)
    finally:
        job.close()
    assert report.owner
    assert report.trimmed == {}


def test_a_cluster_with_no_node_answering_is_unreachable(cluster: redis.Redis) -> None:
    """When no node answers, not even to read the slot map again, a call fails as on a
    single server with one of the errors every caller handles as "Redis is unreachable" (a
    503, a submission `enqueued: false`), not with redis-py's RedisClusterException (a 500).
    Which of them (a connection error, a timeout) depends on which timeout fires first and
    on redis-py's release; the contract is the group."""
    assert isinstance(cluster, RedisCluster)
    nodes = cluster.get_primaries()
    url = "redis+cluster://" + ",".join(node.name for node in nodes)
    client = guarded_redis(url)
    pauses = [redis.Redis(host=node.host, port=node.port) for node in nodes]
    try:
        client.set(KEYS.report.queue, b"1")
        for pause in pauses:
            pause.execute_command("CLIENT", "PAUSE", "8000", "ALL")
        with pytest.raises(UNREACHABLE) as raised:
            client.get(KEYS.report.queue)
        assert not isinstance(raised.value, RedisClusterException)
    finally:
        for pause in pauses:
            pause.execute_command("CLIENT", "UNPAUSE")
            pause.close()
        client.close()
