"""The topology matrix: `make run` on every Redis and PostgreSQL topology docs/development.md names.

In each: the stack comes up (every Procfile process, web included), a burst of users
submit over HTTP and every record reaches status 4 with its report, the console's
overview renders for an admin, `/metrics` scrapes, no processing list is left holding a
job, the web answered every request (200, or 503 with Retry-After), and no process logged
an error. Under Sentinel and Cluster, the master holding the report queue is SIGKILLed
in the middle of the burst: nothing is lost, the web answers throughout and follows the
new master (a submission may answer `enqueued: false` while no master answers, none
after the promotion the servers' logs record), `/readyz` is 503 while no master answers
and 200 after, and the only error lines are those of the failover itself.

Each test prints one `TOPOLOGY …` line with its figures (records submitted, reached
status 4, lost; the failover time from the servers' logs).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import redis

from redis_adapters.keyspace import Keyspace
from redis_adapters.redis_clients import redis_client
from scripts.cluster import RedisClusterServers
from scripts.sentinel_group import SentinelGroup, sentinel_binary
from services.domain.status import RecordStatus
from tests.support.binaries import needs
from tests.support.pgbouncer import PgBouncer, pgbouncer_binary
from tests.support.processes import wait_until
from tests.system.burst import Burst
from tests.system.conftest import StartStack
from tests.system.process_logs import errors_outside
from tests.system.shipped import Answer, ShippedStack, Submission
from tests.system.topologies import CLUSTER_TAKEOVER, SWITCH_MASTER, first_after
from web.redis_guard import RedisGuard

pytestmark = [pytest.mark.slow, pytest.mark.system, pytest.mark.timeout(900)]

#: Submissions of a burst without a failover.
RECORDS = 40
USERS = 4
#: Under a failover: the master is killed once this many submissions were answered, and the
#: burst goes on until this many more began after the web must have followed the new master.
KILL_AFTER = 16
AFTER_FOLLOWING = 12
#: How long after a promotion the web may still fail a call: its guard fails calls fast for a
#: cooldown after a failure, then lets one probe through (connect + reply timeouts).
FOLLOW_TOLERANCE_S = RedisGuard().probe_timeout_s
#: Bounds the wait for every record to reach status 4 (a lost job waits for the reconciler).
SETTLE_TIMEOUT_S = 240
PROCESS_TYPES = ("web", "worker", "hotpath", "reconciler")


@dataclass
class Figures:
    """What the closing note reports for a topology."""

    topology: str
    submitted: int = 0
    completed: int = 0
    not_enqueued: int = 0
    failover_s: float | None = None
    started_s: float = 0.0
    settled_s: float = 0.0

    def line(self) -> str:
        failover = f" failover_s={self.failover_s:.1f}" if self.failover_s is not None else ""
        return (
            f"TOPOLOGY {self.topology}: submitted={self.submitted} reached_4={self.completed}"
            f" lost={self.submitted - self.completed} enqueued_false={self.not_enqueued}{failover}"
            f" stack_up_s={self.started_s:.1f} all_done_s={self.settled_s:.1f}"
        )


# -- the checks every topology passes ----------------------------------------------------------


def processing_lists(stack: ShippedStack, keys: Keyspace) -> dict[str, int]:
    """Every processing list of the report and admin queues with its length, read by an operator."""
    client = redis_client(stack.redis_url, socket_timeout=5)
    try:
        found = {}
        for queue in (keys.report, keys.admin):
            for key in client.scan_iter(match=queue.processing_prefix + "*", count=1000):
                name = key.decode() if isinstance(key, bytes) else str(key)
                found[name] = int(client.llen(name))
        return found
    finally:
        client.close()


def settle(stack: ShippedStack, burst: Burst, submissions: list[Submission], figures: Figures) -> None:
    """Every record reaches status 4 with its report; then the queue, console and metrics agree."""
    began = time.monotonic()
    pending = {s.record_id for s in submissions}

    def done() -> bool:
        for record_id in list(pending):
            if burst.user_of(record_id).record(record_id)["status"] == RecordStatus.COMPLETED:
                pending.discard(record_id)
        return not pending

    stack.wait_until(done, timeout=SETTLE_TIMEOUT_S, what=f"every record to reach status 4 ({pending})")
    figures.settled_s = time.monotonic() - began
    # The admin's count, beside the users' view: every record of the test, and no other, in 4.
    figures.completed = stack.records_in_status(RecordStatus.COMPLETED)
    assert figures.completed == len(submissions)
    for submission in submissions:
        report = burst.user_of(submission.record_id).report(submission.record_id)
        assert report["recordId"] == submission.record_id
        assert len(report["dimensions"]) == 8, report

    # The hot path's event consumer moved the last record's history to PostgreSQL.
    last = submissions[-1].record_id
    stack.wait_until(
        lambda: {"answers.submitted", "report.generated"} <= set(stack.record_events(last)),
        timeout=60,
        what=f"record {last}'s events in the event log",
    )

    # Nothing is left in flight: the acknowledgements reached the master that holds the lists.
    keys = Keyspace.of(hash_tags=stack.redis_url.startswith("redis+cluster://"))
    stack.wait_until(
        lambda: not any(processing_lists(stack, keys).values()),
        timeout=60,
        what="the processing lists to be empty",
    )
    stats = stack.queue_stats()
    assert (stats["queued"], stats["inFlight"], stats["delayed"], stats["dead"]) == (0, 0, 0, 0), stats

    overview = stack.console_overview()
    assert {k: overview.figures[k] for k in ("queued", "in_flight", "dead")} == {
        "queued": "0",
        "in_flight": "0",
        "dead": "0",
    }, overview.figures
    for kind in PROCESS_TYPES:
        assert overview.alive(kind) >= 1, (kind, overview.processes)

    metrics = stack.metrics()
    submit = {"method": "POST", "endpoint": "/api/assessment/submitAnswers", "status": "200"}
    assert metrics[("http_requests_total", frozenset(submit.items()))] == len(submissions)
    assert metrics[("mi_report_latency_seconds_count", frozenset())] >= len(submissions)


def error_lines_of(stack: ShippedStack, windows: list[tuple[float, float]]) -> list[str]:
    return [str(line) for line in errors_outside([stack.log(t) for t in PROCESS_TYPES], windows)]


def steady(stack: ShippedStack, figures: Figures) -> None:
    """A burst without a fault, and every check."""
    burst = Burst(stack, users=USERS, limit=RECORDS).start()
    submissions = burst.join()
    figures.submitted = len(submissions)
    figures.not_enqueued = sum(1 for s in submissions if not s.enqueued)
    assert figures.not_enqueued == 0
    settle(stack, burst, submissions, figures)
    assert stack.web.unanswered_or_failed() == []
    assert error_lines_of(stack, []) == []
    print(figures.line())


def started(start_stack: StartStack, topology: dict[str, str], figures: Figures) -> ShippedStack:
    began = time.monotonic()
    stack = start_stack(topology)
    figures.started_s = time.monotonic() - began
    return stack


# -- without a failover ---------------------------------------------------------------------------


def test_topology_embedded_servers(start_stack: StartStack) -> None:
    """No URL at all: `make run` starts its own Redis and PostgreSQL."""
    figures = Figures("embedded")
    stack = started(start_stack, {}, figures)
    # Its own servers, their data in its state folder, not the test servers of this session.
    assert (stack.state / "redis").is_dir()
    assert (stack.state / "pg").exists()
    assert stack.redis_url != os.environ["REDIS_URL"]
    steady(stack, figures)


def test_topology_external_redis_and_postgresql(
    test_database: str, redis_url: str, redis_client: redis.Redis, start_stack: StartStack
) -> None:
    """REDIS_URL and DATABASE_URL of servers already running (the test servers)."""
    figures = Figures("external")
    stack = started(start_stack, {"REDIS_URL": redis_url, "DATABASE_URL": test_database}, figures)
    steady(stack, figures)


@needs(pgbouncer_binary(), "pgbouncer")
def test_topology_pgbouncer_in_transaction_mode(
    bouncer: PgBouncer, redis_url: str, redis_client: redis.Redis, start_stack: StartStack
) -> None:
    """DATABASE_URL through PgBouncer (`pool_mode = transaction`), DB_TRANSACTION_POOLING=1."""
    figures = Figures("pgbouncer")
    topology = {"REDIS_URL": redis_url, "DATABASE_URL": bouncer.url, "DB_TRANSACTION_POOLING": "1"}
    steady(started(start_stack, topology, figures), figures)


# -- a failover in the middle of the burst ----------------------------------------------------------


class ReadinessWatch:
    """`/readyz` asked every 0.2 s in a thread of its own, each answer kept (`Web.answers`)."""

    def __init__(self, stack: ShippedStack) -> None:
        self.stack = stack
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="readyz", daemon=True)
        self.answers: list[Answer] = []

    def _run(self) -> None:
        while not self._stop.is_set():
            self.stack.web.call("GET", "/readyz")
            self._stop.wait(0.2)

    def __enter__(self) -> ReadinessWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self.answers = [a for a in self.stack.web.answers if a.path == "/readyz"]


def through_a_failover(
    stack: ShippedStack,
    figures: Figures,
    kill: Callable[[], None],
    promoted: Callable[[], bool],
    promotion_logged: Callable[[float], float | None],
) -> None:
    """The burst; `kill` in its middle; every check, and the failover's own."""
    burst = Burst(stack, users=USERS).start()
    with ReadinessWatch(stack) as readiness:
        burst.wait_for(KILL_AFTER)
        killed_at = time.time()
        kill()
        wait_until(promoted, timeout=120, what="a replica to take over", interval=0.1)
        wait_until(
            lambda: promotion_logged(killed_at) is not None,
            timeout=30,
            what="the takeover in the servers' logs",
        )
        promoted_at = promotion_logged(killed_at)
        assert promoted_at is not None
        followed_by = promoted_at + FOLLOW_TOLERANCE_S
        burst.wait_for(AFTER_FOLLOWING, began_after=followed_by)
        submissions = burst.stop()
        time.sleep(1)  # a few more answers of /readyz after the burst
    figures.failover_s = promoted_at - killed_at
    figures.submitted = len(submissions)
    figures.not_enqueued = sum(1 for s in submissions if not s.enqueued)

    settle(stack, burst, submissions, figures)
    print(figures.line())

    # The web answered every call, and followed the new master: no submission begun once it
    # had to have followed was answered `enqueued: false`.
    assert stack.web.unanswered_or_failed() == []
    late = [s for s in submissions if s.began > followed_by and not s.enqueued]
    assert late == [], late
    # /readyz: 503 while no master answered, 200 once the web followed.
    during = [a.status for a in readiness.answers if killed_at < a.began and a.ended < promoted_at]
    assert 503 in during, during
    after = [a.status for a in readiness.answers if a.began > followed_by]
    assert after, "no /readyz answer after the web followed"
    assert set(after) == {200}, after
    # Errors only while no master answered (and the web's guard cycle after the promotion).
    assert error_lines_of(stack, [(killed_at, followed_by)]) == []


@needs(sentinel_binary(), "redis-sentinel")
def test_topology_sentinel_master_killed_mid_burst(
    test_database: str, sentinels: SentinelGroup, start_stack: StartStack
) -> None:
    """REDIS_URL=redis+sentinel://…: a master, a replica, three Sentinels; the master is SIGKILLed."""
    figures = Figures("sentinel")
    stack = started(start_stack, {"REDIS_URL": sentinels.url, "DATABASE_URL": test_database}, figures)
    first_master = sentinels.master_port()

    def promoted() -> bool:
        try:
            return sentinels.master_port() != first_master
        except redis.RedisError:
            return False

    sentinel_logs = [s.log for name, s in sentinels.servers.items() if name.startswith("sentinel")]
    through_a_failover(
        stack,
        figures,
        kill=lambda: sentinels.kill(sentinels.name_of(first_master)),
        promoted=promoted,
        promotion_logged=lambda since: first_after(sentinel_logs, SWITCH_MASTER, since),
    )


def test_topology_cluster_master_of_the_report_queue_killed_mid_burst(
    test_database: str, cluster: RedisClusterServers, start_stack: StartStack
) -> None:
    """REDIS_URL=redis+cluster://…: three masters with a replica each; the master holding the
    report queue's slot is SIGKILLed."""
    figures = Figures("cluster")
    stack = started(start_stack, {"REDIS_URL": cluster.url, "DATABASE_URL": test_database}, figures)
    queue = Keyspace.of(hash_tags=True).report.queue
    first_master = cluster.master_of(queue)
    replicas = [n.log for n in cluster.nodes if n.port != first_master]
    through_a_failover(
        stack,
        figures,
        kill=lambda: cluster.kill(first_master),
        promoted=lambda: cluster.master_of(queue) != first_master,
        promotion_logged=lambda since: first_after(replicas, CLUSTER_TAKEOVER, since),
    )
