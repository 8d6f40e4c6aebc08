"""Progress of an assessment (current question, answered count, last activity), Redis first.

Each autosave also updates the record's progress state in Redis, stamped with a
LastUpdateTime (ms, strictly increasing per record); a background flusher syncs the
states of many records with `sync_progress`. As in the original system a cached state
that is older than, or as old as, what the database holds is skipped, but the guard is
in the UPDATE itself, so no read-then-write race can let an old state win.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import bindparam, select, text
from sqlalchemy.orm import Session

from services.autosave import from_epoch_ms
from services.models import AssessmentRecord


@dataclass(frozen=True)
class ProgressState:
    record_id: int
    current_question_id: int | None
    answered_count: int
    last_activity_ms: int
    #: LastUpdateTime: the version of this state (Unix ms).
    updated_ms: int


_LOCK_ROWS = (
    select(AssessmentRecord.id)
    .where(AssessmentRecord.id.in_(bindparam("ids", expanding=True)))
    .order_by(AssessmentRecord.id)
    .with_for_update(key_share=True)
)

_GUARDED_UPDATE = text(
    """
    UPDATE assessment_records AS r
    SET current_question_id = v.current_question_id,
        answered_count = v.answered_count,
        last_activity_at = v.last_activity_at,
        progress_updated_at = v.updated_at
    FROM unnest(CAST(:ids AS bigint[]), CAST(:questions AS integer[]), CAST(:counts AS integer[]),
                CAST(:activity AS timestamptz[]), CAST(:updated AS timestamptz[]))
         AS v(id, current_question_id, answered_count, last_activity_at, updated_at)
    WHERE r.id = v.id
      AND (r.progress_updated_at IS NULL OR r.progress_updated_at < v.updated_at)
    """
)


def sync_progress(session: Session, states: Sequence[ProgressState]) -> int:
    """Write the states newer than the database's; the number of records updated.

    One state per record (the newest wins if several are given). The rows are locked in
    id order first (FOR NO KEY UPDATE, what the UPDATE takes anyway), so this never
    deadlocks with the answer flusher or a batch regeneration, which lock in id order
    too. The caller commits.
    """
    newest: dict[int, ProgressState] = {}
    for state in states:
        known = newest.get(state.record_id)
        if known is None or state.updated_ms > known.updated_ms:
            newest[state.record_id] = state
    if not newest:
        return 0
    session.execute(_LOCK_ROWS, {"ids": sorted(newest)}).all()
    ordered = [newest[i] for i in sorted(newest)]
    result = session.execute(
        _GUARDED_UPDATE,
        {
            "ids": [s.record_id for s in ordered],
            "questions": [s.current_question_id for s in ordered],
            "counts": [s.answered_count for s in ordered],
            "activity": [from_epoch_ms(s.last_activity_ms) for s in ordered],
            "updated": [from_epoch_ms(s.updated_ms) for s in ordered],
        },
    )
    return int(getattr(result, "rowcount", 0) or 0)


def parse_state(record_id: int, raw: Mapping[bytes, bytes]) -> ProgressState | None:
    """Decode a progress hash {q, n, a, t}; None when it is empty or malformed."""
    try:
        fields = {k.decode(): v.decode() for k, v in raw.items()}
        question = int(fields["q"]) if fields.get("q") else None
        state = ProgressState(
            record_id=record_id,
            current_question_id=question,
            answered_count=int(fields["n"]),
            last_activity_ms=int(fields["a"]),
            updated_ms=int(fields["t"]),
        )
    except (KeyError, ValueError, UnicodeDecodeError):
        return None
    if state.updated_ms <= 0 or state.answered_count < 0 or not 0 <= (question or 0) <= 2**31 - 1:
        return None
    return state
