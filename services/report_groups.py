"""Group commit of report generation: the jobs a worker process has in hand, one transaction.

A worker process runs one job per record on many threads; a transaction per record is most
of what a report costs (issue 15: 100 records per transaction run ~5 × faster than one).
`ReportGroups` (one per process, shared by the actor's threads) gathers the records of the
jobs running at the same moment into groups (services/group_commit.py: no timer, a lone job
runs at once) and generates each group with `generate_reports`, set-based, in one
transaction of two pipelined round trips: lock and read, then write and commit.

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
(`services.reports.generate_one`), so the failure is that record's own; a database that
cannot be reached at all is `DatabaseUnavailable` for every job (nothing was done).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any, cast

import psycopg

from services.errors import DatabaseUnavailable, ServiceError
from services.group_commit import DEFAULT_MAX_GROUP, GroupCommit, GroupFailed, GroupStats
from services.limits import MAX_ID
from services.reports import (
    Generation,
    GenerationOutcome,
    Questionnaire,
    generate_one,
    latency_seconds,
)
from services.scoring import ScoreReport
from services.status import RecordStatus
from services.uow import UnitOfWork

logger = logging.getLogger(__name__)


class Deferred(Enum):
    """A group's answer for a record it left to the single-record path."""

    #: Locked by another transaction when the group locked its records.
    LOCKED = "locked"


GroupResult = Generation | ServiceError | Deferred

SKIPPED = Generation(GenerationOutcome.SKIPPED)


class ReportGroups:
    """Generates reports for any number of threads, the requests in hand as one group.

    `uow_factory` gives a fresh unit of work per group (and per fallback run); `on_group(size)`
    is told each group's size before it runs (a metric; it must not raise).
    """

    def __init__(
        self,
        uow_factory: Callable[[], UnitOfWork],
        *,
        max_group: int = DEFAULT_MAX_GROUP,
        on_group: Callable[[int], None] | None = None,
    ) -> None:
        self._uow_factory = uow_factory
        self._groups: GroupCommit[int, GroupResult] = GroupCommit(
            self._run, max_group=max_group, on_group=on_group
        )

    @property
    def stats(self) -> GroupStats:
        return self._groups.stats

    @property
    def waiting(self) -> int:
        """Jobs waiting for the next group."""
        return self._groups.waiting

    def generate(self, record_id: int) -> Generation:
        """As `services.reports.generate_one`, in a group with the other threads' records."""
        if not 1 <= record_id <= MAX_ID:
            logger.info("report of record %s skipped: not a valid record id", record_id)
            return SKIPPED
        try:
            result = self._groups.submit(record_id)
        except GroupFailed as exc:
            cause = exc.__cause__
            if isinstance(cause, DatabaseUnavailable):
                # Nothing was done; a fresh instance per thread (an exception carries its traceback).
                raise DatabaseUnavailable(str(cause)) from cause
            # Nothing of the group was committed: this record alone, so any error is its own.
            return generate_one(self._uow_factory(), record_id)
        if isinstance(result, ServiceError):
            raise result
        if isinstance(result, Deferred):
            # Locked elsewhere: wait for that transaction as a job alone always did.
            return generate_one(self._uow_factory(), record_id)
        return result

    def _run(self, record_ids: Sequence[int]) -> list[GroupResult]:
        try:
            return generate_reports(self._uow_factory(), record_ids)
        except DatabaseUnavailable:
            raise
        except Exception as exc:
            logger.warning(
                "group of %d reports failed (%s: %s); each runs again alone",
                len(record_ids),
                type(exc).__name__,
                exc,
            )
            raise


def generate_reports(uow: UnitOfWork, record_ids: Sequence[int]) -> list[GroupResult]:
    """Generate the reports of `record_ids` (valid ids, 1..MAX_ID) in one transaction.

    One result per id, in order: a `Generation`, the `ServiceError` that record's job must
    raise, or `Deferred.LOCKED` for a record another transaction holds (not waited for; the
    caller runs it alone). An id given twice is generated once; its second place gets
    SKIPPED (as a second job on the record would, after the first one's commit), or the same
    error. Database errors propagate (nothing is committed then). Logs one line per record
    it settles.
    """
    if not record_ids:
        return []
    unique = sorted(set(record_ids))
    with uow:
        conn = cast("psycopg.Connection[Any]", uow.session.connection().connection.driver_connection)
        with conn.pipeline():
            # SKIP LOCKED: a record another transaction holds is left out, not waited for
            # (its job runs alone and waits there), so the group cannot be held up or deadlock.
            lock = conn.execute(_LOCK_RECORDS, (unique,))
            present = conn.execute(_PRESENT, (unique,))
            questions = conn.execute(_ACTIVE_QUESTIONS)
            dimensions = conn.execute(_DIMENSIONS)
            answers = conn.execute(_ANSWERS, (unique,))
            states = {rid: (status, deleted) for rid, status, deleted in lock.fetchall()}
            existing = {rid for (rid,) in present.fetchall()}
            questionnaire = Questionnaire.of(questions.fetchall(), dimensions.fetchall())
            answer_rows = answers.fetchall()
        by_record: dict[int, list[tuple[int, int]]] = {}
        for rid, qid, value in answer_rows:
            by_record.setdefault(rid, []).append((qid, value))

        results: dict[int, GroupResult] = {}
        reports: dict[int, ScoreReport] = {}
        for rid in unique:
            state = states.get(rid)
            if state is None and rid in existing:
                results[rid] = Deferred.LOCKED
                continue
            if state is None or state[1] or state[0] != RecordStatus.GENERATING:
                reason = "missing" if state is None else "deleted" if state[1] else f"in status {state[0]}"
                logger.info("report of record %s skipped: record %s", rid, reason)
                results[rid] = SKIPPED
                continue
            try:
                reports[rid] = questionnaire.score(rid, by_record.get(rid, ()))
            except ServiceError as exc:
                results[rid] = exc
        latencies: dict[int, float | None] = {}
        if reports:
            latencies = _write(conn, uow, reports)
    for rid in reports:
        logger.info("report of record %s generated", rid)
        results[rid] = Generation(GenerationOutcome.GENERATED, latencies.get(rid))

    ordered: list[GroupResult] = []
    seen: set[int] = set()
    for rid in record_ids:
        result = results[rid]
        if rid in seen and not isinstance(result, Deferred):
            result = SKIPPED if isinstance(result, Generation) else ServiceError(result.message)
        seen.add(rid)
        ordered.append(result)
    return ordered


def _write(
    conn: psycopg.Connection[Any], uow: UnitOfWork, reports: dict[int, ScoreReport]
) -> dict[int, float | None]:
    """Replace the results and summaries of `reports`' records, set them to 4 and commit: one
    round trip. Returns each record's submission-to-report latency."""
    ids = list(reports)
    columns: tuple[list[Any], ...] = ([], [], [], [], [], [])
    for rid, report in reports.items():
        for score in report.dimensions:
            row = (rid, score.dimension_id, score.raw_score, score.score, score.rank, score.level)
            for column, value in zip(columns, row, strict=True):
                column.append(value)
    summaries = (
        ids,
        [json.dumps(list(r.top_dimensions)) for r in reports.values()],
        [r.summary for r in reports.values()],
    )
    with conn.pipeline():
        # Delete-then-insert keeps a regeneration from leaving rows of an older questionnaire.
        conn.execute(_DELETE_RESULTS, (ids,))
        conn.execute(_DELETE_SUMMARIES, (ids,))
        conn.execute(_INSERT_RESULTS, columns)
        conn.execute(_INSERT_SUMMARIES, summaries)
        completed = conn.execute(_COMPLETE, (RecordStatus.COMPLETED, ids))
        uow.commit()
    return {int(rid): latency_seconds(latency) for rid, latency in completed.fetchall()}


# The set-based statements of generate_reports; each text is the same for any group size
# (arrays, not lists of placeholders), so psycopg prepares each once per connection.
_LOCK_RECORDS = (
    "SELECT id, status, is_deleted FROM assessment_records WHERE id = ANY(%s)"
    " ORDER BY id FOR UPDATE SKIP LOCKED"
)
# Which of the ids exist, locked or not (a plain read never waits): a record missing from
# the locked rows is either locked elsewhere or absent.
_PRESENT = "SELECT id FROM assessment_records WHERE id = ANY(%s)"
_ACTIVE_QUESTIONS = "SELECT id, dimension_id, reverse_scored FROM questions WHERE is_active"
_DIMENSIONS = "SELECT id, code, name, sort_order, description FROM dimensions ORDER BY sort_order, id"
_ANSWERS = "SELECT record_id, question_id, value FROM answers WHERE record_id = ANY(%s)"
_DELETE_RESULTS = "DELETE FROM dimension_results WHERE record_id = ANY(%s)"
_DELETE_SUMMARIES = "DELETE FROM report_summaries WHERE record_id = ANY(%s)"
_INSERT_RESULTS = (
    "INSERT INTO dimension_results (record_id, dimension_id, raw_score, score, rank, level)"
    " SELECT * FROM unnest(%s::bigint[], %s::smallint[], %s::integer[], %s::float8[],"
    " %s::smallint[], %s::text[])"
)
_INSERT_SUMMARIES = (
    "INSERT INTO report_summaries (record_id, top_dimensions, summary)"
    " SELECT r, t::jsonb, s FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS x(r, t, s)"
)
# clock_timestamp() per row, as services/reports.py's _COMPLETE (which explains why).
_COMPLETE = (
    "UPDATE assessment_records SET status = %s, completed_at = clock_timestamp(), updated_at = now()"
    " WHERE id = ANY(%s) RETURNING id, EXTRACT(EPOCH FROM completed_at - submitted_at)"
)
