"""The migrations build exactly the schema the models describe, and its constraints hold."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import Engine, func, inspect, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from services.domain.questionnaire import load_questionnaire
from services.persistence.models import Answer, Base, Dimension, DimensionResult, Question, ReportSummary
from services.persistence.partitions import is_partition_table

ROOT = Path(__file__).resolve().parents[2]
TABLES = {
    "dimensions",
    "questions",
    "assessment_records",
    "answers",
    "dimension_results",
    "report_summaries",
    "event_log",
}


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """event_log's partitions are created at run time and are not in the models."""
    return not (type_ == "table" and name is not None and is_partition_table(name))


def test_models_match_the_migrated_schema(engine: Engine) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={"compare_type": True, "compare_server_default": True, "include_name": include_name},
        )
        assert compare_metadata(context, Base.metadata) == []


def test_downgrade_and_upgrade_again(engine: Engine) -> None:
    """Run inside one transaction that is rolled back (PostgreSQL DDL is transactional)."""
    cfg = Config(str(ROOT / "alembic.ini"))
    with engine.connect() as conn, conn.begin() as transaction:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
        assert TABLES.isdisjoint(inspect(conn).get_table_names())
        command.upgrade(cfg, "head")
        assert set(inspect(conn).get_table_names()) >= TABLES
        transaction.rollback()
    with engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) >= TABLES


def test_seeded_questionnaire(session_factory: sessionmaker[Session]) -> None:
    q = load_questionnaire()
    with session_factory() as s:
        dims = s.execute(select(Dimension.id, Dimension.code).order_by(Dimension.id)).all()
        assert [tuple(d) for d in dims] == [(d.id, d.code) for d in q.dimensions]
        assert s.scalar(select(func.count()).select_from(Question).where(Question.is_active)) == 40


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE assessment_records SET status = 6 WHERE id = :id",
        "UPDATE assessment_records SET status = 0 WHERE id = :id",
        "INSERT INTO answers (record_id, question_id, value) VALUES (:id, 101, 0)",
        "INSERT INTO answers (record_id, question_id, value) VALUES (:id, 101, 6)",
        "INSERT INTO answers (record_id, question_id, value) VALUES (:id, 999, 3)",
        "INSERT INTO dimension_results (record_id, dimension_id, raw_score, score, rank, level)"
        " VALUES (:id, 99, 5, 0, 1, 'x')",
        "INSERT INTO answers (record_id, question_id, value) VALUES (:id + 1000, 101, 3)",
    ],
)
def test_constraints_reject_bad_rows(
    session_factory: sessionmaker[Session], make_record: Callable[..., int], statement: str
) -> None:
    record_id = make_record(1)
    with session_factory() as s, pytest.raises(IntegrityError):
        s.execute(text(statement), {"id": record_id})


def test_deleting_a_record_cascades(
    session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(4)  # its answers, results and summary
    with session_factory() as s:
        for model in (Answer, DimensionResult, ReportSummary):
            assert s.scalar(select(func.count()).select_from(model).where(model.record_id == record_id))
        s.execute(text("DELETE FROM assessment_records WHERE id = :id"), {"id": record_id})
        s.commit()
        for model in (Answer, DimensionResult, ReportSummary):
            assert s.scalar(select(func.count()).select_from(model).where(model.record_id == record_id)) == 0


def test_record_defaults(session_factory: sessionmaker[Session]) -> None:
    with session_factory() as s:
        row = s.execute(
            text(
                "INSERT INTO assessment_records (user_id) VALUES (5) RETURNING status, is_deleted, created_at"
            )
        ).one()
        s.rollback()
    assert row.status == 1
    assert row.is_deleted is False
    assert row.created_at.tzinfo is not None
