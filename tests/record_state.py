"""What the database says about a record, for tests that drive it from outside."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from services.models import AssessmentRecord, DimensionResult, ReportSummary


def status_of(session_factory: sessionmaker[Session], record_id: int) -> int:
    with session_factory() as session:
        return session.scalars(select(AssessmentRecord.status).where(AssessmentRecord.id == record_id)).one()


def report_rows(session_factory: sessionmaker[Session], record_id: int) -> tuple[int, int]:
    """(dimension result rows, summary rows) of a record: (8, 1) once its report exists, never more."""
    with session_factory() as session:
        results = session.scalar(select(func.count()).where(DimensionResult.record_id == record_id))
        summaries = session.scalar(select(func.count()).where(ReportSummary.record_id == record_id))
        return int(results or 0), int(summaries or 0)
