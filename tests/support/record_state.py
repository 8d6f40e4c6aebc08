"""What the database says about a record, for tests that drive it from outside."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from services.persistence.models import AssessmentRecord, DimensionResult, ReportSummary


def status_of(session_factory: sessionmaker[Session], record_id: int) -> int:
    with session_factory() as session:
        return session.scalars(select(AssessmentRecord.status).where(AssessmentRecord.id == record_id)).one()


def report_rows(session_factory: sessionmaker[Session], record_id: int) -> tuple[int, int]:
    """(dimension result rows, summary rows) of a record: (8, 1) once its report exists, never more."""
    with session_factory() as session:
        results = session.scalar(select(func.count()).where(DimensionResult.record_id == record_id))
        summaries = session.scalar(select(func.count()).where(ReportSummary.record_id == record_id))
        return int(results or 0), int(summaries or 0)


def completed_at(session_factory: sessionmaker[Session], record_id: int) -> datetime:
    """When the database set the record's report complete (its own clock)."""
    with session_factory() as session:
        moment = session.scalar(select(AssessmentRecord.completed_at).where(AssessmentRecord.id == record_id))
    assert moment is not None, f"record {record_id} has no completion time"
    return moment
