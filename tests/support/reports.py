"""Completed records with chosen scores: a report's exact content, without running generation.

`insert_report` writes the rows generation would (dimension_results, report_summaries) for
a record already in status 4, with the score and level of each dimension given by the test.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import Engine, text

from services.domain.questionnaire import LEVELS, load_questionnaire

#: A score inside each level's band (services/domain/scoring.py's thresholds).
LEVEL_SCORES: dict[str, float] = dict(zip(LEVELS, (90.0, 70.0, 50.0, 20.0), strict=True))


def insert_report(
    engine: Engine,
    record_id: int,
    scores: Mapping[str, float],
    levels: Mapping[str, str],
    *,
    completed_at: datetime | None = None,
) -> None:
    """Results of `record_id` with `scores` and `levels` by dimension code, ranked by score."""
    questionnaire = load_questionnaire()
    ranked = sorted(questionnaire.dimensions, key=lambda d: (-scores[d.code], d.sort_order))
    with engine.begin() as conn:
        for rank, dimension in enumerate(ranked, start=1):
            conn.execute(
                text(
                    "INSERT INTO dimension_results (record_id, dimension_id, raw_score, score, rank, level)"
                    " VALUES (:r, :d, :raw, :score, :rank, :level)"
                ),
                {
                    "r": record_id,
                    "d": dimension.id,
                    "raw": 5 + round(scores[dimension.code] / 5),
                    "score": scores[dimension.code],
                    "rank": rank,
                    "level": levels[dimension.code],
                },
            )
        conn.execute(
            text(
                "INSERT INTO report_summaries (record_id, top_dimensions, summary)"
                " VALUES (:r, CAST(:top AS jsonb), '测试总结')"
            ),
            {"r": record_id, "top": "[" + ",".join(f'"{d.code}"' for d in ranked[:3]) + "]"},
        )
        if completed_at is not None:
            conn.execute(
                text("UPDATE assessment_records SET completed_at = :at WHERE id = :r"),
                {"r": record_id, "at": completed_at},
            )


def levelled_scores(shift: int) -> tuple[dict[str, float], dict[str, str]]:
    """Scores and levels giving dimension i the level LEVELS[(i + shift) % 4]: four shifts
    cover every level of every dimension."""
    levels = {
        d.code: LEVELS[(i + shift) % len(LEVELS)] for i, d in enumerate(load_questionnaire().dimensions)
    }
    # Apart by a little, so that ranks are strict and the test can predict them.
    scores = {code: LEVEL_SCORES[level] - i * 0.1 for i, (code, level) in enumerate(levels.items())}
    return scores, levels
