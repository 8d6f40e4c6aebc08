"""Child of `bench.generation_limit`: report generation as a plain psycopg loop, no ORM, no queue.

    python -m bench.sql_generate      (reads its task as one JSON line on stdin)

The floor the pipeline is compared with: the same work per record as
`services.usecases.reports.generate_report` (lock the record and check its status, read the active
questions, the dimensions and the answers, score with `services.domain.scoring`, replace the results
and the summary, set status 4, commit), written by hand in as few round trips as psycopg's
pipeline mode allows: one for the reads, one for the writes and the commit. With `batch` > 1
a transaction handles that many records at once (set-based statements over id arrays).
Its SQL is its own on purpose, not services/persistence/report_sql.py's: the baseline is what a
hand-written loop costs, whatever the product's path becomes.

Protocol with the parent: task line in, `READY` out once every connection is open, `GO` in,
the result line (`BENCH-RESULT {...}`) out, then `EXIT` in (the parent samples the
PostgreSQL backends' CPU while they still exist).
"""

from __future__ import annotations

import json
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

LOCK_ONE = "SELECT status, is_deleted FROM assessment_records WHERE id = %s FOR UPDATE"
LOCK_MANY = "SELECT id, status, is_deleted FROM assessment_records WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
QUESTIONS = "SELECT id, dimension_id, reverse_scored FROM questions WHERE is_active"
DIMENSIONS = "SELECT id, code, name, sort_order, description FROM dimensions ORDER BY sort_order, id"
ANSWERS = "SELECT record_id, question_id, value FROM answers WHERE record_id = ANY(%s)"
DELETE_RESULTS = "DELETE FROM dimension_results WHERE record_id = ANY(%s)"
DELETE_SUMMARIES = "DELETE FROM report_summaries WHERE record_id = ANY(%s)"
INSERT_RESULTS = (
    "INSERT INTO dimension_results (record_id, dimension_id, raw_score, score, rank, level)"
    " SELECT * FROM unnest(%s::bigint[], %s::smallint[], %s::int[], %s::float8[], %s::smallint[], %s::text[])"
)
INSERT_SUMMARIES = (
    "INSERT INTO report_summaries (record_id, top_dimensions, summary)"
    " SELECT r, t::jsonb, s FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS x(r, t, s)"
)
COMPLETE = (
    "UPDATE assessment_records SET status = 4, completed_at = clock_timestamp(), updated_at = now()"
    " WHERE id = ANY(%s)"
)


def generate(conn: psycopg.Connection[Any], ids: Sequence[int]) -> int:
    """Generate the reports of `ids` in one transaction; the number generated."""
    ids = list(ids)
    with conn.pipeline():
        lock = conn.execute(LOCK_ONE if len(ids) == 1 else LOCK_MANY, (ids[0],) if len(ids) == 1 else (ids,))
        questions = conn.execute(QUESTIONS)
        dimensions = conn.execute(DIMENSIONS)
        answers = conn.execute(ANSWERS, (ids,))
        lock_rows = lock.fetchall()
        question_rows = questions.fetchall()
        dimension_rows = dimensions.fetchall()
        answer_rows = answers.fetchall()
    if len(ids) == 1:
        ready = [ids[0]] if lock_rows and lock_rows[0][0] == 3 and not lock_rows[0][1] else []
    else:
        ready = [rid for rid, status, deleted in lock_rows if status == 3 and not deleted]
    if not ready:
        conn.rollback()
        return 0
    specs = [QuestionSpec(id=q, dimension_id=d, reverse_scored=r) for q, d, r in question_rows]
    used = {q.dimension_id for q in specs}
    dims = [
        DimensionSpec(id=i, code=c, name=n, sort_order=s, description=t)
        for i, c, n, s, t in dimension_rows
        if i in used
    ]
    active = {q.id for q in specs}
    by_record: dict[int, dict[int, int]] = {rid: {} for rid in ready}
    for rid, qid, value in answer_rows:
        if rid in by_record and qid in active:
            by_record[rid][qid] = value
    results: list[list[Any]] = [[], [], [], [], [], []]
    summaries: list[list[Any]] = [[], [], []]
    for rid in ready:
        report = score_answers(dims, specs, by_record[rid])
        for s in report.dimensions:
            for column, value in zip(
                results, (rid, s.dimension_id, s.raw_score, s.score, s.rank, s.level), strict=True
            ):
                column.append(value)
        summaries[0].append(rid)
        summaries[1].append(json.dumps(list(report.top_dimensions)))
        summaries[2].append(report.summary)
    with conn.pipeline():
        conn.execute(DELETE_RESULTS, (ready,))
        conn.execute(DELETE_SUMMARIES, (ready,))
        conn.execute(INSERT_RESULTS, results)
        conn.execute(INSERT_SUMMARIES, summaries)
        conn.execute(COMPLETE, (ready,))
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

    def work(index: int) -> None:
        mine = ids[index::threads]
        for start in range(0, len(mine), batch):
            done[index] += generate(conns[index], mine[start : start + batch])

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
