"""Report generation: what a worker does with one message of `report:queue`.

`generate_report` is the whole job, in one transaction, row-locked on the record and
idempotent: it only acts on a record in status 3 and leaves it in 4, so a second run, a
redelivered message or a racing worker finds nothing to do and reports SKIPPED (the
message is then acknowledged, not retried). Anything unexpected raises, so the worker
retries and finally dead-letters the message and calls `mark_generation_failed`.
"""

from __future__ import annotations

import logging
from enum import StrEnum

from sqlalchemy import delete, func, insert, select, update

from services.errors import ParamError, ServiceError
from services.limits import MAX_ID
from services.models import (
    Answer,
    AssessmentRecord,
    Dimension,
    DimensionResult,
    Question,
    ReportSummary,
)
from services.scoring import DimensionSpec, QuestionSpec, format_ids, score_answers
from services.status import RecordStatus
from services.uow import UnitOfWork

logger = logging.getLogger(__name__)


class GenerationOutcome(StrEnum):
    GENERATED = "generated"
    SKIPPED = "skipped"


def generate_report(uow: UnitOfWork, record_id: int) -> GenerationOutcome:
    """Score the answers of record `record_id` and write its results, summary and status 4.

    SKIPPED (no error) when the record is missing, soft-deleted or not in status 3.
    Raises `ServiceError` when a record in status 3 lacks answers to active questions
    (damaged data must not yield a report), and lets database errors through.

    Only active questions count: answers to a question deactivated since the submission
    are ignored, and every active question must have an answer.
    """
    if not 1 <= record_id <= MAX_ID:
        logger.info("report of record %s skipped: not a valid record id", record_id)
        return GenerationOutcome.SKIPPED
    with uow:
        session = uow.session
        # The lock serialises concurrent runs on one record: the second waits, then sees
        # status 4 and skips, so results are never written twice.
        row = session.execute(
            select(AssessmentRecord.status, AssessmentRecord.is_deleted)
            .where(AssessmentRecord.id == record_id)
            .with_for_update()
        ).one_or_none()
        if row is None or row.is_deleted or row.status != RecordStatus.GENERATING:
            reason = "missing" if row is None else "deleted" if row.is_deleted else f"in status {row.status}"
            logger.info("report of record %s skipped: record %s", record_id, reason)
            return GenerationOutcome.SKIPPED

        questions = session.execute(
            select(Question.id, Question.dimension_id, Question.reverse_scored).where(Question.is_active)
        ).all()
        used_dimensions = {q.dimension_id for q in questions}
        dimensions = [
            DimensionSpec(
                id=d.id, code=d.code, name=d.name, sort_order=d.sort_order, description=d.description
            )
            for d in session.scalars(select(Dimension).order_by(Dimension.sort_order, Dimension.id))
            if d.id in used_dimensions
        ]
        question_specs = [
            QuestionSpec(id=q.id, dimension_id=q.dimension_id, reverse_scored=q.reverse_scored)
            for q in questions
        ]
        active = {q.id for q in questions}
        answers = {
            qid: value
            for qid, value in session.execute(
                select(Answer.question_id, Answer.value).where(Answer.record_id == record_id)
            )
            if qid in active
        }
        missing = active - answers.keys()
        if missing:
            raise ServiceError(
                f"测评记录 {record_id} 的答案不完整，缺少题目：{format_ids(missing)}，无法生成报告"
            )
        try:
            report = score_answers(dimensions, question_specs, answers)
        except ParamError as exc:
            raise ServiceError(f"测评记录 {record_id} 无法生成报告：{exc.message}") from exc

        # Delete-then-insert keeps a regeneration from leaving rows of an older questionnaire.
        session.execute(delete(DimensionResult).where(DimensionResult.record_id == record_id))
        session.execute(delete(ReportSummary).where(ReportSummary.record_id == record_id))
        session.execute(
            insert(DimensionResult),
            [
                {
                    "record_id": record_id,
                    "dimension_id": s.dimension_id,
                    "raw_score": s.raw_score,
                    "score": s.score,
                    "rank": s.rank,
                    "level": s.level,
                }
                for s in report.dimensions
            ],
        )
        session.execute(
            insert(ReportSummary).values(
                record_id=record_id, top_dimensions=list(report.top_dimensions), summary=report.summary
            )
        )
        session.execute(
            update(AssessmentRecord)
            .where(AssessmentRecord.id == record_id)
            # clock_timestamp(), not now(): now() is when the transaction began, which for a
            # generation that waited on the row lock is long before the report existed.
            .values(status=RecordStatus.COMPLETED, completed_at=func.clock_timestamp())
            .execution_options(synchronize_session=False)
        )
        uow.commit()
    logger.info("report of record %s generated", record_id)
    return GenerationOutcome.GENERATED


def submit_to_report_seconds(uow: UnitOfWork, record_id: int) -> float | None:
    """Seconds from the record's submission to its report (completed_at - submitted_at), None if
    either is missing: the latency operators watch, measured by the database's own clock."""
    with uow:
        row = uow.session.execute(
            select(AssessmentRecord.submitted_at, AssessmentRecord.completed_at).where(
                AssessmentRecord.id == record_id
            )
        ).one_or_none()
    if row is None or row.submitted_at is None or row.completed_at is None:
        return None
    return max(0.0, float((row.completed_at - row.submitted_at).total_seconds()))


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
