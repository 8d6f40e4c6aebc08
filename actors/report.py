"""The report actor: generates one record's report, retried on failure, dead-lettered at last.

Declared as an `ActorSpec`: importing this module builds and touches no broker;
`actors.worker` declares it on the worker's broker.

Each outcome goes to the event log (`eventlog:queue`): generated, a failed attempt (with
its number), dead-lettered. Logging an event never fails the job (services.domain.events.emit).

The jobs that a worker process's threads run at the same moment are generated together, one
transaction per group (group commit, services/usecases/report_groups.py); each job keeps its own
outcome, so it is acknowledged, retried or dead-lettered on its own as before.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import dramatiq
from dramatiq.middleware import CurrentMessage
from listbroker import DependencyUnavailable, actor_spec

from config.settings import Settings
from observability import prometheus as metrics
from redis_adapters.drill_store import RedisFaultDrill
from redis_adapters.event_sink import RedisEventSink
from redis_adapters.keyspace import Keyspace
from redis_adapters.queues import MAX_RETRY_COUNT, REPORT_ACTOR_NAME, REPORT_QUEUE_NAME, retry_delays_ms
from redis_adapters.redis_clients import redis_client
from services.domain.errors import DatabaseUnavailable
from services.domain.events import Event, EventSink, EventType, emit
from services.persistence.db import session_factory
from services.persistence.uow import UnitOfWork
from services.usecases import reports
from services.usecases.drill import DRILL_ERROR, FaultDrillFailure
from services.usecases.report_groups import ReportGroups

logger = logging.getLogger(__name__)

#: Longest a single generation may run before it counts as a failed attempt.
GENERATION_TIME_LIMIT_MS = 5 * 60_000

#: Who the worker's events name as their actor.
WORKER_ACTOR = "worker"
#: Longest error text kept in a failure event.
MAX_ERROR_CHARS = 500

_sinks: dict[int, EventSink] = {}
_sinks_lock = threading.Lock()
_groups: dict[int, ReportGroups] = {}
_groups_lock = threading.Lock()
_drills: dict[int, RedisFaultDrill] = {}


def _uow() -> UnitOfWork:
    # session_factory() is per process: built after dramatiq forks its workers.
    return UnitOfWork(session_factory())


def _report_groups() -> ReportGroups:
    """The group generator of this process, shared by its worker threads (made after the fork:
    its lock and pending requests belong to one process)."""
    with _groups_lock:
        groups = _groups.get(os.getpid())
        if groups is None:
            groups = _groups[os.getpid()] = ReportGroups(_uow, on_group=metrics.report_group_size.observe)
        return groups


def _events() -> EventSink:
    """The event sink of this process (a Redis connection must not cross a fork either)."""
    with _sinks_lock:
        sink = _sinks.get(os.getpid())
        if sink is None:
            settings = Settings.from_env()
            client = redis_client(settings.redis_url, socket_connect_timeout=2, socket_timeout=5)
            keys = Keyspace.of(settings.redis_hash_tags)
            sink = _sinks[os.getpid()] = RedisEventSink(
                client, keys.eventlog, max_queue=settings.event_log_queue_max
            )
            # The fault drill shares the sink's connection pool (made after the fork too).
            _drills[os.getpid()] = RedisFaultDrill(client, keys.drill)
        return sink


def _drilled(record_id: int) -> bool:
    """Is the record in the fault drill (services/usecases/drill.py)? One Redis call; never raises."""
    try:
        _events()
        drill = _drills[os.getpid()]
    except Exception:
        return False
    return drill.fails(record_id)


def _log_event(event_type: EventType, record_id: int, **data: object) -> None:
    """Never raises: the job's outcome must not depend on the audit trail."""
    try:
        sink = _events()
    except Exception:
        logger.error(
            "event sink unavailable; %s of record %s not logged", event_type, record_id, exc_info=True
        )
        return
    emit(sink, Event.new(event_type, record_id=record_id, actor=WORKER_ACTOR, data=data))


def _attempt() -> int | None:
    """1 for the first delivery of the current message, 2 for its first retry, ...; None outside a worker."""
    message = CurrentMessage.get_current_message()
    if message is None:
        return None
    return int(message.options.get("retry_count", 0)) + int(getattr(message, "redeliveries", 0)) + 1


def mark_record_failed(message: dramatiq.Message[Any]) -> None:
    """on_dead_letter hook: the record shows status 5 (生成失败) once its attempts are used up."""
    record_id = int(message.args[0])
    changed: bool | None = None
    try:
        changed = reports.mark_generation_failed(_uow(), record_id)
    finally:
        _log_event(EventType.REPORT_DEAD_LETTERED, record_id, retries=MAX_RETRY_COUNT, statusSet=changed)
    logger.error(
        "Report of record %d dead-lettered after %d retries; status 5 %s.",
        record_id,
        MAX_RETRY_COUNT,
        "set" if changed else "not set (record no longer in status 3)",
    )


@actor_spec(
    actor_name=REPORT_ACTOR_NAME,
    queue_name=REPORT_QUEUE_NAME,
    max_retries=MAX_RETRY_COUNT,
    retry_delays=retry_delays_ms(os.environ),
    on_dead_letter=mark_record_failed,
    time_limit=GENERATION_TIME_LIMIT_MS,
    # Expected: Dramatiq logs it as one INFO line, not an error with the chained traceback
    # of every job running when the database went (ExactRetries and the gate say the rest).
    throws=(DependencyUnavailable,),
)
def generate_report(record_id: int) -> None:
    """Generate the report; a record that is not in status 3 is acknowledged and skipped."""
    try:
        if _drilled(record_id):
            raise FaultDrillFailure(DRILL_ERROR.format(record_id=record_id))
        generation = _report_groups().generate(record_id)
    except DatabaseUnavailable as exc:
        # Nothing was done: no attempt is spent while the database is down (broker/src/listbroker/gate.py).
        raise DependencyUnavailable(str(exc)) from exc
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
        _log_event(EventType.REPORT_GENERATION_FAILED, record_id, attempt=_attempt(), error=error)
        raise
    # The outcome's log line is services.usecases.reports' (one line per report, with its reason).
    if generation.outcome is reports.GenerationOutcome.GENERATED:
        _log_event(EventType.REPORT_GENERATED, record_id, attempt=_attempt())
        # Read back by the write itself (RETURNING): no query of its own.
        if generation.latency_s is not None:
            metrics.report_latency_s.observe(generation.latency_s)
