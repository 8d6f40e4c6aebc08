"""Group commit of report generation: the jobs a worker process has in hand, one transaction.

A worker process runs one job per record on many threads; a transaction per record is most
of what a report costs (issue 15: 100 records per transaction run ~5 × faster than one).
`ReportGroups` (one per process, shared by the actor's threads) gathers the records of the
jobs running at the same moment into groups (services/persistence/group_commit.py: no timer, a lone job
runs at once) and generates each group with `generate_reports`, set-based, in one
transaction of two pipelined round trips: lock and read, then write and commit.

A worker's batch of jobs (broker/src/listbroker/batches.py) is one group without the
hand-off: `run_group` generates it in the calling thread and `settle` gives each job its own
outcome, the same per-job logic as `generate`'s.

Every job keeps its own outcome: GENERATED, SKIPPED (missing, deleted, not in status 3,
invalid id) or its own `ServiceError` (incomplete answers, scoring refused), so a bad record
never fails the others and each job is still acknowledged, retried or dead-lettered alone.

A group never waits on another transaction's row lock (`SKIP LOCKED`): a record locked
elsewhere (a racing worker's group, a submission, an admin reset) leaves the group and its
job runs alone on the single-record path, which waits for the lock and then sees what the
other transaction left, exactly as before group commit. So one busy record never holds up
the rest of a group, and two groups (two processes) never deadlock.
When the group's transaction fails as a whole (a database error), nothing of it was
committed, and each job runs again alone on the single-record path
(`services.usecases.reports.generate_one`), so the failure is that record's own; a database that
cannot be reached at all is `DatabaseUnavailable` for every job (nothing was done).

The fault drill (services/usecases/drill.py) is asked once per group too, before its
transaction (`drilled`: which of these records are in the drill now, one Redis call instead
of one per job): a drilled record's job raises `FaultDrillFailure` in its own thread, before
anything of it was written, as when each job asked alone, if its generation would act (a
record in status 3; a settled record's job is skipped as without the drill); the others run
as a group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from services.domain.errors import DatabaseUnavailable
from services.domain.limits import MAX_ID
from services.persistence import driver
from services.persistence.group_commit import DEFAULT_MAX_GROUP, GroupCommit, GroupFailed, GroupStats
from services.persistence.uow import UnitOfWork
from services.usecases.drill import DRILL_ERROR, FaultDrillFailure
from services.usecases.reports import (
    DUPLICATE,
    Deferred,
    Generation,
    GenerationOutcome,
    GroupResult,
    generate_one,
    generate_reports,
    would_generate,
)

# The set-based generation itself is services.usecases.reports' (one path for one record or many).
__all__ = [
    "DUPLICATE",
    "INVALID_ID",
    "Deferred",
    "GroupFailed",
    "GroupResult",
    "Job",
    "Raw",
    "ReportGroups",
    "generate_reports",
]

logger = logging.getLogger(__name__)


INVALID_ID = Generation(GenerationOutcome.SKIPPED, detail="not a valid record id")

#: What a job's group gave it, before `ReportGroups.settle`: a result, the group's failure as a
#: whole, or the job's fault drill failure.
Raw = GroupResult | GroupFailed | FaultDrillFailure


def _valid(record_id: int) -> bool:
    return 1 <= record_id <= MAX_ID


class Job(NamedTuple):
    """A job in a group: its record, and its attempt (for the report's event; None unknown)."""

    record_id: int
    attempt: int | None


class ReportGroups:
    """Generates reports for any number of threads, the requests in hand as one group.

    `uow_factory` gives a fresh unit of work per group (and per fallback run); `on_group(size)`
    is told each group's size before it runs (a metric; it must not raise); `drilled(ids)` says
    which of the ids are in the fault drill now (it must not raise; None: no drill).
    """

    def __init__(
        self,
        uow_factory: Callable[[], UnitOfWork],
        *,
        max_group: int = DEFAULT_MAX_GROUP,
        on_group: Callable[[int], None] | None = None,
        drilled: Callable[[Sequence[int]], Collection[int]] | None = None,
    ) -> None:
        self._uow_factory = uow_factory
        self._drilled = drilled
        self._on_group = on_group
        self._groups: GroupCommit[Job, GroupResult] = GroupCommit(
            self._run, max_group=max_group, on_group=on_group
        )

    @property
    def stats(self) -> GroupStats:
        return self._groups.stats

    @property
    def waiting(self) -> int:
        """Jobs waiting for the next group."""
        return self._groups.waiting

    def generate(self, record_id: int, *, attempt: int | None = None) -> Generation:
        """As `services.usecases.reports.generate_one`, in a group with the other threads' records."""
        job = Job(record_id, attempt)
        if not _valid(record_id):
            return self.settle(job, INVALID_ID)
        try:
            result: Raw = self._groups.submit(job)
        except GroupFailed as exc:
            result = exc
        return self.settle(job, result)

    def run_group(self, jobs: Sequence[Job]) -> list[Raw]:
        """The jobs of a batch (broker/src/listbroker/batches.py) as one group, in the calling
        thread: one raw result per job, in order, for `settle` (each job's own outcome)."""
        valid = [job for job in jobs if _valid(job.record_id)]
        raw: list[Raw] = []
        if valid and self._on_group is not None:
            self._on_group(len(valid))
        try:
            raw = list(self._run(valid)) if valid else []
        except Exception as exc:
            failed = GroupFailed(f"the group of {len(valid)} records failed: {exc}")
            failed.__cause__ = exc
            raw = [failed] * len(valid)
        results = iter(raw)
        return [next(results) if _valid(job.record_id) else INVALID_ID for job in jobs]

    @staticmethod
    def runs_alone(result: Raw) -> bool:
        """Will `settle` run this job alone (its record locked elsewhere, or its group failed)?"""
        return isinstance(result, Deferred | GroupFailed)

    def settle(self, job: Job, result: Raw) -> Generation:
        """The job's outcome from its group's raw result: its `Generation`, logged (one line per
        report), or its error raised. A record the group left (locked elsewhere) or could not do
        (the group failed as a whole) runs alone here, in the job's own thread."""
        record_id, attempt = job
        if result is INVALID_ID:
            logger.info("report of record %s skipped: not a valid record id", record_id)
            return INVALID_ID
        if isinstance(result, GroupFailed):
            # The drill first, as the group asked it before its transaction (one call, rare path).
            decided = datetime.now(UTC)
            if record_id in self._in_drill([record_id]):
                raise _drill_failure(record_id, decided) from None
            cause = result.__cause__
            if isinstance(cause, DatabaseUnavailable):
                # Nothing was done; a fresh instance per thread (an exception carries its traceback).
                raise DatabaseUnavailable(str(cause)) from cause
            # Nothing of the group was committed, unless it lost its connection with the COMMIT
            # in the pipeline: this record alone, so any error is its own.
            lost = cause if driver.connection_lost(cause) else None
            return self._alone(record_id, attempt, lost=lost)
        if isinstance(result, BaseException):  # its ServiceError, or a FaultDrillFailure
            raise result
        if isinstance(result, Deferred):
            # Locked elsewhere: wait for that transaction as a job alone always did.
            return self._alone(record_id, attempt)
        # The one line per report, logged in the job's own context (generate_one logs its own).
        if result.outcome is GenerationOutcome.GENERATED:
            logger.info("report of record %s generated", record_id)
        else:
            logger.info("report of record %s skipped: %s", record_id, result.detail)
        return result

    def _alone(self, record_id: int, attempt: int | None, *, lost: BaseException | None = None) -> Generation:
        """`generate_one` for this record, where a lost connection is not the record's failure.

        `lost`: the connection was lost before (a group's, or this path's own first try) with
        a COMMIT that may have landed. The record's run alone then tells: a report it finds
        committed is that COMMIT's, GENERATED (with its report.generated; found by the soak: the
        job said "skipped" though its group had made the report). A run
        alone that loses its connection is tried once more (its own COMMIT may be the one in
        flight: found by the soak, "cannot exit pipeline mode while busy" failed an attempt
        after its report was committed); lost again, the outcome is unknown and nothing is
        the record's failure: `DatabaseUnavailable`, no attempt spent, the gate holds the job.
        Any other error is the record's own (retried on the schedule, dead-lettered at last).
        """
        try:
            alone = generate_one(self._uow_factory(), record_id, attempt=attempt)
        except Exception as again:
            if not driver.connection_lost(again):
                raise
            if lost is not None:
                raise DatabaseUnavailable(f"database lost twice, the outcome unknown: {again}") from again
            logger.info("report of record %s: connection lost (%s); trying once more", record_id, again)
            return self._alone(record_id, attempt, lost=again)
        if lost is not None and alone.outcome is GenerationOutcome.SKIPPED and alone.report_at is not None:
            logger.info("report of record %s generated (commit landed, reply lost)", record_id)
            return Generation(
                GenerationOutcome.GENERATED, detail="committed, reply lost", report_at=alone.report_at
            )
        return alone

    def _run(self, jobs: Sequence[Job]) -> list[GroupResult | FaultDrillFailure]:
        """The group's results; a drilled record's is its `FaultDrillFailure` (raised in its thread)."""
        decided = datetime.now(UTC)
        held = self._in_drill([job.record_id for job in jobs])
        if held:
            rest = [job for job in jobs if job.record_id not in held]
            generated = iter(self._generate(rest))
            return [
                _drill_failure(job.record_id, decided) if job.record_id in held else next(generated)
                for job in jobs
            ]
        return list(self._generate(jobs))

    def _in_drill(self, record_ids: Sequence[int]) -> set[int]:
        """The records in the fault drill now whose generation would really act: the drill fails
        only such attempts, so a job of a record already settled (a second job, a redelivery) is
        skipped as it would be without the drill (found by the soak). One SELECT for the
        drilled records, a rare path; none when no record is drilled."""
        if self._drilled is None:
            return set()
        held = list(self._drilled(record_ids))
        return would_generate(self._uow_factory(), held) if held else set()

    def _generate(self, jobs: Sequence[Job]) -> list[GroupResult]:
        if not jobs:
            return []
        try:
            return generate_reports(
                self._uow_factory(),
                [job.record_id for job in jobs],
                attempts=[job.attempt for job in jobs],
            )
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            logger.warning(
                "group of %d reports failed (%s: %s); each runs again alone",
                len(jobs),
                type(exc).__name__,
                exc,
            )
            raise


def _drill_failure(record_id: int, decided: datetime) -> FaultDrillFailure:
    return FaultDrillFailure(DRILL_ERROR.format(record_id=record_id), at=decided)
