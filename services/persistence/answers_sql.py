"""The answers aggregate's bulk write: autosaved answers upserted for the records still in status 2.

The hot path's answer flusher (hotpath/answers_flusher.py) calls `persist_autosaved`; the
upsert replaces a stored answer only by a later one (save times), so a late flush never
overwrites newer data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import bindparam, select, text
from sqlalchemy.orm import Session

from services.domain.saved_answers import SavedAnswer, from_epoch_ms
from services.domain.status import RecordStatus
from services.persistence.isolation import write_isolating
from services.persistence.models import AssessmentRecord


@dataclass(frozen=True)
class PersistResult:
    #: Records found in status 2 and not deleted (their answers were written); the others
    #: can never take these answers.
    live: frozenset[int]
    #: Rows inserted or updated.
    written: int
    #: (record id, question id) of the answers the database refused (data errors).
    refused: tuple[tuple[int, int], ...] = ()


_LOCK_LIVE = (
    select(AssessmentRecord.id)
    .where(
        AssessmentRecord.id.in_(bindparam("ids", expanding=True)),
        AssessmentRecord.status == RecordStatus.IN_PROGRESS,
        AssessmentRecord.is_deleted.is_(False),
    )
    .order_by(AssessmentRecord.id)
    .with_for_update(read=True)
)

_UPSERT = text(
    """
    INSERT INTO answers (record_id, question_id, value, answered_at)
    SELECT v.record_id, v.question_id, v.value, v.answered_at
    FROM unnest(CAST(:records AS bigint[]), CAST(:questions AS integer[]),
                CAST(:vals AS smallint[]), CAST(:times AS timestamptz[]))
         AS v(record_id, question_id, value, answered_at)
    JOIN questions q ON q.id = v.question_id AND q.is_active
    ON CONFLICT (record_id, question_id) DO UPDATE
        SET value = EXCLUDED.value, answered_at = EXCLUDED.answered_at
        WHERE answers.answered_at < EXCLUDED.answered_at
    """
)


def persist_autosaved(session: Session, answers: Mapping[int, Mapping[int, SavedAnswer]]) -> PersistResult:
    """Upsert autosaved answers of many records in two statements; the caller commits.

    Only records still in status 2 (and not deleted) are written: they are share-locked
    first, in id order, so a submission (which locks its record FOR UPDATE) either
    finishes before and the record is skipped, or waits for this transaction and then
    reads what it wrote. A submitted record is never overwritten by stale autosave
    data. Answers to unknown or inactive questions are skipped; a stored answer is only
    replaced by a later one (answered_at). Answers the database refuses for a data
    reason are left out and listed in `PersistResult.refused` (services/persistence/isolation.py);
    any other error propagates.
    """
    if not answers:
        return PersistResult(frozenset(), 0)
    live = frozenset(session.scalars(_LOCK_LIVE, {"ids": sorted(answers)}).all())
    rows = [
        (record_id, qid, saved.value, from_epoch_ms(saved.saved_ms))
        for record_id, by_question in answers.items()
        if record_id in live
        for qid, saved in by_question.items()
    ]
    if not rows:
        return PersistResult(live, 0)
    written, refused = write_isolating(session, rows, _upsert)
    return PersistResult(live, written, tuple((r[0], r[1]) for r in refused))


def _upsert(session: Session, rows: Sequence[tuple[int, int, int, datetime]]) -> int:
    result = session.execute(
        _UPSERT,
        {
            "records": [r[0] for r in rows],
            "questions": [r[1] for r in rows],
            "vals": [r[2] for r in rows],
            "times": [r[3] for r in rows],
        },
    )
    return int(getattr(result, "rowcount", 0) or 0)


#: Latest save time a hash may carry: 9999-12-31T23:59:59.999Z, the last a datetime holds.
