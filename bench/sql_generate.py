"""Child of `bench.generation_limit`: report generation as a plain psycopg loop, no ORM, no queue.

    python -m bench.sql_generate      (reads its task as one JSON line on stdin)

The floor the pipeline is compared with: the leanest straightforward code a careful engineer
would write by hand for exactly the product's writes. Per transaction:

- round trip 1, pipelined: lock the records in status 3 and read their answers in one
  statement (the lock in a CTE, so each record is locked once, not once per answer row: a
  join `FOR UPDATE OF` the record cost PostgreSQL 2–3 × the CPU in (c)), the active
  questions, the dimensions;
- score with `services.domain.scoring` (the product's pure scoring);
- round trip 2, pipelined: one statement deletes the old results and summaries and sets
  status 4 (data-modifying CTEs on three different tables), one inserts the results and the
  summaries (CTE again), then COMMIT.

`batch` = 1 is (b), one record per transaction, scalar parameters; `batch` > 1 is (c), that
many records per transaction, the same statements over id arrays. Threads take the next id
(or batch of ids) from a queue shared by the process, so none idles while another still has
work. Its SQL is its own on purpose, not services/persistence/report_sql.py's: the baseline is
what a hand-written loop costs, whatever the product's path becomes; `bench.generation_limit`
checks that it writes what the product writes.

Protocol with the parent: task line in, `READY` out once every connection is open, `GO` in,
the result line (`BENCH-RESULT {...}`) out, then `EXIT` in (the parent samples the
PostgreSQL backends' CPU while they still exist).
"""

from __future__ import annotations

import json
import queue
import resource
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import psycopg

from bench.launch import emit_result
from config.settings import normalize_database_url
from services.domain.scoring import DimensionSpec, QuestionSpec, score_answers

QUESTIONS = "SELECT id, dimension_id, reverse_scored FROM questions WHERE is_active"
DIMENSIONS = "SELECT id, code, name, sort_order, description FROM dimensions ORDER BY sort_order, id"

# One record: scalar parameters.
READ_ONE = (
    "WITH r AS (SELECT id FROM assessment_records WHERE id = %s AND status = 3 AND NOT is_deleted"
    " FOR UPDATE)"
    " SELECT a.question_id, a.value FROM r JOIN answers a ON a.record_id = r.id"
)
# The old rows go and the status changes in one statement; the new rows come in the next one
# (a single statement cannot delete and re-insert the same keys: its parts see one snapshot).
CLEAR_ONE = (
    "WITH d1 AS (DELETE FROM dimension_results WHERE record_id = %(id)s),"
    " d2 AS (DELETE FROM report_summaries WHERE record_id = %(id)s)"
    " UPDATE assessment_records SET status = 4, completed_at = clock_timestamp(), updated_at = now()"
    " WHERE id = %(id)s"
)
INSERT_ONE = (
    "WITH s AS (INSERT INTO report_summaries (record_id, top_dimensions, summary)"
    " VALUES (%(id)s, %(top)s::jsonb, %(summary)s))"
    " INSERT INTO dimension_results (record_id, dimension_id, raw_score, score, rank, level)"
    " SELECT %(id)s, * FROM unnest(%(d)s::smallint[], %(raw)s::int[], %(score)s::float8[],"
    " %(rank)s::smallint[], %(level)s::text[])"
)

# Many records: the same over id arrays.
READ_MANY = (
    "WITH r AS (SELECT id FROM assessment_records WHERE id = ANY(%s) AND status = 3 AND NOT is_deleted"
    " ORDER BY id FOR UPDATE)"
    " SELECT a.record_id, a.question_id, a.value FROM r JOIN answers a ON a.record_id = r.id"
)
CLEAR_MANY = (
    "WITH d1 AS (DELETE FROM dimension_results WHERE record_id = ANY(%(ids)s)),"
    " d2 AS (DELETE FROM report_summaries WHERE record_id = ANY(%(ids)s))"
    " UPDATE assessment_records SET status = 4, completed_at = clock_timestamp(), updated_at = now()"
    " WHERE id = ANY(%(ids)s)"
)
INSERT_MANY = (
    "WITH s AS (INSERT INTO report_summaries (record_id, top_dimensions, summary)"
    " SELECT r, t::jsonb, s"
    " FROM unnest(%(ids)s::bigint[], %(top)s::text[], %(summary)s::text[]) AS x(r, t, s))"
    " INSERT INTO dimension_results (record_id, dimension_id, raw_score, score, rank, level)"
    " SELECT * FROM unnest(%(r)s::bigint[], %(d)s::smallint[], %(raw)s::int[], %(score)s::float8[],"
    " %(rank)s::smallint[], %(level)s::text[])"
)


def questionnaire(
    question_rows: list[tuple[Any, ...]], dimension_rows: list[tuple[Any, ...]]
) -> tuple[list[DimensionSpec], list[QuestionSpec]]:
    specs = [QuestionSpec(id=q, dimension_id=d, reverse_scored=r) for q, d, r in question_rows]
    used = {q.dimension_id for q in specs}
    dims = [
        DimensionSpec(id=i, code=c, name=n, sort_order=s, description=t)
        for i, c, n, s, t in dimension_rows
        if i in used
    ]
    return dims, specs


def generate_one(conn: psycopg.Connection[Any], rid: int) -> int:
    """(b): the report of record `rid` in one transaction; 1 if generated, else 0."""
    with conn.pipeline():
        read = conn.execute(READ_ONE, (rid,))
        questions = conn.execute(QUESTIONS)
        dimensions = conn.execute(DIMENSIONS)
        rows = read.fetchall()
        question_rows = questions.fetchall()
        dimension_rows = dimensions.fetchall()
    if not rows:  # not in status 3 (or deleted, or missing)
        conn.rollback()
        return 0
    dims, specs = questionnaire(question_rows, dimension_rows)
    active = {q.id for q in specs}
    report = score_answers(dims, specs, {q: v for q, v in rows if q in active})
    scores = report.dimensions
    with conn.pipeline():
        conn.execute(CLEAR_ONE, {"id": rid})
        conn.execute(
            INSERT_ONE,
            {
                "id": rid,
                "top": json.dumps(list(report.top_dimensions)),
                "summary": report.summary,
                "d": [s.dimension_id for s in scores],
                "raw": [s.raw_score for s in scores],
                "score": [s.score for s in scores],
                "rank": [s.rank for s in scores],
                "level": [s.level for s in scores],
            },
        )
        conn.commit()
    return 1


def generate_many(conn: psycopg.Connection[Any], ids: Sequence[int]) -> int:
    """(c): the reports of `ids` in one transaction; the number generated."""
    with conn.pipeline():
        read = conn.execute(READ_MANY, (list(ids),))
        questions = conn.execute(QUESTIONS)
        dimensions = conn.execute(DIMENSIONS)
        rows = read.fetchall()
        question_rows = questions.fetchall()
        dimension_rows = dimensions.fetchall()
    answers: dict[int, dict[int, int]] = {}
    for rid, qid, value in rows:
        answers.setdefault(rid, {})[qid] = value
    if not answers:
        conn.rollback()
        return 0
    dims, specs = questionnaire(question_rows, dimension_rows)
    active = {q.id for q in specs}
    ready = list(answers)
    columns: dict[str, list[Any]] = {k: [] for k in ("r", "d", "raw", "score", "rank", "level")}
    top: list[str] = []
    summary: list[str] = []
    for rid in ready:
        report = score_answers(dims, specs, {q: v for q, v in answers[rid].items() if q in active})
        for s in report.dimensions:
            columns["r"].append(rid)
            columns["d"].append(s.dimension_id)
            columns["raw"].append(s.raw_score)
            columns["score"].append(s.score)
            columns["rank"].append(s.rank)
            columns["level"].append(s.level)
        top.append(json.dumps(list(report.top_dimensions)))
        summary.append(report.summary)
    with conn.pipeline():
        conn.execute(CLEAR_MANY, {"ids": ready})
        conn.execute(INSERT_MANY, {"ids": ready, "top": top, "summary": summary, **columns})
        conn.commit()
    return len(ready)


def main() -> None:
    task = json.loads(sys.stdin.readline())
    ids: list[int] = task["ids"]
    threads: int = task["threads"]
    batch: int = task["batch"]
    url = normalize_database_url(task["database_url"]).replace("postgresql+psycopg://", "postgresql://")
    conns = [psycopg.connect(url, application_name="mi-bench-sql") for _ in range(threads)]
    done = [0] * threads
    work_queue: queue.SimpleQueue[list[int]] = queue.SimpleQueue()
    for start in range(0, len(ids), batch):
        work_queue.put(ids[start : start + batch])

    def work(index: int) -> None:
        conn = conns[index]
        while True:
            try:
                chunk = work_queue.get_nowait()
            except queue.Empty:
                return
            done[index] += generate_one(conn, chunk[0]) if batch == 1 else generate_many(conn, chunk)

    print("READY", flush=True)
    if sys.stdin.readline().strip() != "GO":
        raise SystemExit("parent gave up")
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    elapsed = time.perf_counter() - started
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    emit_result({"generated": sum(done), "seconds": elapsed, "cpu_s": cpu})
    sys.stdin.readline()  # EXIT
    for conn in conns:
        conn.close()


if __name__ == "__main__":
    main()
