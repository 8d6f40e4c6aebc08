"""Completed records with chosen levels: answer sheets that score as a test wants.

`levelled_report(shift)` gives each dimension a score in a chosen level and the answers
that score exactly so; `levelled_record` plants a record in status 4 with those answers,
its results computed from them as generation computes them (tests/support/records.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from sqlalchemy import Engine, text

from services.domain.questionnaire import LEVELS, load_questionnaire
from services.domain.scoring import MAX_VALUE, MIN_VALUE, counted_value
from services.domain.status import RecordStatus
from tests.support.records import RecordSpec, insert_records

#: The highest score given in each level (services/domain/scoring.py's bands: 80, 60, 40); the
#: second dimension of a level scores 5 less, so that every rank is strict.
LEVEL_SCORES: dict[str, float] = dict(zip(LEVELS, (95.0, 75.0, 55.0, 30.0), strict=True))


class LevelledReport(NamedTuple):
    #: Score by dimension code, as generation computes it from `answers`.
    scores: dict[str, float]
    #: Level by dimension code.
    levels: dict[str, str]
    #: {question id: value}: a full answer sheet that scores so.
    answers: dict[int, int]


def levelled_report(shift: int) -> LevelledReport:
    """Dimension i at level LEVELS[(i + shift) % 4]: four shifts cover every level of every
    dimension."""
    scores: dict[str, float] = {}
    levels: dict[str, str] = {}
    answers: dict[int, int] = {}
    for i, dimension in enumerate(load_questionnaire().dimensions):
        level = LEVELS[(i + shift) % len(LEVELS)]
        score = LEVEL_SCORES[level] - 5.0 * (i // len(LEVELS))
        questions = dimension.questions
        # score = (raw - n) / (4 n) * 100: the raw sum of counted values that gives it.
        raw = round(score * (MAX_VALUE - MIN_VALUE) * len(questions) / 100) + MIN_VALUE * len(questions)
        base, extra = divmod(raw, len(questions))
        for k, question in enumerate(questions):
            counted = base + (1 if k < extra else 0)
            answers[question.id] = counted_value(counted, question.reverse_scored)
        scores[dimension.code], levels[dimension.code] = score, level
    return LevelledReport(scores, levels, answers)


def levelled_scores(shift: int) -> tuple[dict[str, float], dict[str, str]]:
    """The scores and levels of `levelled_report(shift)`."""
    report = levelled_report(shift)
    return report.scores, report.levels


def levelled_record(engine: Engine, user_id: int, shift: int, *, completed_at: datetime | None = None) -> int:
    """A record in status 4 whose answers are `levelled_report(shift)`'s (its report computed
    from them); `completed_at`: when its report was made, instead of now (its earlier times
    moved back with it, so they keep their order)."""
    sheet = levelled_report(shift).answers
    (record_id,) = insert_records(engine, [RecordSpec(RecordStatus.COMPLETED, user_id)], answers=sheet)
    if completed_at is not None:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE assessment_records SET created_at = created_at - shift,"
                    " started_at = started_at - shift, submitted_at = submitted_at - shift,"
                    " completed_at = completed_at - shift, last_activity_at = last_activity_at - shift,"
                    " progress_updated_at = progress_updated_at - shift, updated_at = updated_at - shift"
                    " FROM (SELECT completed_at - CAST(:at AS timestamptz) AS shift"
                    " FROM assessment_records WHERE id = :r) AS s WHERE id = :r"
                ),
                {"r": record_id, "at": completed_at},
            )
    return record_id
