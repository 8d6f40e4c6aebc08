"""The questionnaire: data shipped with the package (seeded into the database by
services/persistence/questionnaire_seed.py).

`services/domain/data/questionnaire.json` is the single source of the dimensions, their
questions, the Likert scale and the report's texts (per dimension and level: what the
level means and what to do about it), versioned together: a new version of the file
brings its own texts. Ids are explicit and stable: answers and results
reference them, so a question is never renumbered; one that is dropped from the file
is deactivated by the seed, not deleted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Final

from config import ConfigError
from services.domain import scoring
from services.domain.limits import is_strict_int

#: Bounds of the Likert scale (1 非常不符合 .. 5 非常符合); the scoring rules own them.
MIN_VALUE: Final = scoring.MIN_VALUE
MAX_VALUE: Final = scoring.MAX_VALUE
#: Every level the scoring can give, strongest first: each dimension has texts for each.
LEVELS: Final = (*(level for _, level in scoring.LEVEL_THRESHOLDS), scoring.LEVEL_LOW)
#: A level's suggestions: two or three, so a report gives concrete steps without a list to wade through.
MIN_SUGGESTIONS, MAX_SUGGESTIONS = 2, 3


@dataclass(frozen=True)
class ScaleOption:
    value: int
    label: str


@dataclass(frozen=True)
class QuestionDef:
    id: int
    text: str
    #: Agreement means less of the dimension: scored as 6 - value.
    reverse_scored: bool
    sort_order: int
    is_active: bool = True


@dataclass(frozen=True)
class LevelText:
    """What a level of one dimension means to the user, and what they can do next."""

    interpretation: str
    suggestions: tuple[str, ...]


@dataclass(frozen=True)
class DimensionDef:
    id: int
    code: str
    name: str
    description: str
    sort_order: int
    questions: tuple[QuestionDef, ...]
    #: Report texts by level name (`LEVELS`).
    levels: dict[str, LevelText] = field(default_factory=dict)


@dataclass(frozen=True)
class Questionnaire:
    version: int
    title: str
    instructions: str
    scale: tuple[ScaleOption, ...]
    dimensions: tuple[DimensionDef, ...]

    @property
    def questions(self) -> tuple[QuestionDef, ...]:
        return tuple(q for d in self.dimensions for q in d.questions)

    def dimension(self, code: str) -> DimensionDef | None:
        return next((d for d in self.dimensions if d.code == code), None)


def _field(obj: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = obj.get(key)
    # A JSON true must not pass as an id: ints are checked strictly.
    if not (is_strict_int(value) if kind is int else isinstance(value, kind)):
        raise ConfigError(f"questionnaire: {where}.{key} must be a {kind.__name__}, got {value!r}")
    return value


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"questionnaire: {where} must be an object")
    return value


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"questionnaire: {where} must be a non-empty list")
    return value


def _text(value: object, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"questionnaire: {where} must be a non-empty string")
    return value.strip()


def _levels(raw: object, where: str) -> dict[str, LevelText]:
    """The report texts of one dimension: exactly one entry per level of `LEVELS`."""
    levels = _mapping(raw, f"{where}.levels")
    if set(levels) != set(LEVELS):
        raise ConfigError(
            f"questionnaire: {where}.levels must have exactly the levels {', '.join(LEVELS)}, "
            f"got {', '.join(levels) or 'none'}"
        )
    parsed: dict[str, LevelText] = {}
    for level in LEVELS:
        lwhere = f"{where}.levels.{level}"
        entry = _mapping(levels[level], lwhere)
        suggestions = _list(entry.get("suggestions"), f"{lwhere}.suggestions")
        if not MIN_SUGGESTIONS <= len(suggestions) <= MAX_SUGGESTIONS:
            raise ConfigError(
                f"questionnaire: {lwhere}.suggestions must hold {MIN_SUGGESTIONS} to {MAX_SUGGESTIONS} texts"
            )
        parsed[level] = LevelText(
            interpretation=_text(entry.get("interpretation"), f"{lwhere}.interpretation"),
            suggestions=tuple(_text(s, f"{lwhere}.suggestions[{k}]") for k, s in enumerate(suggestions)),
        )
    return parsed


def parse_questionnaire(raw: object) -> Questionnaire:
    """Build a `Questionnaire` from decoded JSON, checking every field and id.

    Raises `ConfigError` naming the offending field: a broken data file must stop the
    seeding (and the tests), never half-seed a questionnaire.
    """
    root = _mapping(raw, "root")
    scale: list[ScaleOption] = []
    for i, raw_option in enumerate(_list(root.get("scale"), "scale")):
        option = _mapping(raw_option, f"scale[{i}]")
        scale.append(
            ScaleOption(
                value=_field(option, "value", int, f"scale[{i}]"),
                label=_field(option, "label", str, f"scale[{i}]"),
            )
        )
    if [o.value for o in scale] != list(range(MIN_VALUE, MAX_VALUE + 1)):
        raise ConfigError(f"questionnaire: scale values must be {MIN_VALUE}..{MAX_VALUE} in order")

    dimensions: list[DimensionDef] = []
    question_ids: set[int] = set()
    for i, raw_dim in enumerate(_list(root.get("dimensions"), "dimensions")):
        where = f"dimensions[{i}]"
        dim = _mapping(raw_dim, where)
        questions: list[QuestionDef] = []
        for j, raw_q in enumerate(_list(dim.get("questions"), f"{where}.questions")):
            qwhere = f"{where}.questions[{j}]"
            q = _mapping(raw_q, qwhere)
            question = QuestionDef(
                id=_field(q, "id", int, qwhere),
                text=_field(q, "text", str, qwhere),
                reverse_scored=_field(q, "reverse_scored", bool, qwhere),
                sort_order=_field(q, "sort_order", int, qwhere),
                is_active=q.get("is_active", True) is not False,
            )
            if question.id in question_ids:
                raise ConfigError(f"questionnaire: duplicate question id {question.id}")
            question_ids.add(question.id)
            questions.append(question)
        dimensions.append(
            DimensionDef(
                id=_field(dim, "id", int, where),
                code=_field(dim, "code", str, where),
                name=_field(dim, "name", str, where),
                description=_field(dim, "description", str, where),
                sort_order=_field(dim, "sort_order", int, where),
                questions=tuple(questions),
                levels=_levels(dim.get("levels"), where),
            )
        )
    for attr in ("id", "code"):
        values = [getattr(d, attr) for d in dimensions]
        if len(set(values)) != len(values):
            raise ConfigError(f"questionnaire: duplicate dimension {attr}")
    return Questionnaire(
        version=_field(root, "version", int, "root"),
        title=_field(root, "title", str, "root"),
        instructions=_field(root, "instructions", str, "root"),
        scale=tuple(scale),
        dimensions=tuple(dimensions),
    )


def load_questionnaire(path: Path | None = None) -> Questionnaire:
    """The questionnaire of `path`, by default the one shipped in the package."""
    if path is None:
        return _packaged_questionnaire()
    return parse_questionnaire(json.loads(path.read_text(encoding="utf-8")))


@lru_cache(maxsize=1)
def _packaged_questionnaire() -> Questionnaire:
    text = resources.files("services.domain").joinpath("data/questionnaire.json").read_text(encoding="utf-8")
    return parse_questionnaire(json.loads(text))
