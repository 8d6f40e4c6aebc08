"""Report generation: what a worker does with one message of `report:queue`.

`generate_report` is the whole job, in one transaction, row-locked on the record and
idempotent: it only acts on a record in status 3 and leaves it in 4, so a second run, a
redelivered message or a racing worker finds nothing to do and reports SKIPPED (the
message is then acknowledged, not retried). Anything unexpected raises, so the worker
retries and finally dead-letters the message and calls `mark_generation_failed`.

The worker runs the jobs in hand as groups, one transaction each (services/usecases/report_groups.py);
`generate_one` is the single-record path it falls back to, and what the admin and tests use.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

import psycopg
from psycopg.types.json import Jsonb
from sqlalchemy import update

from services.domain.errors import ParamError, ServiceError
from services.domain.limits import MAX_ID
from services.domain.scoring import DimensionSpec, QuestionSpec, ScoreReport, format_ids, score_answers
from services.domain.status import RecordStatus
from services.persistence.models import AssessmentRecord
from services.persistence.uow import UnitOfWork

logger = logging.getLogger(__name__)


class GenerationOutcome(StrEnum):
    GENERATED = "generated"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Generation:
    """What generating one record's report did."""

    outcome: GenerationOutcome
    #: Seconds from the record's submission to its report (completed_at - submitted_at, by the
    #: database's clock, read back from the write itself): the latency operators watch. None
    #: unless GENERATED, or when the record has no submission time.
    latency_s: float | None = None
    #: Why a SKIPPED record was skipped ("record in status 4"), for its job's log line.
    detail: str = ""


@dataclass(frozen=True)
class Questionnaire:
    """The active questions and the dimensions they score, as read in a generation's transaction."""

    questions: list[QuestionSpec]
    dimensions: list[DimensionSpec]
    active: frozenset[int]

    @classmethod
    def of(
        cls, question_rows: Iterable[Sequence[Any]], dimension_rows: Iterable[Sequence[Any]]
    ) -> Questionnaire:
        """From the rows of `ACTIVE_QUESTIONS_SQL` and `DIMENSIONS_SQL`."""
        questions = [
            QuestionSpec(id=qid, dimension_id=did, reverse_scored=rev) for qid, did, rev in question_rows
        ]
        used = {q.dimension_id for q in questions}
        dimensions = [
            DimensionSpec(id=did, code=code, name=name, sort_order=order, description=description)
            for did, code, name, order, description in dimension_rows
            if did in used
        ]
        return cls(questions, dimensions, frozenset(q.id for q in questions))

    def score(self, record_id: int, answer_values: Iterable[Sequence[Any]]) -> ScoreReport:
        """The report of a record's (question id, value) answers; `ServiceError` when an active
        question lacks its answer (damaged data must not yield a report) or scoring refuses."""
        answers = {qid: value for qid, value in answer_values if qid in self.active}
        missing = self.active - answers.keys()
        if missing:
            raise ServiceError(
                f"测评记录 {record_id} 的答案不完整，缺少题目：{format_ids(missing)}，无法生成报告"
            )
        try:
            return score_answers(self.dimensions, self.questions, answers)
        except ParamError as exc:
            raise ServiceError(f"测评记录 {record_id} 无法生成报告：{exc.message}") from exc


#: The latency of a report, read back by the write that completes it: from the moment the
#: record was last put into status 3 to its report. That is its submission, or its last
#: regeneration (which sets updated_at; nothing else changes a record in status 3), so a
#: report regenerated weeks later is not counted from its first submission; retries keep
#: the moment (they change nothing), so their waits count. `before` is the row as it was
#: before the UPDATE (a self-join: RETURNING sees only new values); NULL without a submission.
LATENCY_SQL = (
    "CASE WHEN before.submitted_at IS NULL THEN NULL ELSE"
    " EXTRACT(EPOCH FROM r.completed_at - GREATEST(before.submitted_at, before.updated_at)) END"
)


def latency_seconds(value: object) -> float | None:
    """A `_COMPLETE`-style RETURNING column (epoch seconds, numeric or NULL) as the latency."""
    return None if value is None else max(0.0, float(cast("float", value)))


def generate_report(uow: UnitOfWork, record_id: int) -> GenerationOutcome:
    """Generate the report of record `record_id` alone (see `generate_one`): its outcome."""
    return generate_one(uow, record_id).outcome


def generate_one(uow: UnitOfWork, record_id: int) -> Generation:
    """Score the answers of record `record_id` and write its results, summary and status 4.

    SKIPPED (no error) when the record is missing, soft-deleted or not in status 3.
    Raises `ServiceError` when a record in status 3 lacks answers to active questions
    (damaged data must not yield a report), and lets database errors through.

    Only active questions count: answers to a question deactivated since the submission
    are ignored, and every active question must have an answer.

    This is the worker's hot path, so it talks to psycopg directly, inside the unit of
    work's transaction, in two pipelined round trips (issue 15: the ORM path made 12 and
    spent most of a report's CPU building statements): the reads, then the writes with
    the commit.
    """
    if not 1 <= record_id <= MAX_ID:
        logger.info("report of record %s skipped: not a valid record id", record_id)
        return Generation(GenerationOutcome.SKIPPED)
    with uow:
        conn = cast("psycopg.Connection[Any]", uow.session.connection().connection.driver_connection)
        with conn.pipeline():
            # The lock serialises concurrent runs on one record: the second waits, then sees
            # status 4 and skips, so results are never written twice. The reads after it run
            # once the lock is held (each statement takes a fresh snapshot).
            lock = conn.execute(_LOCK_RECORD, (record_id,))
            questions = conn.execute(ACTIVE_QUESTIONS_SQL)
            dimension_rows = conn.execute(DIMENSIONS_SQL)
            answer_rows = conn.execute(_ANSWERS, (record_id,))
            row = lock.fetchone()
            questionnaire = Questionnaire.of(questions.fetchall(), dimension_rows.fetchall())
            answer_values = answer_rows.fetchall()
        if row is None or row[1] or row[0] != RecordStatus.GENERATING:
            reason = "missing" if row is None else "deleted" if row[1] else f"in status {row[0]}"
            logger.info("report of record %s skipped: record %s", record_id, reason)
            return Generation(GenerationOutcome.SKIPPED)
        report = questionnaire.score(record_id, answer_values)

        with conn.pipeline():
            # Delete-then-insert keeps a regeneration from leaving rows of an older questionnaire.
            conn.execute(_DELETE_RESULTS, (record_id,))
            conn.execute(_DELETE_SUMMARY, (record_id,))
            conn.execute(
                _INSERT_RESULTS,
                (
                    record_id,
                    [s.dimension_id for s in report.dimensions],
                    [s.raw_score for s in report.dimensions],
                    [s.score for s in report.dimensions],
                    [s.rank for s in report.dimensions],
                    [s.level for s in report.dimensions],
                ),
            )
            conn.execute(_INSERT_SUMMARY, (record_id, Jsonb(list(report.top_dimensions)), report.summary))
            completed = conn.execute(_COMPLETE, (RecordStatus.COMPLETED, record_id))
            # Queued in the same round trip as the writes (psycopg syncs the pipeline here).
            uow.commit()
        latency_row = completed.fetchone()
    # The one line per report (the actor logs only failures).
    logger.info("report of record %s generated", record_id)
    return Generation(GenerationOutcome.GENERATED, latency_seconds(latency_row[0] if latency_row else None))


# The statements of generate_report, written for the tables of services/persistence/models.py (the
# schema test keeps those in step with the migrations).
_LOCK_RECORD = "SELECT status, is_deleted FROM assessment_records WHERE id = %s FOR UPDATE"
#: The questionnaire as a generation reads it (also services/usecases/report_groups.py's).
ACTIVE_QUESTIONS_SQL = "SELECT id, dimension_id, reverse_scored FROM questions WHERE is_active"
DIMENSIONS_SQL = "SELECT id, code, name, sort_order, description FROM dimensions ORDER BY sort_order, id"
_ANSWERS = "SELECT question_id, value FROM answers WHERE record_id = %s"
_DELETE_RESULTS = "DELETE FROM dimension_results WHERE record_id = %s"
_DELETE_SUMMARY = "DELETE FROM report_summaries WHERE record_id = %s"
# One multi-row insert whose text does not depend on the number of dimensions.
_INSERT_RESULTS = (
    "INSERT INTO dimension_results (record_id, dimension_id, raw_score, score, rank, level)"
    " SELECT %s, * FROM unnest(%s::smallint[], %s::integer[], %s::float8[], %s::smallint[], %s::text[])"
)
_INSERT_SUMMARY = "INSERT INTO report_summaries (record_id, top_dimensions, summary) VALUES (%s, %s, %s)"
# clock_timestamp(), not now(): now() is when the transaction began, which for a generation
# that waited on the row lock is long before the report existed. updated_at = now() is what
# the model's onupdate wrote. It returns the latency (see LATENCY_SQL), so observing it
# costs no statement of its own.
# Built from constants only (no input reaches it):
_COMPLETE = (
    "UPDATE assessment_records AS r SET status = %s, completed_at = clock_timestamp(), updated_at = now()"  # noqa: S608
    " FROM assessment_records AS before WHERE r.id = %s AND before.id = r.id"
    " RETURNING " + LATENCY_SQL
)


def mark_generation_failed(uow: UnitOfWork, record_id: int) -> bool:
    """Set a record from 3 to 5 (生成失败); True if it changed, False if it was not in 3."""
    if not 1 <= record_id <= MAX_ID:
        return False
    with uow:
        changed = uow.session.execute(
            update(AssessmentRecord)
            .where(AssessmentRecord.id == record_id, AssessmentRecord.status == RecordStatus.GENERATING)
            .values(status=RecordStatus.FAILED)
            .returning(AssessmentRecord.id)
            .execution_options(synchronize_session=False)
        ).scalar_one_or_none()
        uow.commit()
    return changed is not None
