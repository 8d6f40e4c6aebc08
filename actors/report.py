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
(services/usecases/report_groups.py); each job has its own outcome, so it is acknowledged,
retried or dead-lettered on its own. `generate_report` is the one-job call (a message sent to
the actor outside a worker's batches; REPORT_BATCH_SIZE=1): the same path, a batch of one.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import dramatiq
from dramatiq.middleware import CurrentMessage
from listbroker import LOST_DELIVERIES_OPTION, DependencyUnavailable, ListMessageProxy, actor_spec

from actors import bootstrap
from config.settings import DEFAULT_REPORT_BATCH_SIZE
from observability import prometheus
from observability.job_observer import in_job_context
from redis_adapters.queues import MAX_RETRY_COUNT, REPORT_ACTOR_NAME, REPORT_QUEUE_NAME, RETRY_DELAYS_MS
from services.domain.events import Event, EventSink, EventType, emit
from services.usecases import reports
from services.usecases.report_groups import Job
from services.usecases.reports import Generation, GenerationOutcome

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

    Only its last job decides, whoever queued it: while another job of the record is alive (an
    admin regenerated it while this one was retrying, another producer LPUSHed one; the index
    counts both, `RedisReportQueue.jobs_alive`), this dead letter leaves the status alone and returns
    False; should that job end first after all, the index's `dead` mark has the reconciler
    set 5 (docs/queue.md, "The reconciler"). The same when the index cannot be read (Redis failing):
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
            bootstrap.services().uow(), record_id, event_data=why, actor=WORKER_ACTOR
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

    Each job's outcome is its message's (services/usecases/report_groups.py): GENERATED or
    SKIPPED is done; FAILED is stuffed into its message (ExactRetries then retries it alone, or
    dead-letters it with `mark_record_failed`) and logged as an event with its attempt;
    UNKNOWN goes back to the queue uncounted (`DependencyUnavailable`, the gate closed), all
    of the batch's jobs in one step when none had another outcome. A job is settled as soon
    as its outcome is known, so a record run alone (locked elsewhere) waits with the rest of
    its batch already done. Each outcome's line is logged with its own job's ids.
    """
    runnable: list[tuple[ListMessageProxy, Job]] = []
    for message in messages:
        try:
            runnable.append((message, Job(int(message.args[0]), _attempt_of(message))))
        except (IndexError, TypeError, ValueError) as exc:
            message.stuff_exception(exc)
    failures: list[Event] = []
    unknown: list[tuple[ListMessageProxy, Generation]] = []
    every_job_unknown = False
    try:
        outcomes = bootstrap.services().report_groups.generate([job for _, job in runnable])
        for index, generation in outcomes:
            message, job = runnable[index]
            with in_job_context(message):
                _log_outcome(job, generation)
            if generation.outcome is GenerationOutcome.UNKNOWN:
                unknown.append((message, generation))
            elif generation.error is not None:
                message.stuff_exception(generation.error)
                failures.append(_failure_event(job, generation.error, generation.failed_at))
            else:
                message.mark_done()  # committed: a time limit striking the batch later is not its failure
                _observe(generation)
        every_job_unknown = bool(unknown) and len(unknown) == len(runnable)
    finally:
        # Also when a time limit interrupts the batch: the outcomes seen so far are recorded.
        if failures:
            _log_events(*failures)
        if not every_job_unknown:
            for message, generation in unknown:
                message.stuff_exception(DependencyUnavailable(generation.detail))
    if every_job_unknown:
        # Nothing is any record's failure: every job goes back uncounted, in one step (ExactRetries).
        raise DependencyUnavailable(unknown[0][1].detail)


def _log_outcome(job: Job, generation: Generation) -> None:
    """The one line per report (a failure's is ExactRetries', with its retry)."""
    if generation.outcome is GenerationOutcome.GENERATED:
        why = f" ({generation.detail})" if generation.detail else ""
        logger.info("report of record %s generated%s", job.record_id, why)
    elif generation.outcome is GenerationOutcome.SKIPPED:
        logger.info("report of record %s skipped: %s", job.record_id, generation.detail)


def _observe(generation: Generation) -> None:
    """The report's latency, read back by its write itself (RETURNING): no query of its own."""
    if generation.outcome is GenerationOutcome.GENERATED and generation.latency_s is not None:
        prometheus.report_latency_s.observe(generation.latency_s)


def _failure_event(job: Job, error: BaseException, at: datetime | None = None) -> Event:
    """A failed attempt's event, dated when it failed (`at`: a drilled one when the drill decided)."""
    return Event.new(
        EventType.REPORT_GENERATION_FAILED,
        record_id=job.record_id,
        actor=WORKER_ACTOR,
        data={"attempt": job.attempt, "error": f"{type(error).__name__}: {error}"[:MAX_ERROR_CHARS]},
        at=at,
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
    # The worker's jobs go in batches of up to this many (actors/worker.py: REPORT_BATCH_SIZE).
    batch_size=DEFAULT_REPORT_BATCH_SIZE,
    batch_fn=generate_report_batch,
)
def generate_report(record_id: int) -> None:
    """Generate the report; a record that is not in status 3 is acknowledged and skipped.

    A message outside a worker's batches (REPORT_BATCH_SIZE=1, a call outside a worker): a
    batch of one, its outcome raised as the batch function records it."""
    job = Job(record_id, _attempt())
    try:
        [(_, generation)] = bootstrap.services().report_groups.generate([job])
    except BaseException as exc:  # a time limit: a failed attempt too
        _log_events(_failure_event(job, exc))
        raise
    _log_outcome(job, generation)
    if generation.outcome is GenerationOutcome.UNKNOWN:
        # Nothing is the record's failure: no attempt is spent (broker/src/listbroker/gate.py).
        raise DependencyUnavailable(generation.detail)
    if generation.error is not None:
        _log_events(_failure_event(job, generation.error, generation.failed_at))
        raise generation.error
    # The report's `report.generated` event was committed with it (with the attempt).
    _observe(generation)
