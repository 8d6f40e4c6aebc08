"""The shipped questionnaire data: shape, stable ids, and the checks of its parser."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from config import ConfigError
from services.domain.questionnaire import (
    LEVELS,
    MAX_VALUE,
    MIN_VALUE,
    load_questionnaire,
    parse_questionnaire,
)

EXPECTED_DIMENSIONS = [
    (1, "linguistic", "语言"),
    (2, "logical", "逻辑数学"),
    (3, "spatial", "空间"),
    (4, "bodily", "身体运动"),
    (5, "musical", "音乐"),
    (6, "interpersonal", "人际"),
    (7, "intrapersonal", "内省"),
    (8, "naturalist", "自然观察"),
]


def raw_data() -> dict[str, Any]:
    text = resources.files("services.domain").joinpath("data/questionnaire.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def test_eight_dimensions_with_stable_ids() -> None:
    q = load_questionnaire()
    assert [(d.id, d.code, d.name) for d in q.dimensions] == EXPECTED_DIMENSIONS
    assert [d.sort_order for d in q.dimensions] == list(range(1, 9))
    assert all(d.description.strip() for d in q.dimensions)


def test_five_likert_questions_per_dimension_with_a_reverse_one() -> None:
    q = load_questionnaire()
    for d in q.dimensions:
        assert len(d.questions) == 5
        assert [question.id for question in d.questions] == [d.id * 100 + i for i in range(1, 6)]
        assert any(question.reverse_scored for question in d.questions), d.code
        assert not all(question.reverse_scored for question in d.questions), d.code
        assert all(question.text.strip() and question.is_active for question in d.questions)
    assert len(q.questions) == 40
    assert len({question.text for question in q.questions}) == 40


def test_scale() -> None:
    q = load_questionnaire()
    assert [o.value for o in q.scale] == list(range(MIN_VALUE, MAX_VALUE + 1))
    assert q.scale[0].label == "非常不符合"
    assert q.scale[-1].label == "非常符合"


def test_report_texts_for_every_level_of_every_dimension() -> None:
    q = load_questionnaire()
    assert q.version >= 2  # version 2 brought the report texts
    texts = []
    for d in q.dimensions:
        assert list(d.levels) == list(LEVELS), d.code
        for level in LEVELS:
            text = d.levels[level]
            assert text.interpretation.strip(), (d.code, level)
            assert 2 <= len(text.suggestions) <= 3, (d.code, level)
            texts += [text.interpretation, *text.suggestions]
    # Written for each dimension and level, not one text pasted everywhere.
    assert len(set(texts)) == len(texts)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["dimensions"][0].pop("levels"), r"dimensions\[0\]\.levels must be an object"),
        (lambda d: d["dimensions"][1]["levels"].pop("中等"), r"dimensions\[1\]\.levels must have exactly"),
        (lambda d: d["dimensions"][2]["levels"].update({"极强": {}}), "must have exactly the levels"),
        (
            lambda d: d["dimensions"][0]["levels"]["优势"].update(suggestions=["只有一条"]),
            "suggestions must hold 2 to 3",
        ),
        (
            lambda d: d["dimensions"][0]["levels"]["优势"].update(suggestions=["a", "b", "c", "d"]),
            "suggestions must hold 2 to 3",
        ),
        (lambda d: d["dimensions"][0]["levels"]["较强"].update(interpretation=" "), "interpretation must be"),
        (lambda d: d["dimensions"][0]["levels"]["较强"].update(suggestions=["a", 3]), r"suggestions\[1\]"),
    ],
)
def test_broken_report_texts_are_refused(change: Any, message: str) -> None:
    raw = copy.deepcopy(raw_data())
    change(raw)
    with pytest.raises(ConfigError, match=message):
        parse_questionnaire(raw)


def test_load_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_text(json.dumps(raw_data(), ensure_ascii=False), encoding="utf-8")
    assert load_questionnaire(path) == load_questionnaire()


def _broken(change: str) -> dict[str, Any]:
    data = copy.deepcopy(raw_data())
    dims = data["dimensions"]
    if change == "duplicate question id":
        dims[1]["questions"][0]["id"] = dims[0]["questions"][0]["id"]
    elif change == "duplicate dimension code":
        dims[1]["code"] = dims[0]["code"]
    elif change == "bool id":
        dims[0]["id"] = True
    elif change == "missing text":
        del dims[0]["questions"][0]["text"]
    elif change == "no questions":
        dims[0]["questions"] = []
    elif change == "scale":
        data["scale"] = data["scale"][:4]
    elif change == "not an object":
        dims[0] = "linguistic"
    return data


@pytest.mark.parametrize(
    "change",
    [
        "duplicate question id",
        "duplicate dimension code",
        "bool id",
        "missing text",
        "no questions",
        "scale",
        "not an object",
    ],
)
def test_parser_rejects_broken_data(change: str) -> None:
    with pytest.raises(ConfigError, match="questionnaire"):
        parse_questionnaire(_broken(change))
