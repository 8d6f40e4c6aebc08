"""Helpers of the web tier's integration tests: constants and direct SQL on the records.

Imported by tests/integration/conftest.py and the test_web_* modules (pytest puts this
directory on sys.path, as it has no __init__.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, text

from tests.support.records import RecordSpec, insert_records

ADMIN_TOKEN = "test-admin-token"
USER_PATH = "/api/assessment"
ADMIN_PATH = "/api/admin"


class Records:
    """Direct SQL on the records tables: fast set-up and exact read-back for the tests."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def insert(self, *specs: RecordSpec) -> list[int]:
        return insert_records(self.engine, specs)

    def delete(self, ids: Sequence[int]) -> None:
        """Remove records with their answers, results and summaries (ON DELETE CASCADE)."""
        with self.engine.begin() as conn:
            conn.execute(text("DELETE FROM assessment_records WHERE id = ANY(:ids)"), {"ids": list(ids)})

    def status(self, record_id: int) -> int | None:
        with self.engine.connect() as conn:
            query = text("SELECT status FROM assessment_records WHERE id = :id")
            status: int | None = conn.scalar(query, {"id": record_id})
            return status

    def result_counts(self, record_id: int) -> tuple[int, int]:
        """(dimension_results rows, report_summaries rows) of a record."""
        with self.engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM dimension_results WHERE record_id = :id),"
                    " (SELECT count(*) FROM report_summaries WHERE record_id = :id)"
                ),
                {"id": record_id},
            ).one()
        return int(row[0]), int(row[1])

    def snapshot(self, ids: Sequence[int] | None = None) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of the record tables (of `ids`, or all), to compare before and after."""
        where = "" if ids is None else " WHERE {col} = ANY(:ids)"
        params = {} if ids is None else {"ids": list(ids)}
        queries = {
            "records": "SELECT * FROM assessment_records" + where.format(col="id") + " ORDER BY id",
            "answers": "SELECT * FROM answers" + where.format(col="record_id") + " ORDER BY 1, 2",
            "results": "SELECT * FROM dimension_results" + where.format(col="record_id") + " ORDER BY 1, 2",
            "summaries": "SELECT * FROM report_summaries" + where.format(col="record_id") + " ORDER BY 1",
        }
        with self.engine.connect() as conn:
            return {name: [tuple(r) for r in conn.execute(text(q), params)] for name, q in queries.items()}
