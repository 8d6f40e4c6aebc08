"""Every long-running loop waits and stays quiet while a server is gone, then recovers.

Each loop runs for real against the test Redis (or PostgreSQL) reached through a
`FaultProxy`, which the test cuts off and brings back. While it is down, the loop's thread
must spend next to no CPU time (it waits with backoff instead of retrying at once; CPU
time is work done, so the bound holds on a loaded machine) and log its failure once; once
it is back, the loop works again and logs its recovery once (broker/src/listbroker/backoff.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from listbroker import AvailabilityGate, DependencyUnavailable, RedisListBroker
from sqlalchemy.orm import Session, sessionmaker

from background.leased_loop import LeasedLoop, LoopSpec
from config.settings import Settings
from hotpath.runner import build_loops
from hotpath.runner import logger as hotpath_logger
from hotpath.runtime_settings import SettingsSource
from observability.heartbeat import Heartbeat
from reconciler.loop import STATS_KEY, Reconciler, loop_spec
from redis_adapters.lock import RedisLock
from scripts.faults import FaultProxy
from services.persistence.db import database_answers, make_engine, make_session_factory
from tests.support.actors import declare_actor
from tests.support.broker_fixtures import BrokerFactory, WorkerFactory
from tests.support.proc_stats import thread_cpu_s
from tests.support.processes import wait_until

pytestmark = pytest.mark.slow

#: How long each outage lasts here: long enough for a spinning loop to show.
OUTAGE_S = 3.0
#: CPU seconds a waiting loop may spend in that time (a spinning one spends about OUTAGE_S).
CPU_BUDGET_S = 0.15


@pytest.fixture
def redis_proxy(redis_url: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(redis_url)
    yield proxy
    proxy.close()


def records_of(caplog: pytest.LogCaptureFixture, prefix: str | tuple[str, ...]) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(prefix) and r.levelno >= logging.WARNING]


def reconciler_stats(client: redis.Redis) -> object:
    return client.hget(STATS_KEY, "last_pass_ms")


def cpu_during_outage(proxy: FaultProxy, thread: threading.Thread) -> float:
    """CPU seconds `thread` spends while `proxy` is down for OUTAGE_S."""
    assert thread.native_id is not None
    proxy.down()
    before = thread_cpu_s(thread.native_id)
    time.sleep(OUTAGE_S)
    spent = thread_cpu_s(thread.native_id) - before
    proxy.up()
    return spent


def test_broker_housekeeping_waits_while_redis_is_down(
    make_broker: BrokerFactory, redis_proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """A failing pass left its next beat and reap due in the past, so it never waited:
    a worker ran 46 minutes at a core writing 'retrying in 1 s' 8.2 million times."""
    caplog.set_level(logging.INFO)
    broker: RedisListBroker = make_broker(
        client=redis.Redis.from_url(redis_proxy.url, socket_timeout=2, socket_connect_timeout=1)
    )
    broker.declare_queue("quiet")
    maintenance = broker.maintenance()
    spent = cpu_during_outage(redis_proxy, maintenance)
    lines = records_of(caplog, "listbroker.maintenance")
    assert spent < CPU_BUDGET_S, f"{spent:.2f} CPU s in {OUTAGE_S} s; {len(lines)} lines"
    assert [r.getMessage().split(":")[0] for r in lines] == ["Broker housekeeping"]
    wait_until(
        lambda: any("recovered" in r.getMessage() for r in records_of(caplog, "listbroker.maintenance")),
        timeout=30,
        what="housekeeping's recovery",
    )
    assert len(records_of(caplog, "listbroker.maintenance")) == 2


def test_consumer_restarts_back_off_and_say_so_once(
    make_broker: BrokerFactory,
    make_worker: WorkerFactory,
    redis_proxy: FaultProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A consumer whose fetch fails waits Redis out itself with backoff and logs it once:
    Dramatiq's consumer thread, which would restart it with two lines each time (a CRITICAL
    and an INFO), never sees the error and logs nothing."""
    caplog.set_level(logging.INFO)
    broker: RedisListBroker = make_broker(
        client=redis.Redis.from_url(redis_proxy.url, socket_timeout=2, socket_connect_timeout=1)
    )
    done: list[int] = []
    actor = declare_actor(done.append, broker, queue_name="quiet")
    worker = make_worker(broker)
    actor.send(1)
    wait_until(lambda: done == [1], timeout=30, what="the first job")
    consumer_thread = worker.consumers["quiet"]
    caplog.clear()
    spent = cpu_during_outage(redis_proxy, consumer_thread)
    during = [(r.name, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]
    assert spent < CPU_BUDGET_S, f"{spent:.2f} CPU s; {during}"
    assert not [line for line in during if line[0].startswith("dramatiq.worker")], during
    # Once the proxy is up again the consumer may already have said it recovered (a loaded
    # machine reads the log late); what must appear once is the failure.
    consumer_lines = [
        m for name, m in during if m.startswith("Consumer of quiet:queue") and "recovered after" not in m
    ]
    # Fetching and recording acknowledgements are two steps, each with its own backoff: the
    # second says so too when acknowledgements were pending as the outage began (seen under
    # stress-ng). Each step says its failure once.
    acks = [m for m in consumer_lines if m.startswith("Consumer of quiet:queue: recording acknowledgements")]
    fetches = [m for m in consumer_lines if m not in acks]
    assert len(fetches) == 1, during
    assert len(acks) <= 1, during
    actor.send(2)
    wait_until(lambda: done == [1, 2], timeout=60, what="a job after the outage")
    assert any(
        r.getMessage().startswith("Consumer of quiet:queue: recovered after") for r in caplog.records
    ), [r.getMessage() for r in caplog.records]


def test_the_availability_gate_probes_with_backoff_and_says_so_once(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    proxy = FaultProxy(settings.database_url)
    engine = make_engine(proxy.url, pool_size=1)
    try:
        gate = AvailabilityGate(lambda: database_answers(make_session_factory(engine)))
        proxy.down()
        gate.close(DependencyUnavailable("the test cut the database off"))
        prober = gate._prober
        assert prober is not None
        assert prober.native_id is not None
        before = thread_cpu_s(prober.native_id)
        time.sleep(OUTAGE_S)
        spent = thread_cpu_s(prober.native_id) - before
        lines = [r.getMessage() for r in records_of(caplog, "listbroker.gate")]
        assert spent < CPU_BUDGET_S, f"{spent:.2f} CPU s; {lines}"
        assert [m.split(":")[0] for m in lines] == ["Dependency unavailable, messages held"], lines
        assert not gate.is_open
        proxy.up()
        wait_until(lambda: gate.is_open, timeout=30, what="the gate to open")
        lines = [r.getMessage() for r in records_of(caplog, "listbroker.gate")]
        assert len(lines) == 2, lines
        assert lines[1].startswith("Dependency unavailable, messages held: recovered after"), lines
    finally:
        engine.dispose()
        proxy.close()


def test_a_heartbeat_says_once_that_it_fails_and_when_it_works_again(
    redis_proxy: FaultProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    client = redis.Redis.from_url(redis_proxy.url, socket_timeout=1, socket_connect_timeout=1)
    heartbeat = Heartbeat(client, "reconciler", lambda: "reconciling", interval_s=0.05).start()
    try:
        spent = cpu_during_outage(redis_proxy, heartbeat._thread)
        lines = [r.getMessage() for r in records_of(caplog, "observability.heartbeat")]
        assert spent < 4 * CPU_BUDGET_S, f"{spent:.2f} CPU s; {lines}"  # it beats every 50 ms here
        assert [m.split(":")[0] for m in lines] == ["Heartbeat of this reconciler process"], lines
        wait_until(
            lambda: len(records_of(caplog, "observability.heartbeat")) == 2,
            timeout=30,
            what="the heartbeat's recovery line",
        )
    finally:
        heartbeat.stop(timeout=5)
        client.close()


def test_the_hot_path_loops_back_off_and_say_so_once(
    redis_proxy: FaultProxy,
    session_factory: sessionmaker[Session],
    redis_client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    client = redis.Redis.from_url(redis_proxy.url, socket_timeout=2, socket_connect_timeout=1)
    source = SettingsSource(
        client, env={"HOTPATH_ANSWERS_INTERVAL_MS": "100", "HOTPATH_EVENTS_INTERVAL_MS": "100"}
    )
    stop = threading.Event()
    loops = [
        LeasedLoop(spec, source.read, stop, logger=hotpath_logger)
        for spec in build_loops(client, session_factory)
    ]
    for loop in loops:
        loop.start()
    try:
        wait_until(lambda: all(loop.cycles for loop in loops), timeout=30, what="a cycle of every loop")
        caplog.clear()
        redis_proxy.down()
        before = {loop.name: thread_cpu_s(loop.native_id or 0) for loop in loops}
        time.sleep(OUTAGE_S)
        spent = {loop.name: thread_cpu_s(loop.native_id or 0) - before[loop.name] for loop in loops}
        # What was actors/ (the loops, their leases, observability) before the redesign.
        lines = [
            r.getMessage()
            for r in records_of(caplog, ("hotpath", "redis_adapters", "observability", "actors"))
        ]
        redis_proxy.up()
        assert all(s < CPU_BUDGET_S for s in spent.values()), f"{spent}; {lines}"
        failing = {loop.spec.name for loop in loops if loop.failures}
        assert failing, "no loop ran a cycle during the outage"
        for name in failing:
            assert sum(m.startswith(f"hot path {name} loop:") for m in lines) == 1, lines
        assert len(lines) <= len(failing) + 1, lines  # and the settings' line
        wait_until(lambda: not any(loop.failures for loop in loops), timeout=60, what="every loop to recover")
        recovered = [r.getMessage() for r in records_of(caplog, "hotpath") if "recovered" in r.getMessage()]
        assert {m.split(" loop:")[0] for m in recovered if " loop:" in m} == {
            f"hot path {n}" for n in failing
        }
    finally:
        stop.set()
        for loop in loops:
            loop.join(timeout=30)
        client.close()


def test_a_loop_of_a_long_interval_that_failed_tries_again_on_its_backoff_not_an_interval_later(
    redis_client: redis.Redis,
) -> None:
    """Retention runs an hour apart: a cycle that failed (Redis cut off at that moment) must be
    tried again within the backoff (1 s, doubling to 15 s), not an hour later; the quiet test
    saw it stay failed past its outage whenever retention's cycle fell inside it."""
    outcomes = iter([ConnectionError("Redis cut off"), None])
    done = threading.Event()

    def cycle(_settings: object) -> bool:
        outcome = next(outcomes, None)
        if outcome is not None:
            raise redis.ConnectionError(str(outcome))
        done.set()
        return False

    spec: LoopSpec[None] = LoopSpec(
        name="long",
        cycle=cycle,
        interval_ms=lambda _settings: 3_600_000,
        lease_ms=lambda _settings: 15_000,
        lock=RedisLock(redis_client, "hotpath:test-long:lock"),
        close=lambda: None,
        doing="waiting",
        what="a long loop",
    )
    stop = threading.Event()
    loop = LeasedLoop(spec, lambda: None, stop, logger=logging.getLogger("tests.long"))
    loop.start()
    try:
        # Bounded far below the interval: the second cycle is the backoff's retry.
        assert done.wait(timeout=60), "the failed cycle was not tried again within a minute"
        assert (loop.cycles, loop.failures) == (2, 0)
    finally:
        stop.set()
        loop.join(timeout=30)


def test_the_reconciler_backs_off_while_its_passes_fail(
    settings: Settings, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    proxy = FaultProxy(settings.database_url)
    engine = make_engine(proxy.url, pool_size=1)
    client = redis.Redis.from_url(redis_url, socket_timeout=2)
    stop = threading.Event()
    reconciler = Reconciler(client, make_session_factory(engine), Settings(reconcile_interval_ms=100))
    thread = LeasedLoop(
        loop_spec(reconciler), lambda: reconciler.settings, stop, logger=logging.getLogger("reconciler")
    )
    thread.start()
    try:
        stats = reconciler_stats(client)
        wait_until(lambda: reconciler_stats(client) != stats, timeout=30, what="a first pass")
        caplog.clear()
        spent = cpu_during_outage(proxy, thread)
        lines = [r.getMessage() for r in records_of(caplog, "reconciler")]
        assert spent < CPU_BUDGET_S, f"{spent:.2f} CPU s; {lines}"
        assert [m.split(":")[0] for m in lines] == ["reconciler pass"], lines
        wait_until(
            lambda: any("recovered after" in r.getMessage() for r in records_of(caplog, "reconciler")),
            timeout=60,
            what="the reconciler's recovery",
        )
    finally:
        stop.set()
        thread.join(timeout=30)
        client.close()
        engine.dispose()
        proxy.close()
