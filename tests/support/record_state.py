"""What the database says about records, for tests that drive them from outside: one copy of each reader."""

from __future__ import annotations

import contextlib
from datetime import datetime

from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from services.persistence.models import AssessmentRecord, DimensionResult, ReportSummary
from tests.support.processes import wait_until


def status_of(session_factory: sessionmaker[Session], record_id: int) -> int:
    with session_factory() as session:
        return session.scalars(select(AssessmentRecord.status).where(AssessmentRecord.id == record_id)).one()


def report_rows(session_factory: sessionmaker[Session], record_id: int) -> tuple[int, int]:
    """(dimension result rows, summary rows) of a record: (8, 1) once its report exists, never more."""
    with session_factory() as session:
        results = session.scalar(select(func.count()).where(DimensionResult.record_id == record_id))
        summaries = session.scalar(select(func.count()).where(ReportSummary.record_id == record_id))
        return int(results or 0), int(summaries or 0)


def report_state(session_factory: sessionmaker[Session], record_id: int) -> tuple[int, int, datetime | None]:
    """(dimension result rows, summary rows, completed_at) of a record."""
    with session_factory() as session:
        moment = session.scalar(select(AssessmentRecord.completed_at).where(AssessmentRecord.id == record_id))
    return (*report_rows(session_factory, record_id), moment)


def completed_at(session_factory: sessionmaker[Session], record_id: int) -> datetime:
    """When the database set the record's report complete (its own clock)."""
    with session_factory() as session:
        moment = session.scalar(select(AssessmentRecord.completed_at).where(AssessmentRecord.id == record_id))
    assert moment is not None, f"record {record_id} has no completion time"
    return moment


def wait_for_status(
    session_factory: sessionmaker[Session], record_id: int, status: int, timeout: float = 10
) -> None:
    """Wait until the record is in `status` (the bound only ends a hang), then assert it is."""
    with contextlib.suppress(AssertionError):
        wait_until(
            lambda: status_of(session_factory, record_id) == status,
            timeout=timeout,
            what=f"record {record_id} in status {status}",
        )
    assert status_of(session_factory, record_id) == status


def statuses(factory: sessionmaker[Session], ids: list[int]) -> dict[int, int]:
    """Each record's status, by id."""
    with factory() as session:
        rows = session.execute(
            select(AssessmentRecord.id, AssessmentRecord.status).where(AssessmentRecord.id.in_(ids))
        )
        return {int(rid): int(status) for rid, status in rows}


def status_counts(engine: Engine, ids: list[int]) -> dict[int, int]:
    """How many of the records are in each status."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT status, count(*) FROM assessment_records WHERE id = ANY(:ids) GROUP BY status"),
            {"ids": ids},
        ).all()
    return {int(s): int(n) for s, n in rows}


def distinct_statuses(engine: Engine, ids: list[int]) -> set[int]:
    """The statuses the records are in."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT DISTINCT status FROM assessment_records WHERE id = ANY(:ids)"), {"ids": ids}
        )
        return {int(s) for s in rows.scalars()}
