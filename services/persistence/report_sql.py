"""The report aggregate's SQL (results, summary, the record's status 4): one set-based write path,
and the reads of a finished report (`ReportRepository`, `uow.reports`).

Every generation, of one record or of a group, runs these statements on psycopg directly,
inside the unit of work's transaction, in two pipelined round trips (an ORM path
makes 12 and spends most of a report's CPU building statements): `read` (lock the records,
read the questionnaire and the answers), then `write` (replace results and summaries, set
status 4, commit). A single record is the set of one id. Each text is the same for any
number of records (arrays and JSON documents, not lists of placeholders), so psycopg
prepares each once per connection. Written for the tables of services/persistence/models.py
(the schema test keeps those in step with the migrations).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import select

from services.domain.events import EventType
from services.domain.scoring import DimensionScore, ScoreReport
from services.domain.status import RecordStatus
from services.persistence.driver import Repository, Transactional, Work, pipelined
from services.persistence.models import Dimension, DimensionResult, ReportSummary

#: The latency of a report, read back by the write that completes it: from the moment the
#: record was last put into status 3 to its report. That is its submission, or its last
#: regeneration (which sets updated_at; nothing else changes a record in status 3), so a
#: report regenerated weeks later is not counted from its first submission; retries keep
#: the moment (they change nothing), so their waits count. `before` is the row as it was
#: before the UPDATE (a self-join: RETURNING sees only new values); NULL without a submission.
LATENCY_SQL = (
    "CASE WHEN before.submitted_at IS NULL THEN NULL ELSE"
    " EXTRACT(EPOCH FROM r.completed_at - GREATEST(before.submitted_at, before.updated_at)) END"
)

#: The records' locks. A group never waits (SKIP LOCKED: a record another transaction holds
#: is left out, its job runs alone and waits there), so it cannot be held up or deadlock; a
#: single record waits, and then sees what the other transaction left.
#: completed_at is read with them: a job that finds its record already in status 4 names
#: the report it found.
LOCK_SKIPPING = (
    "SELECT id, status, is_deleted, completed_at FROM assessment_records WHERE id = ANY(%s)"
    " ORDER BY id FOR UPDATE SKIP LOCKED"
)
LOCK_WAITING = (
    "SELECT id, status, is_deleted, completed_at FROM assessment_records WHERE id = ANY(%s)"
    " ORDER BY id FOR UPDATE"
)
# Which of the ids exist, locked or not (a plain read never waits): a record missing from
# the locked rows is either locked elsewhere or absent.
PRESENT = "SELECT id FROM assessment_records WHERE id = ANY(%s)"
#: The questionnaire as a generation reads it.
ACTIVE_QUESTIONS_SQL = "SELECT id, dimension_id, reverse_scored FROM questions WHERE is_active"
DIMENSIONS_SQL = "SELECT id, code, name, sort_order, description FROM dimensions ORDER BY sort_order, id"
# A record's answers as two arrays (one row per record, not per answer): psycopg's C loaders
# build the lists; a row per answer costs the worker ~0.02 ms per report in Python.
ANSWERS = (
    "SELECT record_id, array_agg(question_id), array_agg(value) FROM answers"
    " WHERE record_id = ANY(%s) GROUP BY record_id"
)
DELETE_RESULTS = "DELETE FROM dimension_results WHERE record_id = ANY(%s)"
DELETE_SUMMARIES = "DELETE FROM report_summaries WHERE record_id = ANY(%s)"
# The group's rows go as one JSON document each (json.dumps is C; psycopg adapts an array
# element by element in Python, the largest part of a group's parameters as arrays).
# Each JSON number is read back as the column's type exactly (a float's repr round-trips).
# Each row a JSON array, not an object: encoding 240 objects (a group of 30 records) cost the
# worker ~0.9 ms, the same rows as arrays ~0.35 ms.
INSERT_RESULTS = (
    "INSERT INTO dimension_results (record_id, dimension_id, raw_score, score, rank, level)"
    " SELECT (x->>0)::bigint, (x->>1)::smallint, (x->>2)::integer, (x->>3)::float8,"
    " (x->>4)::smallint, x->>5 FROM json_array_elements(%s::json) AS x"
)
INSERT_SUMMARIES = (
    "INSERT INTO report_summaries (record_id, top_dimensions, summary)"
    " SELECT r, t, s FROM json_to_recordset(%s::json) AS x(r bigint, t jsonb, s text)"
)
# clock_timestamp(), not now(): now() is when the transaction began, which for a generation
# that waited on a row lock is long before the report existed. updated_at = now() is what
# the model's onupdate wrote. It returns the latency (see LATENCY_SQL), so observing it
# costs no statement of its own. The same statement inserts each report's `report.generated`
# event (its time the report's completed_at, its data given per record): the event of a
# status change commits with it (services/usecases/change_events.py), so no process killed
# after the commit can lose it. Built from constants only (no input reaches it):
COMPLETE = (
    "WITH done AS (UPDATE assessment_records AS r"  # noqa: S608
    " SET status = %(status)s, completed_at = clock_timestamp(), updated_at = now()"
    " FROM assessment_records AS before WHERE r.id = ANY(%(ids)s) AND before.id = r.id"
    " RETURNING r.id, r.completed_at, " + LATENCY_SQL + " AS latency),"
    " logged AS (INSERT INTO event_log (id, occurred_at, event_type, record_id, actor, data)"
    " SELECT gen_random_uuid(), done.completed_at, %(event_type)s, done.id, %(actor)s, e.data"
    " FROM done JOIN json_to_recordset(%(events)s::json) AS e(r bigint, data jsonb) ON e.r = done.id)"
    " SELECT id, completed_at, latency FROM done"
)


@dataclass(frozen=True)
class ReportReads:
    """What one generation reads under its locks (`read`)."""

    #: id -> (status, is_deleted, completed_at) of each record locked.
    locked: dict[int, tuple[int, bool, datetime | None]]
    #: The ids that exist (locked here or elsewhere); only asked when not waiting for locks.
    existing: set[int]
    question_rows: list[tuple[Any, ...]]
    dimension_rows: list[tuple[Any, ...]]
    #: id -> {question id: value} of each record's answers.
    answers: dict[int, dict[int, int]]


def read(work: Transactional, record_ids: Sequence[int], *, wait_for_locks: bool) -> ReportReads:
    """Lock `record_ids` (sorted, unique) and read what their reports need: one round trip."""
    ids = list(record_ids)
    with pipelined(work) as conn:
        # The reads after the lock run once it is held (each statement takes a fresh snapshot).
        lock = conn.execute(LOCK_WAITING if wait_for_locks else LOCK_SKIPPING, (ids,))
        present = None if wait_for_locks else conn.execute(PRESENT, (ids,))
        questions = conn.execute(ACTIVE_QUESTIONS_SQL)
        dimensions = conn.execute(DIMENSIONS_SQL)
        answer_rows = conn.execute(ANSWERS, (ids,))
    # Read after the block: its end is the round trip (a read inside it would sync the pipeline
    # there, and the block's end would then cost a second, empty one).
    locked = {
        int(rid): (int(status), bool(deleted), completed)
        for rid, status, deleted, completed in lock.fetchall()
    }
    existing = set(locked) if present is None else {int(rid) for (rid,) in present.fetchall()}
    question_rows = [tuple(r) for r in questions.fetchall()]
    dimension_rows = [tuple(r) for r in dimensions.fetchall()]
    # dict(zip(...)) builds each record's answers in C: a comprehension of pairs costs ~4 % of a
    # worker's samples. A record's question ids are unique (the table's key).
    by_record = {
        int(rid): dict(zip(qids, values, strict=True)) for rid, qids, values in answer_rows.fetchall()
    }
    return ReportReads(locked, existing, question_rows, dimension_rows, by_record)


@dataclass(frozen=True)
class Completed:
    """What the write that completes a record's report reads back (`COMPLETE`'s RETURNING)."""

    #: The report's moment (the record's completed_at): it names the report's event.
    at: datetime
    #: Seconds since the record was last put into status 3 (LATENCY_SQL); None without a submission.
    latency_s: float | None


def write(
    work: Work,
    reports: dict[int, ScoreReport],
    *,
    event_data: Mapping[int, Mapping[str, object]],
    actor: str | None,
) -> dict[int, Completed]:
    """Replace the results and summaries of `reports`' records, set them to 4, insert their
    `report.generated` events (`actor`, `event_data[record id]`) and commit the unit of work's
    transaction: one round trip. Returns what each record's completion read back."""
    ids = list(reports)
    results = json.dumps(
        [
            (rid, s.dimension_id, s.raw_score, s.score, s.rank, s.level)
            for rid, report in reports.items()
            for s in report.dimensions
        ],
        ensure_ascii=False,
    )
    summaries = json.dumps(
        [{"r": rid, "t": list(r.top_dimensions), "s": r.summary} for rid, r in reports.items()],
        ensure_ascii=False,
    )
    with pipelined(work) as conn:
        # Delete-then-insert keeps a regeneration from leaving rows of an older questionnaire.
        conn.execute(DELETE_RESULTS, (ids,))
        conn.execute(DELETE_SUMMARIES, (ids,))
        conn.execute(INSERT_RESULTS, (results,))
        conn.execute(INSERT_SUMMARIES, (summaries,))
        completed = conn.execute(
            COMPLETE,
            {
                "status": RecordStatus.COMPLETED,
                "ids": ids,
                "event_type": EventType.REPORT_GENERATED.value,
                "actor": actor,
                "events": json.dumps(
                    [{"r": rid, "data": dict(event_data.get(rid, {}))} for rid in ids], ensure_ascii=False
                ),
            },
        )
        # Queued in the same round trip as the writes (psycopg syncs the pipeline here). The
        # driver's commit, not the unit of work's: a session would hand the connection back to
        # the pool while its pipeline is still open, and another thread could take it and
        # send its own statements through this pipeline (found by the soak: "cannot exit
        # pipeline mode while busy" here, "can't change 'autocommit' now" there).
        conn.commit()
    # Committed already: no round trip (psycopg skips a COMMIT when no transaction is open).
    work.commit()
    return {int(rid): Completed(at, latency_seconds(latency)) for rid, at, latency in completed.fetchall()}


def latency_seconds(value: object) -> float | None:
    """A `COMPLETE` RETURNING latency (epoch seconds, numeric or NULL) as seconds."""
    return None if value is None else max(0.0, float(cast("float", value)))


class ReportRepository(Repository):
    """A finished report's rows, on the unit of work's session (`uow.reports`)."""

    def scores(self, record_id: int) -> list[DimensionScore]:
        """The record's `dimension_results` with their dimensions' code and name, by rank."""
        rows = self.session.execute(
            select(
                DimensionResult.dimension_id,
                Dimension.code,
                Dimension.name,
                DimensionResult.raw_score,
                DimensionResult.score,
                DimensionResult.rank,
                DimensionResult.level,
            )
            .join(Dimension, DimensionResult.dimension_id == Dimension.id)
            .where(DimensionResult.record_id == record_id)
            .order_by(DimensionResult.rank, Dimension.sort_order)
        ).all()
        return [
            DimensionScore(
                code=code, name=name, raw_score=raw, score=score, rank=rank, level=level, dimension_id=did
            )
            for did, code, name, raw, score, rank, level in rows
        ]

    def summary(self, record_id: int) -> ReportSummary | None:
        return self.session.get(ReportSummary, record_id)
