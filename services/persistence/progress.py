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

from services.domain.saved_answers import MAX_SAVED_MS, from_epoch_ms, plain_int, raw_bytes
from services.persistence.isolation import write_isolating
from services.persistence.models import AssessmentRecord


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
    too. The caller commits. States the database refuses for a data reason are left
    out (see `sync_progress_isolating`).
    """
    return sync_progress_isolating(session, states)[0]


def sync_progress_isolating(
    session: Session, states: Sequence[ProgressState]
) -> tuple[int, list[ProgressState]]:
    """`sync_progress`, also returning the states the database refused (services/persistence/isolation.py)."""
    newest: dict[int, ProgressState] = {}
    for state in states:
        known = newest.get(state.record_id)
        if known is None or state.updated_ms > known.updated_ms:
            newest[state.record_id] = state
    if not newest:
        return 0, []
    session.execute(_LOCK_ROWS, {"ids": sorted(newest)}).all()
    ordered = [newest[i] for i in sorted(newest)]
    return write_isolating(session, ordered, _update)


def _update(session: Session, states: Sequence[ProgressState]) -> int:
    result = session.execute(
        _GUARDED_UPDATE,
        {
            "ids": [s.record_id for s in states],
            "questions": [s.current_question_id for s in states],
            "counts": [s.answered_count for s in states],
            "activity": [from_epoch_ms(s.last_activity_ms) for s in states],
            "updated": [from_epoch_ms(s.updated_ms) for s in states],
        },
    )
    return int(getattr(result, "rowcount", 0) or 0)


#: The fields of a progress hash (written by the autosave script).
STATE_FIELDS = (b"q", b"n", b"a", b"t")
MAX_INT4 = 2**31 - 1


def decode_state(
    record_id: int, raw: Mapping[bytes, bytes]
) -> tuple[ProgressState | None, list[tuple[bytes, bytes]]]:
    """Decode a progress hash {q, n, a, t} strictly: the state (None if there is none to
    write) and the fields to set aside, verbatim.

    A state with a missing or malformed field can never be written: all its fields are
    set aside. A field that is not part of a state is set aside alone.
    """
    fields = {raw_bytes(k): raw_bytes(v) for k, v in raw.items()}
    extra = [(k, v) for k, v in fields.items() if k not in STATE_FIELDS]
    known = {k: v for k, v in fields.items() if k in STATE_FIELDS}
    if not known:
        return None, extra
    question_raw = known.get(b"q", b"")
    question = plain_int(question_raw, 0, MAX_INT4) if question_raw else None
    count = plain_int(known.get(b"n", b""), 0, MAX_INT4)
    activity = plain_int(known.get(b"a", b""), 0, MAX_SAVED_MS)
    updated = plain_int(known.get(b"t", b""), 1, MAX_SAVED_MS)
    if (question_raw and question is None) or count is None or activity is None or updated is None:
        return None, sorted(fields.items())
    return ProgressState(record_id, question, count, activity, updated), extra


def parse_state(record_id: int, raw: Mapping[bytes, bytes]) -> ProgressState | None:
    """Decode a progress hash {q, n, a, t}; None when it is empty or malformed."""
    return decode_state(record_id, raw)[0]
