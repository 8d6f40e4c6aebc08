"""The one way the tests insert records directly (no service rules): `insert_records`.

A record is planted as the product leaves it in its status, so a test never reads a state the
product cannot write:

- 1 (created): no start, no answers;
- 2 (started): `started_at`;
- 3 (submitted) and 5 (its report failed): also `submitted_at`, a full answer sheet to the
  active questions (`default_answer`) and the progress a submission writes (`answered_count`,
  `last_activity_at`, `progress_updated_at`);
- 4 (completed): also `completed_at` (after the submission, as the worker's clock_timestamp()),
  and the results and summary that generation computes from the answers, written by its own
  statements (services/persistence/report_sql.py).

`web_app.Records.insert`, `hotpath.insert_records`, `stack.insert_record` and conftest's `make_record`
fixture are shorthands for it. `clear_records` and `clear_event_log` empty the tables again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

from services.domain.scoring import ScoreReport
from services.domain.status import RecordStatus
from services.persistence.report_sql import (
    ACTIVE_QUESTIONS_SQL,
    DIMENSIONS_SQL,
    INSERT_RESULTS,
    INSERT_SUMMARIES,
)
from services.usecases.reports import Questionnaire


def default_answer(question_id: int) -> int:
    """A fixed, varied answer per question (1..5): the sheet of every planted submission."""
    return question_id * 7 % 5 + 1


@dataclass(frozen=True)
class RecordSpec:
    status: int
    user_id: int = 1
    deleted: bool = False
    #: Results and a summary, as generation writes them from the answers. A record in 4 always
    #: has them (None: as its status has them); one in 3 or 5 may keep those of a report made
    #: before it was regenerated (seed 000, property 4: regeneration clears them).
    results: bool | None = None
    #: The submission's full answer sheet (status >= 3). False: a submitted record whose answers
    #: were lost (generation refuses it), for the tests of that failure.
    answers: bool = True

    def __post_init__(self) -> None:
        if self.has_results and not self.has_answers:
            raise ValueError(f"{self}: results are computed from a submission's answers")
        if self.status == RecordStatus.COMPLETED and not self.has_results:
            raise ValueError(f"{self}: a completed record has its results")

    @property
    def has_answers(self) -> bool:
        return self.answers and self.status >= RecordStatus.GENERATING

    @property
    def has_results(self) -> bool:
        return self.status == RecordStatus.COMPLETED if self.results is None else self.results


def insert_records(
    engine: Engine, specs: Sequence[RecordSpec], *, answers: Mapping[int, int] | None = None
) -> list[int]:
    """Insert one record per spec, in order, and return their ids.

    `answers`: the answer sheet of the specs that have one ({question id: value}), instead of
    `default_answer` to every active question; results are computed from it.
    """
    if not specs:
        return []
    with engine.begin() as conn:
        questionnaire = _questionnaire(conn)
        sheet = dict(answers) if answers is not None else {q: default_answer(q) for q in questionnaire.active}
        ids = list(
            conn.scalars(
                text(
                    "INSERT INTO assessment_records (user_id, status, is_deleted, started_at,"
                    " submitted_at, completed_at, answered_count, last_activity_at, progress_updated_at)"
                    " SELECT u, s, d, CASE WHEN s >= 2 THEN now() END, CASE WHEN s >= 3 THEN now() END,"
                    " CASE WHEN s = 4 THEN clock_timestamp() END, CASE WHEN s >= 3 THEN n_answers END,"
                    " CASE WHEN s >= 3 THEN now() END, CASE WHEN s >= 3 THEN now() END"
                    " FROM unnest(CAST(:users AS bigint[]), CAST(:statuses AS smallint[]),"
                    " CAST(:deleted AS boolean[]), CAST(:answered AS integer[]))"
                    " WITH ORDINALITY AS r(u, s, d, n_answers, n)"
                    " ORDER BY n RETURNING id"
                ),
                {
                    "users": [s.user_id for s in specs],
                    "statuses": [s.status for s in specs],
                    "deleted": [s.deleted for s in specs],
                    # What the submission counted, even where its answers were lost since.
                    "answered": [len(sheet)] * len(specs),
                },
            )
        )
        answered = [i for i, s in zip(ids, specs, strict=True) if s.has_answers]
        if answered and sheet:
            conn.execute(
                text(
                    "INSERT INTO answers (record_id, question_id, value, answered_at)"
                    " SELECT r, q, v, now() FROM unnest(CAST(:ids AS bigint[])) AS r,"
                    " unnest(CAST(:questions AS integer[]), CAST(:values AS smallint[])) AS a(q, v)"
                ),
                {"ids": answered, "questions": list(sheet), "values": list(sheet.values())},
            )
        with_results = [i for i, s in zip(ids, specs, strict=True) if s.has_results]
        if with_results:
            _write_results(conn, with_results, questionnaire.score(with_results[0], sheet))
    return ids


def _questionnaire(conn: Connection) -> Questionnaire:
    """The active questionnaire as a generation reads it."""
    questions = [tuple(row) for row in conn.exec_driver_sql(ACTIVE_QUESTIONS_SQL)]
    dimensions = [tuple(row) for row in conn.exec_driver_sql(DIMENSIONS_SQL)]
    return Questionnaire.of(questions, dimensions)


def _write_results(conn: Connection, record_ids: Sequence[int], report: ScoreReport) -> None:
    """The report's rows for each record, by generation's own statements."""
    results = [
        (rid, s.dimension_id, s.raw_score, s.score, s.rank, s.level)
        for rid in record_ids
        for s in report.dimensions
    ]
    summaries = [{"r": rid, "t": list(report.top_dimensions), "s": report.summary} for rid in record_ids]
    conn.exec_driver_sql(INSERT_RESULTS, (json.dumps(results, ensure_ascii=False),))
    conn.exec_driver_sql(INSERT_SUMMARIES, (json.dumps(summaries, ensure_ascii=False),))


#: Whether a test left something behind: a record (answers, results and summaries belong to
#: one), an event, or a record id taken (an insert rolled back takes one too).
_RECORDS_USED = (
    "SELECT EXISTS (SELECT FROM assessment_records) OR EXISTS (SELECT FROM event_log)"
    " OR (SELECT is_called FROM assessment_records_id_seq)"
)
#: Rows (records, or events) from which a TRUNCATE is cheaper than a DELETE.
TRUNCATE_FROM = 200
#: A DELETE leaves its rows dead in the tables (the suite's PostgreSQL may run no autovacuum):
#: every this many clears of one engine is a TRUNCATE, which takes them away.
TRUNCATE_EVERY = 100
_clears: dict[int, int] = {}


def _clear(engine: Engine, used: str, tables: str, *, restart: bool) -> None:
    """Empty `tables` (the first one's references cascade) when `used` says they hold anything:
    a few rows by DELETE, else by TRUNCATE. A TRUNCATE costs PostgreSQL new files for each
    table, index and partition, tenths of a second on a busy machine, which every test that
    wrote a row would pay."""
    with engine.begin() as conn:
        if not conn.scalar(text(used)):
            return
        count = _clears[id(engine)] = _clears.get(id(engine), 0) + 1
        names = [name.strip() for name in tables.split(",")]
        sizes = [
            conn.scalar(text(f"SELECT count(*) FROM (SELECT FROM {name} LIMIT {TRUNCATE_FROM}) AS r"))
            for name in names
        ]
        rows = max(int(size or 0) for size in sizes)
        if rows >= TRUNCATE_FROM or count % TRUNCATE_EVERY == 0:
            restarting = " RESTART IDENTITY" if restart else ""
            conn.execute(text(f"TRUNCATE {tables}{restarting} CASCADE"))
            return
        for name in names:
            conn.execute(text(f"DELETE FROM {name}"))
        if restart:
            conn.execute(text("ALTER SEQUENCE assessment_records_id_seq RESTART"))


def clear_records(engine: Engine) -> None:
    """Remove every record (answers, results and summaries cascade) and the event log, record
    ids starting again at 1; keep the questionnaire. Nothing is done for tables left as they
    were found (most tests)."""
    _clear(engine, _RECORDS_USED, "assessment_records, event_log", restart=True)


def clear_event_log(engine: Engine) -> None:
    """Empty the event log (records do not cascade to it), when it holds anything."""
    _clear(engine, "SELECT EXISTS (SELECT FROM event_log)", "event_log", restart=False)
