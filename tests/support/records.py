"""The one way the tests insert records directly (no service rules): `insert_records`.

`web_app.Records.insert`, `hotpath.insert_records`, `stack.insert_record` and conftest's `make_record`
fixture are shorthands for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, text


@dataclass(frozen=True)
class RecordSpec:
    status: int
    user_id: int = 1
    deleted: bool = False
    #: Give the record a full set of dimension results and a summary.
    results: bool = False
    #: Set submitted_at (status >= 3) and completed_at (status 4), as the services would.
    timestamps: bool = True
    #: Set started_at (an assessment under way).
    started: bool = False


def insert_records(engine: Engine, specs: Sequence[RecordSpec]) -> list[int]:
    """Insert one record per spec, in order, and return their ids."""
    if not specs:
        return []
    with engine.begin() as conn:
        ids = list(
            conn.scalars(
                text(
                    "INSERT INTO assessment_records"
                    " (user_id, status, is_deleted, started_at, submitted_at, completed_at)"
                    " SELECT u, s, d, CASE WHEN st THEN now() END, CASE WHEN t AND s >= 3 THEN now() END,"
                    " CASE WHEN t AND s = 4 THEN now() END"
                    " FROM unnest(CAST(:users AS bigint[]), CAST(:statuses AS smallint[]),"
                    " CAST(:deleted AS boolean[]), CAST(:timestamps AS boolean[]),"
                    " CAST(:started AS boolean[]))"
                    " WITH ORDINALITY AS r(u, s, d, t, st, n)"
                    " ORDER BY n RETURNING id"
                ),
                {
                    "users": [s.user_id for s in specs],
                    "statuses": [s.status for s in specs],
                    "deleted": [s.deleted for s in specs],
                    "timestamps": [s.timestamps for s in specs],
                    "started": [s.started for s in specs],
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
                    " FROM unnest(CAST(:ids AS bigint[])) AS r,"
                    " (SELECT id FROM dimensions) AS dims(d)"
                ),
                {"ids": with_results},
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
