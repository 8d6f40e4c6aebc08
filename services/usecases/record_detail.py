"""One record as an admin sees it: the record, its answers and its report, whoever owns it.

The user side (services/usecases/assessment.py) shows a record only to its owner and a report only
once completed; an admin inspecting a failed or stuck record needs both whatever the
status, soft-deleted records included (their rows are kept).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from services.domain.errors import RecordNotFound
from services.domain.interpretation import interpret
from services.domain.limits import is_id
from services.domain.questionnaire import load_questionnaire
from services.domain.status import status_text
from services.domain.views import DimensionScoreView
from services.persistence.uow import UnitOfWork


@dataclass(frozen=True)
class AnswerLine:
    question_id: int
    sort_order: int
    dimension_name: str
    text: str
    value: int
    answered_at: datetime


@dataclass(frozen=True)
class AdminRecordDetail:
    id: int
    user_id: int
    status: int
    status_name: str
    is_deleted: bool
    created_at: datetime
    started_at: datetime | None
    submitted_at: datetime | None
    completed_at: datetime | None
    #: In questionnaire order.
    answers: list[AnswerLine]
    #: The eight dimensions, strongest first; empty until a report was generated.
    dimensions: list[DimensionScoreView]
    top_dimensions: list[str]
    summary: str | None


def admin_record_detail(uow: UnitOfWork, record_id: int) -> AdminRecordDetail:
    """The record with its answers and report rows; RecordNotFound (3241) if it never existed."""
    if not is_id(record_id):
        raise RecordNotFound()
    with uow:
        record = uow.records.get(record_id)
        if record is None:
            raise RecordNotFound()
        answers = uow.records.answer_lines(record_id)
        scores = uow.reports.scores(record_id)
        summary = uow.reports.summary(record_id)
        return AdminRecordDetail(
            id=record.id,
            user_id=record.user_id,
            status=record.status,
            status_name=status_text(record.status),
            is_deleted=record.is_deleted,
            created_at=record.created_at,
            started_at=record.started_at,
            submitted_at=record.submitted_at,
            completed_at=record.completed_at,
            answers=[
                AnswerLine(
                    question_id=qid,
                    sort_order=order,
                    dimension_name=dim,
                    text=text,
                    value=value,
                    answered_at=at,
                )
                for qid, order, dim, text, value, at in answers
            ],
            # The same texts the user reads (levels, interpretations, suggestions).
            dimensions=interpret(scores, load_questionnaire()).dimensions,
            top_dimensions=list(summary.top_dimensions) if summary else [],
            summary=summary.summary if summary else None,
        )
