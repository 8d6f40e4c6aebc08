"""The assessment record aggregate's SQL: a record, its status and its answers.

`RecordRepository` is what the use cases reach through the unit of work (`uow.records`),
on the unit of work's session and so inside its transaction; it commits nothing. Each
method is one or a few statements, set-based where it takes many ids (an id array, so
a thousand ids cost the statements of one).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from sqlalchemy import BigInteger, ColumnElement, any_, bindparam, delete, func, select, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import InstrumentedAttribute

from services.domain.events import EventType, user_actor
from services.domain.saved_answers import MergedAnswers, from_epoch_ms
from services.domain.status import RecordStatus
from services.persistence.driver import Repository, statements
from services.persistence.event_writes import change_logged
from services.persistence.models import (
    Answer,
    AssessmentRecord,
    Dimension,
    DimensionResult,
    Question,
    ReportSummary,
)
from services.persistence.questions import ACTIVE_IDS


def any_id(column: InstrumentedAttribute[int], ids: Sequence[int]) -> ColumnElement[bool]:
    """``column = ANY(:ids)``: one array parameter, whatever the number of ids."""
    return column == any_(bindparam(None, list(ids), type_=ARRAY(BigInteger)))


class RecordRow(NamedTuple):
    """A record's fields as the user's side reads them (a plain row: no ORM identity map)."""

    id: int
    user_id: int
    status: int
    created_at: datetime
    started_at: datetime | None
    submitted_at: datetime | None
    completed_at: datetime | None
    current_question_id: int | None

    @classmethod
    def of(cls, record: AssessmentRecord) -> RecordRow:
        return cls(
            record.id,
            record.user_id,
            record.status,
            record.created_at,
            record.started_at,
            record.submitted_at,
            record.completed_at,
            record.current_question_id,
        )


# The user's side runs these on every request of a submission: plain SQL on psycopg
# (services/persistence/driver.py), no statement building or row processing in Python (the
# ORM's statements cost about twice their CPU in the web tier); a call of several statements
# pipelined, one round trip with its BEGIN.
_COLUMNS = "id, user_id, status, created_at, started_at, submitted_at, completed_at, current_question_id"
_OWN = (
    f"SELECT {_COLUMNS} FROM assessment_records"  # noqa: S608
    " WHERE id = %(id)s AND user_id = %(user)s AND NOT is_deleted"
)
_OWN_LOCKED = _OWN + " FOR UPDATE"
# A record's creation and start write their event (record.created, record.started) in their one
# statement: it commits with the change, in the change's round trip.
_ADD = (
    "WITH added AS (INSERT INTO assessment_records (user_id, status, is_deleted)"  # noqa: S608
    f" VALUES (%(user)s, 1, false) RETURNING {_COLUMNS}),"
    f" logged AS ({change_logged(EventType.RECORD_CREATED, 'added')})"
    " SELECT * FROM added"
)
# From 1 only, and the record as it then is, in one statement: the started row, or, when none
# was started, the row as it stands. That read locks it (FOR SHARE) because the statement's
# snapshot is older than a concurrent start that made this one's UPDATE find status 2: a locking
# read waits for that start's commit and returns its row (PostgreSQL re-reads a row updated
# meanwhile, in READ COMMITTED), where a plain read would return the status 1 it replaced.
# Its event is logged for a record it leaves in 2, started now or before (a start repeated).
_START = (
    "WITH started AS ("  # noqa: S608 (_COLUMNS is a constant)
    " UPDATE assessment_records SET status = 2, started_at = now(), updated_at = now()"
    " WHERE id = %(id)s AND user_id = %(user)s AND NOT is_deleted AND status = 1"
    f" RETURNING {_COLUMNS}),"
    f" current AS (SELECT {_COLUMNS} FROM assessment_records"
    " WHERE id = %(id)s AND user_id = %(user)s AND NOT is_deleted"
    " AND NOT EXISTS (SELECT FROM started) FOR SHARE),"
    " record AS (SELECT * FROM started UNION ALL SELECT * FROM current),"
    f" logged AS ({change_logged(EventType.RECORD_STARTED, 'record WHERE status = 2')})"
    " SELECT * FROM record"
)
# A submission's record locked, with the transaction's time (what now() writes in every statement
# of it: submitted_at) and the active questions' ids, in one statement. Read with the statement's
# snapshot, as a read of its own before the lock would be: no question changes under a record's
# lock, so reading them after it (a statement of their own) would tell nothing more.
_SUBMISSION_RECORD = (
    f"SELECT {_COLUMNS}, now(), ARRAY({ACTIVE_IDS})"  # noqa: S608
    " FROM assessment_records WHERE id = %(id)s AND user_id = %(user)s AND NOT is_deleted FOR UPDATE"
)
_STORED_ANSWERS = "SELECT question_id, value, answered_at FROM answers WHERE record_id = %(id)s"
_DELETE_ANSWERS = "DELETE FROM answers WHERE record_id = %(id)s"
_INSERT_ANSWERS = (
    "INSERT INTO answers (record_id, question_id, value, answered_at)"
    " SELECT %(id)s, q, v, COALESCE(t, now())"
    " FROM unnest(CAST(%(questions)s AS integer[]), CAST(%(values)s AS smallint[]),"
    " CAST(%(times)s AS timestamptz[])) AS a(q, v, t)"
)
_SUBMIT = (
    "UPDATE assessment_records SET status = 3, submitted_at = now(), answered_count = %(count)s,"
    " last_activity_at = now(), updated_at = now(),"
    # No earlier than the latest autosave included (GREATEST skips a NULL latest).
    " progress_updated_at = GREATEST(COALESCE(progress_updated_at, now()), now(),"
    " CAST(%(latest)s AS timestamptz))"
    " WHERE id = %(id)s"
)


def array_literal(items: Sequence[int | datetime | None]) -> str:
    """A PostgreSQL array literal of integers, aware datetimes and NULLs, sent as one text
    parameter (cast by the statement): psycopg would dump a list item by item in Python. An
    aware datetime's ISO form has no space, comma, quote or brace to escape."""
    return "{" + ",".join(_element(item) for item in items) + "}"


def _element(item: int | datetime | None) -> str:
    if item is None:
        return "NULL"
    if isinstance(item, datetime):
        if item.tzinfo is None:
            raise ValueError("a naive datetime has no place in a timestamptz array")
        return item.isoformat()
    return str(int(item))


class SubmissionReads(NamedTuple):
    """What a submission reads before it writes (`RecordRepository.submission_reads`)."""

    #: The caller's live record, locked.
    record: RecordRow
    active_ids: list[int]
    #: The record's stored answers (question id -> (value, answered_at)), when asked for.
    stored: dict[int, tuple[int, datetime]] | None
    #: The transaction's time: the submission's (`submitted_at`) and its event's.
    now: datetime


class RecordRepository(Repository):
    # -- a user's records ---------------------------------------------------------------

    def own(self, user_id: int, record_id: int, *, lock: bool = False) -> RecordRow | None:
        """The live record `record_id` of `user_id`, optionally row-locked."""
        with statements(self._work, pipeline=False) as conn:
            cursor = conn.execute(_OWN_LOCKED if lock else _OWN, {"id": record_id, "user": user_id})
        row = cursor.fetchone()
        return None if row is None else RecordRow(*row)

    def add(self, user_id: int) -> RecordRow:
        """A new record of `user_id` in status 1, as written (its id and created_at the database's),
        and its `record.created` event by the user, at created_at."""
        with statements(self._work, pipeline=False) as conn:
            cursor = conn.execute(_ADD, {"user": user_id, "actor": user_actor(user_id)})
        return RecordRow(*cursor.fetchall()[0])

    def start_own(self, user_id: int, record_id: int) -> RecordRow | None:
        """Start the live record `record_id` of `user_id` if it is in 1 (status 2, started_at from
        the database clock, like created_at); the record as it then is (None if no such record).
        A record left in 2 gets a `record.started` event by the user, at the statement's time.
        One statement: one round trip, in autocommit or in a transaction."""
        with statements(self._work, pipeline=False) as conn:
            cursor = conn.execute(_START, {"id": record_id, "user": user_id, "actor": user_actor(user_id)})
        row = cursor.fetchone()
        return None if row is None else RecordRow(*row)

    def submission_reads(self, user_id: int, record_id: int, *, stored: bool) -> SubmissionReads | None:
        """The record locked, the transaction's time, the active questions and the record's stored
        answers if `stored`: one round trip. None if the caller has no such live record."""
        key = {"id": record_id, "user": user_id}
        with statements(self._work) as conn:
            locked = conn.execute(_SUBMISSION_RECORD, key)
            # After the lock (each statement takes a fresh snapshot): what a save committed while
            # this one waited for the record is read.
            answers = conn.execute(_STORED_ANSWERS, key) if stored else None
        row = locked.fetchone()
        stored_rows = None if answers is None else answers.fetchall()
        if row is None:
            return None
        *record, clock, active_ids = row
        return SubmissionReads(
            record=RecordRow(*record),
            active_ids=list(active_ids),
            stored=None if stored_rows is None else {qid: (v, at) for qid, v, at in stored_rows},
            now=clock,
        )

    def user_page(self, user_id: int, cursor: int | None, size: int) -> tuple[list[RecordRow], int]:
        """Up to `size` + 1 live records of the user older than `cursor`, newest first (the extra
        one tells a next page exists without a second query), and how many live records they have."""
        live = (AssessmentRecord.user_id == user_id, AssessmentRecord.is_deleted.is_(False))
        stmt = select(AssessmentRecord).where(*live)
        if cursor is not None:
            stmt = stmt.where(AssessmentRecord.id < cursor)
        records = self.session.scalars(stmt.order_by(AssessmentRecord.id.desc()).limit(size + 1)).all()
        total = self.session.scalar(select(func.count()).select_from(AssessmentRecord).where(*live)) or 0
        return [RecordRow.of(r) for r in records], int(total)

    # -- answers ------------------------------------------------------------------------

    def stored_answers(self, record_id: int) -> dict[int, tuple[int, datetime]]:
        """The record's stored answers: question id -> (value, answered_at)."""
        with statements(self._work, pipeline=False) as conn:
            cursor = conn.execute(_STORED_ANSWERS, {"id": record_id})
        return {qid: (value, at) for qid, value, at in cursor.fetchall()}

    def store_submission(self, record_id: int, merged: MergedAnswers) -> None:
        """Replace the record's answers, set status 3 (`submitted_at`: the transaction's time) and
        its final progress.

        Three statements whatever the number of answers (the rows go as three arrays), one round
        trip, or none of their own inside the unit of work's `batch`."""
        questions = list(merged.values)
        # The final progress state, stamped no earlier than the autosaves it includes, so a
        # progress state of those saves still in Redis cannot overwrite it (services/persistence/progress.py).
        latest = None if merged.latest_saved_ms is None else from_epoch_ms(merged.latest_saved_ms)
        with statements(self._work) as conn:
            # Replace, not merge: a resubmission (status 2 after a failed attempt) leaves no stale rows.
            conn.execute(_DELETE_ANSWERS, {"id": record_id})
            conn.execute(
                _INSERT_ANSWERS,
                {
                    "id": record_id,
                    "questions": array_literal(questions),
                    "values": array_literal([merged.values[q] for q in questions]),
                    # None: answered now (in the body); else when it was stored or autosaved.
                    "times": array_literal([merged.answered_at.get(q) for q in questions]),
                },
            )
            conn.execute(_SUBMIT, {"id": record_id, "count": len(merged.values), "latest": latest})

    # -- the admin's side ---------------------------------------------------------------

    def admin_page(
        self, conditions: Sequence[ColumnElement[bool]], offset: int, limit: int
    ) -> tuple[list[AssessmentRecord], int]:
        """A page of the records matching `conditions` (see `admin_conditions`), newest first, and
        how many match."""
        total = (
            self.session.scalar(select(func.count()).select_from(AssessmentRecord).where(*conditions)) or 0
        )
        records = self.session.scalars(
            select(AssessmentRecord)
            .where(*conditions)
            .order_by(AssessmentRecord.id.desc())
            .offset(offset)
            .limit(limit)
        ).all()
        return list(records), int(total)

    @staticmethod
    def admin_conditions(
        *,
        status: int | None,
        user_id: int | None,
        include_deleted: bool,
        created_from: datetime | None,
        created_to: datetime | None,
    ) -> list[ColumnElement[bool]]:
        """The WHERE of the admin's record list (values already checked by the use case)."""
        conditions: list[ColumnElement[bool]] = []
        if status is not None:
            conditions.append(AssessmentRecord.status == status)
        if user_id is not None:
            conditions.append(AssessmentRecord.user_id == user_id)
        if not include_deleted:
            conditions.append(AssessmentRecord.is_deleted.is_(False))
        if created_from:
            conditions.append(AssessmentRecord.created_at >= created_from)
        if created_to:
            conditions.append(AssessmentRecord.created_at < created_to)
        return conditions

    def lock_live_status(self, record_id: int) -> int | None:
        """The status of the live record, row-locked; None when missing or soft-deleted."""
        status: int | None = self.session.execute(
            select(AssessmentRecord.status)
            .where(AssessmentRecord.id == record_id, AssessmentRecord.is_deleted.is_(False))
            .with_for_update()
        ).scalar_one_or_none()
        return status

    def lock_live_statuses(self, record_ids: Sequence[int]) -> dict[int, int]:
        """Each live record's status, row-locked in id order (concurrent batches cannot deadlock)."""
        rows = self.session.execute(
            select(AssessmentRecord.id, AssessmentRecord.status)
            .where(any_id(AssessmentRecord.id, record_ids), AssessmentRecord.is_deleted.is_(False))
            .order_by(AssessmentRecord.id)
            .with_for_update()
        ).all()
        return {row.id: row.status for row in rows}

    def reset_for_regeneration(self, ids: Sequence[int]) -> datetime:
        """Status 3, no completion time, no results, no summary: set-based, one statement each.
        The reset's moment: the database's clock once the rows are locked (clock_timestamp(),
        as a report's completed_at), so a report made after it is always later."""
        stamp = (
            self.session.execute(
                update(AssessmentRecord)
                .where(any_id(AssessmentRecord.id, ids))
                .values(status=RecordStatus.GENERATING, completed_at=None)
                .returning(func.clock_timestamp())
                .execution_options(synchronize_session=False)
            )
            .scalars()
            .first()
        )
        self.session.execute(delete(DimensionResult).where(any_id(DimensionResult.record_id, ids)))
        self.session.execute(delete(ReportSummary).where(any_id(ReportSummary.record_id, ids)))
        return stamp or datetime.now(UTC)

    def soft_delete(self, record_id: int) -> datetime | None:
        """Mark the live record deleted; the transaction's time, or None when missing or already deleted."""
        return self.session.execute(
            update(AssessmentRecord)
            .where(AssessmentRecord.id == record_id, AssessmentRecord.is_deleted.is_(False))
            .values(is_deleted=True)
            .returning(func.now())
            .execution_options(synchronize_session=False)
        ).scalar_one_or_none()

    # -- one record whoever owns it, and its owner's check ------------------------------

    def get(self, record_id: int) -> AssessmentRecord | None:
        return self.session.get(AssessmentRecord, record_id)

    def owner_and_status(self, record_id: int) -> tuple[int, int, bool] | None:
        """(user id, status, soft-deleted) of the record: one SELECT by primary key."""
        row = self.session.execute(
            select(AssessmentRecord.user_id, AssessmentRecord.status, AssessmentRecord.is_deleted).where(
                AssessmentRecord.id == record_id
            )
        ).one_or_none()
        return None if row is None else (int(row.user_id), int(row.status), bool(row.is_deleted))

    def generating_among(self, record_ids: Sequence[int]) -> set[int]:
        """The ids of live records in status 3 (being generated) among `record_ids`: one SELECT."""
        if not record_ids:
            return set()
        rows = self.session.execute(
            select(AssessmentRecord.id).where(
                any_id(AssessmentRecord.id, record_ids),
                AssessmentRecord.status == int(RecordStatus.GENERATING),
                AssessmentRecord.is_deleted.is_(False),
            )
        ).scalars()
        return {int(rid) for rid in rows}

    def answer_lines(self, record_id: int) -> list[tuple[int, int, str, str, int, datetime]]:
        """(question id, order, dimension name, text, value, answered_at) of the record's answers."""
        rows = self.session.execute(
            select(
                Question.id,
                Question.sort_order,
                Dimension.name,
                Question.text,
                Answer.value,
                Answer.answered_at,
            )
            .join(Question, Answer.question_id == Question.id)
            .join(Dimension, Question.dimension_id == Dimension.id)
            .where(Answer.record_id == record_id)
            .order_by(Question.sort_order, Question.id)
        ).all()
        return [(qid, order, dim, text, value, at) for qid, order, dim, text, value, at in rows]

    # -- the reconciler's -----------------------------------------------------------------

    def owed(self, *, grace_ms: int, after_id: int, limit: int) -> list[tuple[int, datetime]]:
        """(id, updated_at) of the records in status 3, not deleted, unchanged for `grace_ms`, with
        id > `after_id`, by id: the partial index `ix_assessment_records_generating` serves it."""
        rows = self.session.execute(
            select(AssessmentRecord.id, AssessmentRecord.updated_at)
            .where(
                AssessmentRecord.status == RecordStatus.GENERATING,
                AssessmentRecord.is_deleted.is_(False),
                AssessmentRecord.id > after_id,
                AssessmentRecord.updated_at < func.now() - timedelta(milliseconds=grace_ms),
            )
            .order_by(AssessmentRecord.id)
            .limit(limit)
        ).all()
        return [(int(row.id), row.updated_at) for row in rows]

    def fail_unless_changed(self, ids: Sequence[int], stamps: Sequence[datetime]) -> list[int]:
        """Set each record from 3 to 5 if its updated_at is still `stamps`' one; the ids changed."""
        pairs = (
            select(
                func.unnest(bindparam("ids", list(ids))).label("id"),
                func.unnest(bindparam("stamps", list(stamps))).label("stamp"),
            )
        ).subquery("v")
        return list(
            self.session.scalars(
                update(AssessmentRecord)
                .where(
                    AssessmentRecord.id == pairs.c.id,
                    AssessmentRecord.updated_at == pairs.c.stamp,
                    AssessmentRecord.status == RecordStatus.GENERATING,
                )
                .values(status=RecordStatus.FAILED)
                .returning(AssessmentRecord.id)
                .execution_options(synchronize_session=False)
            ).all()
        )

    # -- the admin tasks' scope -------------------------------------------------------------

    @staticmethod
    def match_conditions(
        status: int, submitted_from: datetime | None, submitted_to: datetime | None, user_id: int | None
    ) -> list[ColumnElement[bool]]:
        """The live records of `status`, submitted in [from, to), of `user_id` when given."""
        r = AssessmentRecord
        conditions = [r.status == status, r.is_deleted.is_(False)]
        if user_id is not None:
            conditions.append(r.user_id == user_id)
        if submitted_from is not None:
            conditions.append(r.submitted_at >= submitted_from)
        if submitted_to is not None:
            conditions.append(r.submitted_at < submitted_to)
        return conditions

    def count_matching(self, conditions: Sequence[ColumnElement[bool]], timeout_ms: int) -> tuple[int, int]:
        """(the largest id now, the records matching `conditions` up to it), the transaction's
        statements cancelled after `timeout_ms` (a DBAPIError with SQLSTATE 57014 then)."""
        self.session.execute(select(func.set_config("statement_timeout", str(timeout_ms), True)))
        max_id = self.session.scalar(select(func.coalesce(func.max(AssessmentRecord.id), 0))) or 0
        matched = (
            self.session.scalar(
                select(func.count())
                .select_from(AssessmentRecord)
                .where(AssessmentRecord.id <= max_id, *conditions)
            )
            or 0
        )
        return int(max_id), int(matched)

    def matching_page(
        self, conditions: Sequence[ColumnElement[bool]], after_id: int, up_to_id: int, limit: int
    ) -> list[int]:
        """The ids matching `conditions` in (after_id, up_to_id], by id, at most `limit`."""
        return list(
            self.session.scalars(
                select(AssessmentRecord.id)
                .where(AssessmentRecord.id > after_id, AssessmentRecord.id <= up_to_id, *conditions)
                .order_by(AssessmentRecord.id)
                .limit(limit)
            )
        )

    def fail_generating(self, record_id: int) -> bool:
        """Set the record from 3 to 5 (生成失败); False when it was not in 3."""
        changed = self.session.execute(
            update(AssessmentRecord)
            .where(AssessmentRecord.id == record_id, AssessmentRecord.status == RecordStatus.GENERATING)
            .values(status=RecordStatus.FAILED)
            .returning(AssessmentRecord.id)
            .execution_options(synchronize_session=False)
        ).scalar_one_or_none()
        return changed is not None
