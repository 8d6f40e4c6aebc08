"""Build the worker's broker from the environment and make it Dramatiq's global broker.

Nothing happens at import: `actors.worker` calls `install()`; tests and benchmarks build
brokers of their own with `default_middleware()`.
"""

from __future__ import annotations

import os

import dramatiq
import dramatiq.worker
from dramatiq.middleware import (
    AgeLimit,
    Callbacks,
    CurrentMessage,
    Middleware,
    Pipelines,
    ShutdownNotifications,
    TimeLimit,
)
from listbroker import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_HEARTBEAT_TIMEOUT_MS,
    DEFAULT_SOCKET_TIMEOUT,
    AvailabilityGate,
    ExactRetries,
    Probe,
    RedisListBroker,
    RequeueOnShutdown,
)

from config.settings import Settings, env_int
from observability.job_observer import JobObserver
from redis_adapters.queues import (
    ADMIN_QUEUE_NAME,
    ERROR_RECOVERY_DELAY_MS,
    REPORT_ACTOR_NAME,
    REPORT_QUEUE_NAME,
)
from redis_adapters.redis_clients import redis_client
from redis_adapters.report_codec import ReportCodec
from services.persistence.db import database_answers, session_factory


def database_available() -> bool:
    """The availability gate's probe for the report queue (broker/src/listbroker/gate.py)."""
    return database_answers(session_factory())


def default_middleware(database_probe: Probe | None = None) -> list[Middleware]:
    """Dramatiq's default middleware, with its Retries replaced by ExactRetries.

    AvailabilityGate (first: see broker/src/listbroker/gate.py) holds report jobs and admin tasks while
    PostgreSQL is down; CurrentMessage lets the report actor log which attempt failed
    (actors/report.py); RequeueOnShutdown gives prefetched messages back at once on SIGTERM.
    """
    gate: list[Middleware] = []
    if database_probe is not None:
        gate.append(AvailabilityGate(database_probe, queues={REPORT_QUEUE_NAME, ADMIN_QUEUE_NAME}))
    return [
        *gate,
        JobObserver(),
        AgeLimit(),
        TimeLimit(),
        ShutdownNotifications(),
        Callbacks(),
        Pipelines(),
        ExactRetries(),
        CurrentMessage(),
        RequeueOnShutdown(),
    ]


def build_broker(settings: Settings | None = None) -> RedisListBroker:
    settings = settings or Settings.from_env()
    heartbeat_timeout = env_int(
        os.environ, "BROKER_HEARTBEAT_TIMEOUT_MS", DEFAULT_HEARTBEAT_TIMEOUT_MS, minimum=2_000
    )
    client = redis_client(
        settings.redis_url,
        socket_timeout=DEFAULT_SOCKET_TIMEOUT,
        socket_connect_timeout=5,
        socket_keepalive=True,
        health_check_interval=30,
    )
    return RedisListBroker(
        client=client,
        hash_tags=settings.redis_hash_tags,
        middleware=default_middleware(database_available),
        codecs={REPORT_QUEUE_NAME: ReportCodec(REPORT_QUEUE_NAME, REPORT_ACTOR_NAME)},
        heartbeat_timeout_ms=heartbeat_timeout,
        # Beat often enough that a live consumer is never presumed dead.
        heartbeat_interval_ms=max(1_000, min(DEFAULT_HEARTBEAT_INTERVAL_MS, heartbeat_timeout // 6)),
    )


def install(settings: Settings | None = None) -> RedisListBroker:
    broker = build_broker(settings)
    dramatiq.set_broker(broker)
    if "dramatiq_restart_delay" not in os.environ:
        # The pause before listening again after a Redis error (ERROR_RECOVERY_DELAY_MS).
        dramatiq.worker.CONSUMER_RESTART_DELAY_SECS = ERROR_RECOVERY_DELAY_MS / 1000
    return broker
