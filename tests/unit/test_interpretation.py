"""services/domain/interpretation.py: texts by level from the data, strengths and areas to develop."""

from __future__ import annotations

import pytest

from services.domain.interpretation import MAX_LISTED, interpret
from services.domain.questionnaire import LEVELS, load_questionnaire
from services.domain.scoring import DimensionScore as StoredScore
from services.domain.scoring import level_for

QUESTIONNAIRE = load_questionnaire()
CODES = [d.code for d in QUESTIONNAIRE.dimensions]


def stored(scores: list[float], levels: list[str] | None = None) -> list[StoredScore]:
    """Scores in questionnaire order, ranked by score (ties by order), levels from the score."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    rank = {i: r for r, i in enumerate(order, start=1)}
    return [
        StoredScore(
            code=CODES[i],
            name=QUESTIONNAIRE.dimensions[i].name,
            raw_score=5,
            score=score,
            rank=rank[i],
            level=levels[i] if levels else level_for(score),
        )
        for i, score in enumerate(scores)
    ]


def codes(refs: object) -> list[str]:
    return [r.code for r in refs]  # type: ignore[attr-defined]


def test_dimensions_by_rank_with_their_level_texts() -> None:
    result = interpret(stored([10, 90, 50, 70, 30, 85, 65, 45]), QUESTIONNAIRE)
    assert [d.rank for d in result.dimensions] == list(range(1, 9))
    for d in result.dimensions:
        text = QUESTIONNAIRE.dimension(d.code).levels[d.level]  # type: ignore[union-attr]
        assert (d.interpretation, d.suggestions) == (text.interpretation, list(text.suggestions))


def test_strengths_are_the_strong_levels_at_most_three() -> None:
    result = interpret(stored([10, 90, 50, 70, 30, 85, 65, 45]), QUESTIONNAIRE)
    assert codes(result.strengths) == ["logical", "interpersonal", "bodily"]
    # Weakest first, none of the strengths.
    assert codes(result.areas_to_develop) == ["linguistic", "musical", "naturalist"]
    assert len(result.strengths) <= MAX_LISTED


def test_with_no_strong_level_the_first_dimension_is_the_strength() -> None:
    result = interpret(stored([10, 20, 30, 35, 15, 5, 25, 12]), QUESTIONNAIRE)
    assert codes(result.strengths) == ["bodily"]
    assert "bodily" not in codes(result.areas_to_develop)
    assert codes(result.areas_to_develop) == ["interpersonal", "linguistic", "naturalist"]


def test_all_strong_leaves_nothing_to_develop() -> None:
    result = interpret(stored([90, 91, 92, 93, 94, 95, 96, 97]), QUESTIONNAIRE)
    assert codes(result.strengths) == ["naturalist", "intrapersonal", "interpersonal"]
    assert result.areas_to_develop == []


def test_a_level_unknown_to_the_data_is_read_from_the_score() -> None:
    levels = [level_for(s) for s in [10, 90, 50, 70, 30, 85, 65, 45]]
    levels[0] = "旧等级"
    result = interpret(stored([10, 90, 50, 70, 30, 85, 65, 45], levels), QUESTIONNAIRE)
    linguistic = next(d for d in result.dimensions if d.code == "linguistic")
    assert linguistic.level == "旧等级"
    assert linguistic.interpretation == QUESTIONNAIRE.dimensions[0].levels[LEVELS[-1]].interpretation


def test_a_dimension_gone_from_the_data_keeps_its_score(caplog: pytest.LogCaptureFixture) -> None:
    scores = stored([10, 90, 50, 70, 30, 85, 65, 45])
    gone = StoredScore(code="retired", name="旧维度", raw_score=5, score=99.0, rank=9, level="优势")
    result = interpret([*scores, gone], QUESTIONNAIRE)
    retired = result.dimensions[-1]
    assert (retired.code, retired.score, retired.interpretation, retired.suggestions) == (
        "retired",
        99.0,
        "",
        [],
    )
    assert "retired" in caplog.text
