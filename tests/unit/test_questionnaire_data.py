"""The shipped questionnaire data: shape, stable ids, and the checks of its parser."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from services.errors import ConfigError
from services.questionnaire import MAX_VALUE, MIN_VALUE, load_questionnaire, parse_questionnaire

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
    text = resources.files("services").joinpath("data/questionnaire.json").read_text(encoding="utf-8")
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
