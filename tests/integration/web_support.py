"""Helpers of the web tier's integration tests: constants and direct SQL on the records.

Imported by tests/integration/conftest.py and the test_web_* modules (pytest puts this
directory on sys.path, as it has no __init__.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, text

ADMIN_TOKEN = "test-admin-token"
USER_PATH = "/api/assessment"
ADMIN_PATH = "/api/admin"


@dataclass(frozen=True)
class RecordSpec:
    status: int
    user_id: int = 1
    deleted: bool = False
    #: Give the record a full set of dimension results and a summary.
    results: bool = False


class Records:
    """Direct SQL on the records tables: fast set-up and exact read-back for the tests."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        with engine.connect() as conn:
            self.dimension_ids = list(conn.scalars(text("SELECT id FROM dimensions ORDER BY id")))

    def insert(self, *specs: RecordSpec) -> list[int]:
        if not specs:
            return []
        with self.engine.begin() as conn:
            ids = list(
                conn.scalars(
                    text(
                        "INSERT INTO assessment_records"
                        " (user_id, status, is_deleted, submitted_at, completed_at)"
                        " SELECT u, s, d, CASE WHEN s >= 3 THEN now() END, CASE WHEN s = 4 THEN now() END"
                        " FROM unnest(CAST(:users AS bigint[]), CAST(:statuses AS smallint[]),"
                        " CAST(:deleted AS boolean[])) WITH ORDINALITY AS t(u, s, d, n)"
                        " ORDER BY n RETURNING id"
                    ),
                    {
                        "users": [s.user_id for s in specs],
                        "statuses": [s.status for s in specs],
                        "deleted": [s.deleted for s in specs],
                    },
                )
            )
            with_results = [i for i, s in zip(ids, specs, strict=True) if s.results]
            if with_results:
                conn.execute(
                    text(
                        "INSERT INTO dimension_results"
                        " (record_id, dimension_id, raw_score, score, rank, level)"
                        " SELECT r, d, 20, 75.0, row_number() OVER (PARTITION BY r ORDER BY d), '较强'"
                        " FROM unnest(CAST(:ids AS bigint[])) AS r, unnest(CAST(:dims AS smallint[])) AS d"
                    ),
                    {"ids": with_results, "dims": self.dimension_ids},
                )
                conn.execute(
                    text(
                        "INSERT INTO report_summaries (record_id, top_dimensions, summary)"
                        " SELECT r, '[\"linguistic\"]'::jsonb, 'summary'"
                        " FROM unnest(CAST(:ids AS bigint[])) AS r"
                    ),
                    {"ids": with_results},
                )
        return ids

    def delete(self, ids: Sequence[int]) -> None:
        """Remove records with their answers, results and summaries (ON DELETE CASCADE)."""
        with self.engine.begin() as conn:
            conn.execute(text("DELETE FROM assessment_records WHERE id = ANY(:ids)"), {"ids": list(ids)})

    def status(self, record_id: int) -> int | None:
        with self.engine.connect() as conn:
            query = text("SELECT status FROM assessment_records WHERE id = :id")
            return conn.scalar(query, {"id": record_id})

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
