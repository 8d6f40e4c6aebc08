"""The report as the user reads it: stored scores, explained with the questionnaire's texts.

Generation stores scores, ranks and levels only; what a level means, what to do about it,
and which dimensions are strengths or areas to develop are decided here, when the report
is read, from the questionnaire data (services/domain/data/questionnaire.json). Texts can thus be
improved with a new version of the data without regenerating a single report. Pure
functions, no database.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from services.domain.questionnaire import LEVELS, Questionnaire
from services.domain.scoring import DimensionScore, level_for
from services.domain.views import DimensionRefView, DimensionScoreView

logger = logging.getLogger(__name__)

#: Levels that make a dimension a strength: the two highest.
STRENGTH_LEVELS = frozenset(LEVELS[:2])
#: At most this many strengths, and as many areas to develop.
MAX_LISTED = 3


@dataclass(frozen=True)
class Interpretation:
    dimensions: list[DimensionScoreView]
    strengths: list[DimensionRefView]
    areas_to_develop: list[DimensionRefView]


def _dimension_view(stored: DimensionScore, questionnaire: Questionnaire) -> DimensionScoreView:
    definition = questionnaire.dimension(stored.code)
    if definition is None:
        # A dimension dropped from the data since the report was made: its score still shows.
        logger.warning(
            "report dimension %r is not in questionnaire version %s", stored.code, questionnaire.version
        )
        return DimensionScoreView(
            code=stored.code,
            name=stored.name,
            raw_score=stored.raw_score,
            score=stored.score,
            rank=stored.rank,
            level=stored.level,
            description="",
            interpretation="",
            suggestions=[],
        )
    # A level named by older rules has no text any more: the current rules name it from the score.
    text = definition.levels.get(stored.level) or definition.levels[level_for(stored.score)]
    return DimensionScoreView(
        code=stored.code,
        name=stored.name,
        raw_score=stored.raw_score,
        score=stored.score,
        rank=stored.rank,
        level=stored.level,
        description=definition.description,
        interpretation=text.interpretation,
        suggestions=list(text.suggestions),
    )


def _ref(view: DimensionScoreView) -> DimensionRefView:
    return DimensionRefView(code=view.code, name=view.name, score=view.score, level=view.level)


def interpret(scores: Sequence[DimensionScore], questionnaire: Questionnaire) -> Interpretation:
    """Each dimension with its texts (by rank), the strengths and the areas to develop.

    Strengths: the dimensions at a strength level, strongest first, at most `MAX_LISTED`;
    if none is, the first-ranked one (everyone has a relative strength). Areas to develop:
    the other dimensions below the strength levels, weakest first, at most `MAX_LISTED`.
    """
    views = [_dimension_view(s, questionnaire) for s in sorted(scores, key=lambda s: s.rank)]
    strong = [v for v in views if v.level in STRENGTH_LEVELS][:MAX_LISTED] or views[:1]
    strong_codes = {v.code for v in strong}
    weak = [v for v in reversed(views) if v.level not in STRENGTH_LEVELS and v.code not in strong_codes]
    return Interpretation(
        dimensions=views,
        strengths=[_ref(v) for v in strong],
        areas_to_develop=[_ref(v) for v in weak[:MAX_LISTED]],
    )
