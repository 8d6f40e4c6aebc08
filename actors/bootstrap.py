"""The worker's composition root: its broker, and the services its actors use, once per process.

`actors.worker` (the module Dramatiq imports in its main process and in each worker
process) builds the `Settings`, installs the broker (`install`) and declares the actors.
What the actors use (the session factory, the report groups, the event sink, the fault
drill, the admin tasks' adapters) holds connections, which must not cross a fork: the
`ProcessBoot` middleware builds it once per worker process, on Dramatiq's
`after_process_boot`, and `services()` hands it to the actors. Nothing happens at import;
tests and benchmarks build brokers of their own with `default_middleware()` and install
services with `install_services(build_services(settings))`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import dramatiq
from dramatiq.middleware import (
    AgeLimit,
    Callbacks,
    Middleware,
    Pipelines,
    ShutdownNotifications,
)
from listbroker import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_SOCKET_TIMEOUT,
    AvailabilityGate,
    Probe,
    RedisListBroker,
)
from listbroker import default_middleware as broker_middleware
from sqlalchemy.orm import Session, sessionmaker

from actors.lifetime import die_with_main_process
from config.collector import space_collections
from config.settings import Settings
from observability import prometheus
from observability.job_observer import JobObserver
from redis_adapters.drill_store import RedisFaultDrill
from redis_adapters.event_sink import RedisEventSink
from redis_adapters.event_spool import spool_at
from redis_adapters.keyspace import Keyspace
from redis_adapters.queue_ops import RedisQueueOperations
from redis_adapters.queues import (
    ADMIN_QUEUE_NAME,
    REPORT_ACTOR_NAME,
    REPORT_QUEUE_NAME,
)
from redis_adapters.redis_clients import redis_client
from redis_adapters.report_codec import ReportCodec
from redis_adapters.report_queue import RedisReportQueue
from redis_adapters.task_store import RedisTaskStore
from services.persistence.db import build_session_factory, database_answers
from services.persistence.event_store import DirectEventWriter
from services.persistence.uow import UnitOfWork
from services.usecases.report_groups import ReportGroups


@dataclass(frozen=True)
class WorkerServices:
    """What the actors of one worker process use, built after the fork (`build_services`)."""

    settings: Settings
    session_factory: sessionmaker[Session]
    #: The reports' generator, shared by the process's worker threads (services/usecases/report_groups.py).
    report_groups: ReportGroups
    #: The event sink (Redis, falling back to PostgreSQL) and the fault drill, on one connection pool.
    events: RedisEventSink
    drill: RedisFaultDrill
    #: The admin tasks' adapters (actors/admin_tasks.py), on a client with a longer reply timeout.
    report_queue: RedisReportQueue
    dead_letters: RedisQueueOperations
    tasks: RedisTaskStore

    def uow(self) -> UnitOfWork:
        """A unit of work for one job (or one batch of jobs)."""
        return UnitOfWork(self.session_factory)


def build_services(settings: Settings) -> WorkerServices:
    """Every dependency of the actors, for the calling process (connections open at first use)."""
    factory = build_session_factory(settings)
    keys = Keyspace.of(settings.redis_hash_tags)
    events_client = redis_client(settings.redis_url, socket_connect_timeout=2, socket_timeout=5)
    tasks_client = redis_client(settings.redis_url, socket_connect_timeout=5, socket_timeout=30)
    fallback = DirectEventWriter(settings.database_url, transaction_pooling=settings.db_transaction_pooling)

    drill = RedisFaultDrill(events_client, keys.drill)

    def uow() -> UnitOfWork:
        return UnitOfWork(factory)

    return WorkerServices(
        settings=settings,
        session_factory=factory,
        report_groups=ReportGroups(uow, on_group=prometheus.report_group_size.observe, drilled=drill.held),
        events=RedisEventSink(
            events_client,
            keys.eventlog,
            fallback=fallback,
            max_queue=settings.event_log_queue_max,
            spool=spool_at(settings.event_spool_dir),
        ),
        drill=drill,
        report_queue=RedisReportQueue(tasks_client, key=keys.report.queue, jobs_key=keys.report.jobs),
        dead_letters=RedisQueueOperations(tasks_client, keys.report),
        tasks=RedisTaskStore(tasks_client, keys),
    )


_installed: WorkerServices | None = None
_installed_lock = threading.Lock()


def install_services(made: WorkerServices | None) -> None:
    """Make `made` this process's services (None: none; tests put theirs back)."""
    global _installed  # noqa: PLW0603 - the process's one container, set once at its boot
    with _installed_lock:
        _installed = made


def services() -> WorkerServices:
    """This process's services; built at its boot (`ProcessBoot`), or installed by a test."""
    made = _installed
    if made is None:
        raise RuntimeError(
            "the worker's services are built at process boot (actors.bootstrap.ProcessBoot); "
            "outside a Dramatiq worker process install them with install_services(build_services(...))"
        )
    return made


class ProcessBoot(Middleware):
    """Builds the worker process's services once, after Dramatiq forked it (`after_process_boot`)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def after_process_boot(self, broker: dramatiq.Broker) -> None:
        die_with_main_process()
        space_collections()  # a report's rows set off the collector many times otherwise
        install_services(build_services(self.settings))


def database_available() -> bool:
    """The availability gate's probe for the report queue (listbroker's gate.py)."""
    return database_answers(services().session_factory)


#: Dramatiq default middleware for options no actor of ours takes (`max_age`,
#: `notify_shutdown`, `on_success`/`on_failure`, `pipe_target`): left out of the worker, as each
#: costs every message its hooks. Declaring an actor with one of those options fails loudly
#: (Dramatiq refuses an option no middleware knows) instead of being ignored. Measured
#: (`bench.throughput --child --system ours`, alternating with and without them): a no-op
#: message at 8 threads 69-91 µs of CPU without them in 9 runs of 9, 92-281 µs with them.
UNUSED_MIDDLEWARE: tuple[type[Middleware], ...] = (AgeLimit, ShutdownNotifications, Callbacks, Pipelines)


def default_middleware(database_probe: Probe | None = None) -> list[Middleware]:
    """The broker library's middleware (Dramatiq's default, its Retries replaced by
    ExactRetries) without UNUSED_MIDDLEWARE.

    AvailabilityGate (first: see listbroker's gate.py) holds report jobs and admin tasks while
    PostgreSQL is down; CurrentMessage lets the report actor log which attempt failed
    (actors/report.py); RequeueOnShutdown gives prefetched messages back at once on SIGTERM;
    TimeLimit bounds a generation (actors/report.py).
    """
    gate: list[Middleware] = []
    if database_probe is not None:
        gate.append(AvailabilityGate(database_probe, queues={REPORT_QUEUE_NAME, ADMIN_QUEUE_NAME}))
    # The library's list (listbroker.default_middleware: Dramatiq's, with ExactRetries,
    # CurrentMessage and RequeueOnShutdown), the observer in front of it.
    used = [m for m in broker_middleware() if not isinstance(m, UNUSED_MIDDLEWARE)]
    return [*gate, JobObserver(), *used]


def build_broker(settings: Settings) -> RedisListBroker:
    """The worker's broker: middleware, codecs and timings from `settings`."""
    heartbeat_timeout = settings.broker_heartbeat_timeout_ms
    client = redis_client(
        settings.redis_url,
        socket_timeout=DEFAULT_SOCKET_TIMEOUT,
        socket_connect_timeout=5,
        socket_keepalive=True,
        health_check_interval=30,
    )
    middleware: list[Any] = [ProcessBoot(settings), *default_middleware(database_available)]
    return RedisListBroker(
        client=client,
        hash_tags=settings.redis_hash_tags,
        middleware=middleware,
        codecs={REPORT_QUEUE_NAME: ReportCodec(REPORT_QUEUE_NAME, REPORT_ACTOR_NAME)},
        heartbeat_timeout_ms=heartbeat_timeout,
        # Beat often enough that a live consumer is never presumed dead.
        heartbeat_interval_ms=max(1_000, min(DEFAULT_HEARTBEAT_INTERVAL_MS, heartbeat_timeout // 6)),
    )


def install(settings: Settings) -> RedisListBroker:
    """Build the worker's broker and make it Dramatiq's global broker."""
    broker = build_broker(settings)
    dramatiq.set_broker(broker)
    return broker
