"""The database side of the benchmarks: schema, questionnaire, records of our own users.

Records are inserted with set-based SQL for users `stores.BENCH_USER_BASE` and up, and
deleted afterwards (answers, results and summaries cascade). Nothing else is touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, text

from bench import ROOT, output, stores
from services.persistence.db import make_engine, make_session_factory
from services.persistence.questionnaire_seed import seed_questionnaire
from services.persistence.uow import UnitOfWork


def prepare(database_url: str) -> Engine:
    """Migrate to head (idempotent), load the questionnaire, drop leftovers of earlier runs."""
    from alembic import command
    from alembic.config import Config

    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.attributes["database_url"] = database_url
    cfg.set_section_option("logger_alembic", "level", "WARNING")
    try:
        command.upgrade(cfg, "head")
    except Exception as exc:  # a schema already in place is enough for the benchmarks
        output.log(f"  (alembic upgrade failed: {exc}; using the schema as it is)")
    engine = make_engine(database_url, pool_size=4)
    seed_questionnaire(UnitOfWork(make_session_factory(engine)))
    delete_bench_records(engine)
    return engine


def insert_records(engine: Engine, count: int, *, status: int, user_id: int | None = None) -> list[int]:
    """`count` records of bench users in `status`, each with a full set of answers (status >= 3)."""
    users = [user_id or stores.BENCH_USER_BASE + i for i in range(count)]
    ids: list[int] = []
    with engine.begin() as conn:
        for start in range(0, count, 5000):
            chunk = users[start : start + 5000]
            ids += list(
                conn.scalars(
                    text(
                        "INSERT INTO assessment_records"
                        " (user_id, status, is_deleted, started_at, submitted_at)"
                        " SELECT u, :status, false, now(), CASE WHEN :status >= 3 THEN now() END"
                        " FROM unnest(CAST(:users AS bigint[])) WITH ORDINALITY AS t(u, n) ORDER BY n"
                        " RETURNING id"
                    ),
                    {"users": chunk, "status": status},
                )
            )
        if status >= 3 and ids:
            conn.execute(
                text(
                    "INSERT INTO answers (record_id, question_id, value)"
                    # Answers differ from record to record (so do their reports): the
                    # baselines' output is checked against the product's on them.
                    " SELECT r, q.id, ((q.id * 7 + r * (q.id % 3 + 1)) % 5) + 1"
                    " FROM unnest(CAST(:ids AS bigint[])) AS r, questions q WHERE q.is_active"
                ),
                {"ids": ids},
            )
    return ids


def statuses(engine: Engine, ids: Sequence[int]) -> dict[int, int]:
    """Count of records per status among `ids`."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT status, count(*) FROM assessment_records WHERE id = ANY(:ids) GROUP BY status"),
            {"ids": list(ids)},
        )
        return {int(s): int(c) for s, c in rows}


def outputs(engine: Engine, ids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
    """What generation wrote for each of `ids`: its status, results (by dimension) and summary."""
    with engine.connect() as conn:
        status = {
            int(rid): int(value)
            for rid, value in conn.execute(
                text("SELECT id, status FROM assessment_records WHERE id = ANY(:ids)"), {"ids": list(ids)}
            )
        }
        results: dict[int, list[tuple[Any, ...]]] = {}
        for row in conn.execute(
            text(
                "SELECT record_id, dimension_id, raw_score, score, rank, level FROM dimension_results"
                " WHERE record_id = ANY(:ids) ORDER BY record_id, dimension_id"
            ),
            {"ids": list(ids)},
        ):
            results.setdefault(row[0], []).append(tuple(row[1:]))
        summaries = {
            row[0]: (row[1], row[2])
            for row in conn.execute(
                text(
                    "SELECT record_id, top_dimensions, summary FROM report_summaries"
                    " WHERE record_id = ANY(:ids)"
                ),
                {"ids": list(ids)},
            )
        }
    return {rid: (status.get(rid), results.get(rid), summaries.get(rid)) for rid in ids}


def set_status(engine: Engine, ids: Sequence[int], status: int) -> None:
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE assessment_records SET status = :s WHERE id = ANY(:ids)"),
            {"s": status, "ids": list(ids)},
        )


#: The tables a benchmark's records fill (answers, results and summaries cascade from them).
BENCH_TABLES = ("assessment_records", "answers", "dimension_results", "report_summaries")
#: The fewest records of a run whose tables `delete_bench_records` vacuums and analyzes: a
#: smaller run's statistics (an output check's 200 records) would plan the next run's
#: statements for small tables (see `vacuum_analyze`).
VACUUM_MIN_RECORDS = 1_000


def delete_bench_records(engine: Engine) -> None:
    """Delete the bench users' records (answers, results and summaries cascade), after a
    `vacuum_analyze` while they are still there (runs of VACUUM_MIN_RECORDS or more)."""
    with engine.connect() as conn:
        present = conn.scalar(
            text("SELECT count(*) FROM assessment_records WHERE user_id >= :base"),
            {"base": stores.BENCH_USER_BASE},
        )
    if present >= VACUUM_MIN_RECORDS:
        vacuum_analyze(engine)
    with engine.begin() as conn:
        conn.execute(
            text("DELETE FROM assessment_records WHERE user_id >= :base"), {"base": stores.BENCH_USER_BASE}
        )


def vacuum_analyze(engine: Engine) -> None:
    """VACUUM ANALYZE the tables a run fills, while its rows are in them, as autovacuum would.

    This machine's PostgreSQL runs without autovacuum. Without it, each run's deleted rows stay
    dead in the tables and their indexes, and every later run (both sides of a comparison) pays
    for more of them (after a day of benchmarks, `answers` held 15 million dead rows and no
    table had been vacuumed or analyzed by the server). Before the delete, not after: a VACUUM of
    emptied tables records them as empty, the statements' generic plans (psycopg prepares them)
    then scan `dimension_results` whole as it fills, and a report costs PostgreSQL 1.8 ms of
    CPU instead of 0.2; a run after statistics of 200 records, 2.7 ms. So a run starts with the dead
    rows of one run at most and the statistics of a full one."""
    with engine.connect() as conn:
        autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")  # VACUUM runs outside a transaction
        for table in BENCH_TABLES:
            autocommit.execute(text(f"VACUUM ANALYZE {table}"))
