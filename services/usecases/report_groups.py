"""A batch of report jobs generated in one transaction, one outcome per job.

The report actor (actors/report.py) hands `ReportGroups.generate` the jobs of one call: a
worker's batch (broker/src/listbroker/batches.py), or one job (a message outside a batch,
REPORT_BATCH_SIZE=1). Their records are generated together with `generate_reports`,
set-based, in one transaction of two pipelined round trips (lock and read, then write and
commit: a transaction per record is most of what a report costs). Each job gets one
`Generation`, whatever happened:

- GENERATED, or SKIPPED (missing, deleted, not in status 3, an invalid id, a second job of a
  record in the same batch);
- FAILED with the record's own error: its `ServiceError` (incomplete answers, scoring
  refused), a database error of its own, or the fault drill's `FaultDrillFailure`;
- UNKNOWN when nothing is known to be the record's failure: the database could not be
  reached (nothing was done), or the connection was lost with a COMMIT in flight and lost
  again when the record was checked.

A batch never waits on another transaction's row lock (`SKIP LOCKED`): a record locked
elsewhere (a racing worker's batch, a submission, an admin reset) leaves the batch and its
job runs alone on the single-record path (`generate_one`), which waits for the lock and
then sees what the other transaction left. The outcomes of the batch's transaction are
given before any such wait begins, so one busy record never holds up the rest of its batch,
and two batches (two processes) never deadlock. When the batch's transaction fails as a
whole (a database error), nothing of it was committed (unless its connection was lost with
the COMMIT in flight: each record alone then finds out), and each job runs again alone, so
a failure is that record's own.

The fault drill (services/usecases/drill.py) is asked once per batch, before its
transaction (`drilled`: which of these records are in the drill now, one Redis call instead
of one per job): a drilled record whose generation would act (a record in status 3; a
settled record's job is skipped as without the drill) is FAILED with `FaultDrillFailure`,
before anything of it was written, dated when the drill decided; the others are generated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import NamedTuple

from services.domain.errors import DatabaseUnavailable
from services.domain.limits import MAX_ID
from services.persistence import driver
from services.persistence.uow import UnitOfWork
from services.usecases.drill import DRILL_ERROR, FaultDrillFailure
from services.usecases.reports import (
    INVALID_ID,
    Deferred,
    Generation,
    GenerationOutcome,
    generate_one,
    generate_reports,
    would_generate,
)

logger = logging.getLogger(__name__)


class Job(NamedTuple):
    """A report job: its record, and its attempt (for the report's event; None unknown)."""

    record_id: int
    attempt: int | None


def _valid(record_id: int) -> bool:
    return 1 <= record_id <= MAX_ID


class ReportGroups:
    """Generates the reports of a call's jobs, one transaction per call, one outcome per job.

    `uow_factory` gives a fresh unit of work per transaction; `on_group(size)` is told each
    batch's number of valid jobs before it runs (a metric; it must not raise); `drilled(ids)`
    says which of the ids are in the fault drill now (it must not raise; None: no drill).
    Holds no state between calls: any number of threads share one.
    """

    def __init__(
        self,
        uow_factory: Callable[[], UnitOfWork],
        *,
        on_group: Callable[[int], None] | None = None,
        drilled: Callable[[Sequence[int]], Collection[int]] | None = None,
    ) -> None:
        self._uow_factory = uow_factory
        self._on_group = on_group
        self._drilled = drilled

    def generate(self, jobs: Sequence[Job]) -> Iterator[tuple[int, Generation]]:
        """Each job's outcome, as (its index in `jobs`, its `Generation`), as soon as it is
        known: those of the batch's transaction first, then each record that runs alone, as it
        finishes. Every job gets exactly one. Raises only what interrupts the thread (a time
        limit)."""
        valid: list[int] = []
        for index, job in enumerate(jobs):
            if _valid(job.record_id):
                valid.append(index)
            else:
                yield index, INVALID_ID
        if not valid:
            return
        if self._on_group is not None:
            self._on_group(len(valid))
        try:
            results = self._group([jobs[i] for i in valid])
        except Exception as exc:
            yield from self._without_group(jobs, valid, exc)
            return
        locked: list[int] = []
        for index, result in zip(valid, results, strict=True):
            if result is Deferred.LOCKED:
                locked.append(index)
            else:
                yield index, result
        for index in locked:
            # Locked elsewhere: wait for that transaction, as a job alone always did.
            yield index, self._alone(jobs[index])

    def _group(self, jobs: Sequence[Job]) -> list[Generation | Deferred]:
        """One result per job, in one transaction: a drilled record's is its drill failure."""
        decided = datetime.now(UTC)
        held = self._in_drill([job.record_id for job in jobs])
        rest = [job for job in jobs if job.record_id not in held]
        generated = iter(
            generate_reports(
                self._uow_factory(),
                [job.record_id for job in rest],
                attempts=[job.attempt for job in rest],
            )
            if rest
            else []
        )
        return [
            _drilled(job.record_id, decided) if job.record_id in held else next(generated) for job in jobs
        ]

    def _without_group(
        self, jobs: Sequence[Job], valid: Sequence[int], failure: Exception
    ) -> Iterator[tuple[int, Generation]]:
        """The outcomes of a group whose transaction failed as a whole: UNKNOWN for each job
        when the database could not be reached (nothing was done), else each record alone."""
        if isinstance(failure, DatabaseUnavailable):
            for index in valid:
                yield index, Generation.unknown(str(failure))
            return
        logger.warning(
            "group of %d reports failed (%s: %s); each runs again alone",
            len(valid),
            type(failure).__name__,
            failure,
        )
        # Nothing was committed, unless the connection went with the COMMIT in flight.
        lost = failure if driver.connection_lost(failure) else None
        for index in valid:
            yield index, self._after_failed_group(jobs[index], lost)

    def _after_failed_group(self, job: Job, lost: BaseException | None) -> Generation:
        """A job of a group that failed as a whole: the drill asked again (its record may have
        joined it since, one call: a rare path), then the record alone."""
        decided = datetime.now(UTC)
        try:
            if job.record_id in self._in_drill([job.record_id]):
                return _drilled(job.record_id, decided)
        except DatabaseUnavailable as exc:
            return Generation.unknown(str(exc))
        except Exception as exc:
            return Generation.failed(exc)
        return self._alone(job, lost=lost)

    def _alone(self, job: Job, *, lost: BaseException | None = None) -> Generation:
        """`generate_one` for this record, where a lost connection is not the record's failure.

        `lost`: the connection was lost before (the group's, or this path's own first try)
        with a COMMIT that may have landed. The record's run alone then tells: a report it
        finds committed is that COMMIT's, GENERATED (its report.generated committed with it;
        found by the soak: the job said "skipped" though its group had made the report). A run
        alone that loses its connection is tried once more (its own COMMIT may be the one in
        flight: found by the soak, "cannot exit pipeline mode while busy" failed an attempt
        after its report was committed); lost again, the outcome is UNKNOWN and nothing is
        the record's failure: no attempt spent, the gate holds the job. Any other error is
        the record's own: FAILED (retried on the schedule, dead-lettered at last).
        """
        try:
            alone = generate_one(self._uow_factory(), job.record_id, attempt=job.attempt)
        except DatabaseUnavailable as exc:
            return Generation.unknown(str(exc))
        except Exception as again:
            if not driver.connection_lost(again):
                return Generation.failed(again)
            if lost is not None:
                return Generation.unknown(f"database lost twice, the outcome unknown: {again}")
            logger.info("report of record %s: connection lost (%s); trying once more", job.record_id, again)
            return self._alone(job, lost=again)
        if lost is not None and alone.outcome is GenerationOutcome.SKIPPED and alone.report_at is not None:
            return replace(alone, outcome=GenerationOutcome.GENERATED, detail="committed, reply lost")
        return alone

    def _in_drill(self, record_ids: Sequence[int]) -> set[int]:
        """The records in the fault drill now whose generation would really act: the drill fails
        only such attempts, so a job of a record already settled (a second job, a redelivery) is
        skipped as it would be without the drill (found by the soak). One SELECT for the
        drilled records, a rare path; none when no record is drilled."""
        if self._drilled is None:
            return set()
        held = list(self._drilled(record_ids))
        return would_generate(self._uow_factory(), held) if held else set()


def _drilled(record_id: int, decided: datetime) -> Generation:
    """A drilled record's outcome, dated when the drill decided: before it read that the record
    was still being generated, so the failure never follows a report another job of the record
    committed right after that read (two batches of one worker at once; found by the soak)."""
    return Generation.failed(FaultDrillFailure(DRILL_ERROR.format(record_id=record_id)), at=decided)
