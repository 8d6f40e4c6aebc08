"""The report actor: generates one record's report, retried on failure, dead-lettered at last.

Declared as an `ActorSpec`: importing this module builds and touches no broker;
`actors.worker` declares it on the worker's broker. What it uses (the report groups, the
event sink, the fault drill, the unit of work) is the worker process's, built once at its
boot (actors/bootstrap.py).

Each outcome goes to the event log: `report.generated` committed with the report (its
attempt in its data), a failed attempt (with its number) and a dead letter that sets no
status through `eventlog:queue`. Logging an event never fails the job
(services.domain.events.emit).

A worker thread takes up to REPORT_BATCH_SIZE jobs in one call of `generate_report_batch`
(broker/src/listbroker/batches.py) and generates their records in one transaction
(services/usecases/report_groups.py); each job keeps its own outcome, so it is acknowledged,
retried or dead-lettered on its own as before. `generate_report` is the one-job call (a
message sent to the actor outside a worker's batches; REPORT_BATCH_SIZE=1), whose concurrent
calls are grouped instead (group commit).
"""

from __future__ import annotations

import logging
from typing import Any

import dramatiq
from dramatiq.middleware import CurrentMessage
from listbroker import LOST_DELIVERIES_OPTION, DependencyUnavailable, ListMessageProxy, actor_spec

from actors import bootstrap
from config.settings import DEFAULT_REPORT_BATCH_SIZE
from observability import prometheus
from observability.job_observer import in_job_context
from redis_adapters.queues import MAX_RETRY_COUNT, REPORT_ACTOR_NAME, REPORT_QUEUE_NAME, RETRY_DELAYS_MS
from services.domain.errors import DatabaseUnavailable
from services.domain.events import Event, EventSink, EventType, emit
from services.usecases import reports
from services.usecases.drill import FaultDrillFailure
from services.usecases.report_groups import GroupFailed, Job

logger = logging.getLogger(__name__)

#: Longest a single generation may run before it counts as a failed attempt.
GENERATION_TIME_LIMIT_MS = 5 * 60_000

#: Who the worker's events name as their actor (its reports' events too).
WORKER_ACTOR = reports.GENERATOR_ACTOR
#: Longest error text kept in a failure event.
MAX_ERROR_CHARS = 500


def _log_event(event_type: EventType, record_id: int, **data: object) -> None:
    """Never raises: the job's outcome must not depend on the audit trail."""
    _log_events(Event.new(event_type, record_id=record_id, actor=WORKER_ACTOR, data=data))


def _log_events(*events: Event) -> None:
    """Never raises: the job's outcome must not depend on the audit trail."""
    try:
        sink: EventSink = bootstrap.services().events
    except Exception:
        first = events[0]
        logger.error(
            "event sink unavailable; %s of record %s not logged",
            first.event_type,
            first.record_id,
            exc_info=True,
        )
        return
    emit(sink, *events)


def _attempt() -> int | None:
    """The current attempt on the retry schedule: 1 for the first, 2 for the first retry, ...
    (a delivery lost with its worker is not an attempt); None outside a worker."""
    message = CurrentMessage.get_current_message()
    return None if message is None else _attempt_of(message)


def _other_jobs_alive(record_id: int) -> bool | None:
    """Is another job of the record alive besides the one being dead-lettered (the index still
    counts that one)? None when the index cannot be read now (Redis failing)."""
    try:
        return bootstrap.services().report_queue.jobs_alive(record_id) > 1
    except Exception as exc:
        logger.warning("job index unreadable for record %d (%s)", record_id, exc)
        return None


def mark_record_failed(message: dramatiq.Message[Any]) -> bool:
    """on_dead_letter hook: the record shows status 5 (生成失败) once its attempts are used up.

    Only its last job decides: while another job of the record is alive (an admin regenerated
    it while this one was retrying), this dead letter leaves the status alone and returns
    False; should that job end first after all, the index's `dead` mark has the reconciler
    set 5 (README, "The reconciler"). The same when the index cannot be read (Redis failing):
    guessing "none alive" set 5 under a regenerated job with attempts left (found by the
    seeded soak), while leaving it costs only the reconciler's delay when this job was the
    last after all."""
    record_id = int(message.args[0])
    # A poison pill (lost with its worker too many times) says so in its event.
    lost = message.options.get(LOST_DELIVERIES_OPTION)
    why: dict[str, object] = {"retries": MAX_RETRY_COUNT} if lost is None else {"lostDeliveries": lost}
    after = f"{MAX_RETRY_COUNT} retries" if lost is None else f"{lost} deliveries lost with their worker"
    alive = _other_jobs_alive(record_id)
    if alive is not False:
        _log_event(EventType.REPORT_DEAD_LETTERED, record_id, **why, statusSet=False)
        logger.error(
            "Report of record %d dead-lettered after %s; status left to %s.",
            record_id,
            after,
            "its other job alive"
            if alive
            else "the reconciler (the job index is unreadable: another job may be alive)",
        )
        return False
    changed: bool | None = None
    try:
        # Status 5 commits with its event (statusSet: true)...
        changed = reports.mark_generation_failed(
            bootstrap.services().uow(), record_id, dead_letter=why, actor=WORKER_ACTOR
        )
    finally:
        if not changed:  # ... no change (not in 3 any more) or none known (the database failed) logs here.
            _log_event(EventType.REPORT_DEAD_LETTERED, record_id, **why, statusSet=changed)
    logger.error(
        "Report of record %d dead-lettered after %s; status 5 %s.",
        record_id,
        after,
        "set" if changed else "not set (record no longer in status 3)",
    )
    return True


def generate_report_batch(messages: list[ListMessageProxy]) -> None:
    """The report actor's batch function (broker/src/listbroker/batches.py): the records of up
    to REPORT_BATCH_SIZE jobs generated in one transaction, in this thread.

    Each job keeps its own outcome: its failure is stuffed into its message (ExactRetries then
    retries it alone, or dead-letters it with `mark_record_failed`), logged as an event with its
    attempt; a job that found the database down gets `DependencyUnavailable` (back to the
    queue uncounted, the gate closed). A database down for the whole batch raises it for all.
    Each report's line is logged with its own job's ids.
    """
    groups = bootstrap.services().report_groups
    runnable: list[tuple[ListMessageProxy, Job]] = []
    for message in messages:
        try:
            runnable.append((message, Job(int(message.args[0]), _attempt_of(message))))
        except (IndexError, TypeError, ValueError) as exc:
            message.stuff_exception(exc)
    raw = groups.run_group([job for _, job in runnable])
    down = [
        r.__cause__
        for r in raw
        if isinstance(r, GroupFailed) and isinstance(r.__cause__, DatabaseUnavailable)
    ]
    if raw and len(down) == len(raw):
        # Nothing was done: every job goes back uncounted, in one step (ExactRetries).
        raise DependencyUnavailable(str(down[0])) from down[0]
    failures: list[Event] = []
    # The jobs the group settled first, then those that run alone (a record locked elsewhere,
    # a failed group), which may wait: each of the first is done before any wait begins.
    settled = sorted(zip(runnable, raw, strict=True), key=lambda pair: groups.runs_alone(pair[1]))
    try:
        for (message, job), result in settled:
            try:
                with in_job_context(message):
                    generation = groups.settle(job, result)
            except DatabaseUnavailable as exc:
                unavailable = DependencyUnavailable(str(exc))
                unavailable.__cause__ = exc
                message.stuff_exception(unavailable)
                continue
            except Exception as exc:
                message.stuff_exception(exc)
                failures.append(_failure_event(job.record_id, job.attempt, exc))
                continue
            message.mark_done()  # committed: a time limit striking the batch later is not its failure
            if generation.outcome is reports.GenerationOutcome.GENERATED and generation.latency_s is not None:
                prometheus.report_latency_s.observe(generation.latency_s)
    finally:
        # Also when a time limit interrupts the batch: the failures seen so far are logged.
        if failures:
            _log_events(*failures)


def _failure_event(record_id: int, attempt: int | None, exc: BaseException) -> Event:
    """A failed attempt's event, dated when it failed: a drilled one when the drill decided."""
    error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
    return Event.new(
        EventType.REPORT_GENERATION_FAILED,
        record_id=record_id,
        actor=WORKER_ACTOR,
        data={"attempt": attempt, "error": error},
        at=exc.at if isinstance(exc, FaultDrillFailure) else None,
    )


def _attempt_of(message: dramatiq.Message[Any] | ListMessageProxy) -> int:
    """The message's attempt on the retry schedule (see `_attempt`)."""
    return int(message.options.get("retry_count", 0)) + 1


@actor_spec(
    actor_name=REPORT_ACTOR_NAME,
    queue_name=REPORT_QUEUE_NAME,
    max_retries=MAX_RETRY_COUNT,
    # The default schedule; the worker declares it with REPORT_RETRY_DELAYS_MS's (actors/worker.py).
    retry_delays=RETRY_DELAYS_MS,
    on_dead_letter=mark_record_failed,
    time_limit=GENERATION_TIME_LIMIT_MS,
    # Expected: Dramatiq logs it as one INFO line, not an error with the chained traceback
    # of every job running when the database went (ExactRetries and the gate say the rest).
    throws=(DependencyUnavailable,),
    # The worker's jobs go in batches of up to this many (actors/worker.py: REPORT_BATCH_SIZE).
    batch_size=DEFAULT_REPORT_BATCH_SIZE,
    batch_fn=generate_report_batch,
)
def generate_report(record_id: int) -> None:
    """Generate the report; a record that is not in status 3 is acknowledged and skipped."""
    try:
        # Raises FaultDrillFailure for a record in the fault drill (asked once per group).
        generation = bootstrap.services().report_groups.generate(record_id, attempt=_attempt())
    except DatabaseUnavailable as exc:
        # Nothing was done: no attempt is spent while the database is down (broker/src/listbroker/gate.py).
        raise DependencyUnavailable(str(exc)) from exc
    except BaseException as exc:
        _log_events(_failure_event(record_id, _attempt(), exc))
        raise
    # The outcome's log line is services.usecases.reports' (one line per report, with its
    # reason); the report's `report.generated` event was committed with it (with the attempt).
    # The latency is read back by the write itself (RETURNING): no query of its own.
    if generation.outcome is reports.GenerationOutcome.GENERATED and generation.latency_s is not None:
        prometheus.report_latency_s.observe(generation.latency_s)
