"""Scoring of a multiple-intelligences questionnaire: pure functions, no database.

Per dimension with n questions and answers v in 1..5 (a reverse-scored question counts
6 - v): raw = sum of the counted values, score = round((raw - n) / (4n) * 100, 1), so
0 when every answer is the weakest and 100 when every answer is the strongest. Ranks
1..N by score descending; equal scores are ordered by the dimension's sort order (then
id), so a report never depends on the order rows came out of the database. Invalid
input raises `ParamError` with a message naming the problem.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import NamedTuple

from services.domain.errors import ParamError
from services.domain.limits import is_strict_int

MIN_VALUE = 1
MAX_VALUE = 5

#: (lowest score of the level, level), highest first; below the last one: LEVEL_LOW.
LEVEL_THRESHOLDS: tuple[tuple[float, str], ...] = ((80.0, "优势"), (60.0, "较强"), (40.0, "中等"))
LEVEL_LOW = "待发展"

#: How many dimensions the summary (and `ScoreReport.top_dimensions`) names.
TOP_COUNT = 3

#: At most this many ids are spelled out in an error message.
_MAX_IDS_IN_MESSAGE = 10


@dataclass(frozen=True)
class DimensionSpec:
    id: int
    code: str
    name: str
    sort_order: int
    description: str = ""


@dataclass(frozen=True)
class QuestionSpec:
    id: int
    dimension_id: int
    reverse_scored: bool = False


class DimensionScore(NamedTuple):
    """One dimension's score: computed by `score_answers`, stored in `dimension_results`, read
    back to be explained (services/domain/interpretation.py).

    A named tuple, not a frozen dataclass: a report builds eight, and a frozen dataclass's
    `__init__` (one `object.__setattr__` per field) costs a worker ~15 µs per report, a third
    of what its scoring takes with one."""

    code: str
    name: str
    raw_score: int
    score: float
    rank: int
    level: str
    #: The dimension's id (0 where no one asked: explaining a report needs only its code).
    dimension_id: int = 0


@dataclass(frozen=True)
class ScoreReport:
    #: Ordered by rank, the strongest first.
    dimensions: tuple[DimensionScore, ...]
    #: Codes of the (up to) `TOP_COUNT` strongest dimensions, strongest first.
    top_dimensions: tuple[str, ...]
    summary: str


def format_ids(ids: Iterable[int]) -> str:
    """`101, 102, 103` – sorted, and cut after a few ids with the total count."""
    ordered = sorted(set(ids))
    shown = "、".join(str(i) for i in ordered[:_MAX_IDS_IN_MESSAGE])
    if len(ordered) > _MAX_IDS_IN_MESSAGE:
        shown += f" 等 {len(ordered)} 题"
    return shown


def validate_answers(question_ids: Collection[int], answers: Iterable[object]) -> dict[int, int]:
    """Check that `answers` answers each of `question_ids` exactly once with 1..5.

    `answers` is an iterable of (question id, value) pairs. Returns {question id: value}.
    Raises `ParamError` (checked in this order): a malformed pair, an id or value that is
    not an int (bool is refused), a value out of range, unknown ids, ids answered more
    than once, unanswered ids. The message names the offending question ids.
    """
    pairs = list(answers)
    if not pairs and question_ids:
        raise ParamError("答案不能为空")
    values = validate_partial_answers(question_ids, pairs)
    missing = set(question_ids) - values.keys()
    if missing:
        raise ParamError(f"还有题目未作答：{format_ids(missing)}")
    return values


def validate_partial_answers(question_ids: Collection[int], answers: Iterable[object]) -> dict[int, int]:
    """Like `validate_answers`, but questions may be left unanswered (autosave, partial submission).

    Returns {question id: value} in the order given.
    """
    answers = answers if isinstance(answers, list | tuple) else list(answers)
    fast = _well_formed(question_ids, answers)
    return fast if fast is not None else _checked_answers(question_ids, answers)


def _checked_answers(question_ids: Collection[int], answers: Iterable[object]) -> dict[int, int]:
    """`validate_partial_answers`, pair by pair: raises the `ParamError` naming what is wrong."""
    valid: list[tuple[int, int]] = []
    for index, pair in enumerate(answers, start=1):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ParamError(f"第 {index} 个答案格式错误，应为（题目ID, 分值）")
        question_id, value = pair
        if not is_strict_int(question_id):
            raise ParamError(f"第 {index} 个答案的题目ID必须是整数，收到 {question_id!r}")
        if not is_strict_int(value) or not MIN_VALUE <= value <= MAX_VALUE:
            raise ParamError(
                f"题目 {question_id} 的答案必须是 {MIN_VALUE} 到 {MAX_VALUE} 之间的整数，收到 {value!r}"
            )
        valid.append((question_id, value))
    expected = set(question_ids)
    unknown = {qid for qid, _ in valid if qid not in expected}
    if unknown:
        raise ParamError(f"存在不属于本测评的题目：{format_ids(unknown)}")
    counts = Counter(qid for qid, _ in valid)
    duplicated = [qid for qid, count in counts.items() if count > 1]
    if duplicated:
        raise ParamError(f"题目重复作答：{format_ids(duplicated)}")
    return dict(valid)


def _well_formed(question_ids: Collection[int], answers: Sequence[object]) -> dict[int, int] | None:
    """{question id: value} when every answer is a well-formed pair of ints, a value in range,
    a question of `question_ids` answered once; else None (the full check then names what is
    wrong). The common case in one pass: a report scores every record of a group through it."""
    values: dict[int, int] = {}
    for pair in answers:
        if (type(pair) is not tuple and type(pair) is not list) or len(pair) != 2:
            return None
        question_id, value = pair
        if type(question_id) is not int or type(value) is not int or not MIN_VALUE <= value <= MAX_VALUE:
            return None
        values[question_id] = value
    if len(values) != len(answers):
        return None  # a question answered twice
    expected = question_ids if isinstance(question_ids, Set) else set(question_ids)
    return values if values.keys() <= expected else None


def counted_value(value: int, reverse_scored: bool) -> int:
    """The value a 1..5 answer contributes: reversed (6 - v) for a reverse-scored question."""
    return (MIN_VALUE + MAX_VALUE - value) if reverse_scored else value


def dimension_score(raw: int, question_count: int) -> float:
    """Scale a raw sum of `question_count` answers to 0..100, one decimal."""
    if question_count <= 0:
        raise ParamError("维度至少需要一道题目")
    low, high = MIN_VALUE * question_count, MAX_VALUE * question_count
    if not low <= raw <= high:
        raise ParamError(f"原始分 {raw} 超出 {low}..{high} 的范围")
    return round((raw - low) / ((MAX_VALUE - MIN_VALUE) * question_count) * 100, 1)


def level_for(score: float) -> str:
    for threshold, level in LEVEL_THRESHOLDS:
        if score >= threshold:
            return level
    return LEVEL_LOW


def _check_definition(dimensions: Sequence[DimensionSpec], questions: Sequence[QuestionSpec]) -> None:
    if not dimensions:
        raise ParamError("测评维度不能为空")
    dim_ids = [d.id for d in dimensions]
    if len(set(dim_ids)) != len(dim_ids):
        raise ParamError(f"维度ID重复：{format_ids(i for i, c in Counter(dim_ids).items() if c > 1)}")
    codes = [d.code for d in dimensions]
    if len(set(codes)) != len(codes):
        raise ParamError("维度代码重复：" + "、".join(sorted(c for c, n in Counter(codes).items() if n > 1)))
    question_ids = [q.id for q in questions]
    if len(set(question_ids)) != len(question_ids):
        raise ParamError(f"题目ID重复：{format_ids(i for i, c in Counter(question_ids).items() if c > 1)}")
    known = set(dim_ids)
    orphans = {q.id for q in questions if q.dimension_id not in known}
    if orphans:
        raise ParamError(f"题目所属维度不存在：{format_ids(orphans)}")
    used = {q.dimension_id for q in questions}
    empty = [d.code for d in dimensions if d.id not in used]
    if empty:
        raise ParamError("维度没有题目：" + "、".join(empty))


def score_answers(
    dimensions: Sequence[DimensionSpec],
    questions: Sequence[QuestionSpec],
    answers: Mapping[int, int] | Iterable[tuple[int, int]],
) -> ScoreReport:
    """Score one record: every question answered exactly once, every dimension has questions."""
    return Scorer.of(dimensions, questions).score(answers)


@dataclass(frozen=True)
class Scorer:
    """`score_answers` for many records of one questionnaire: the questionnaire is checked once
    (a generation group scores each of its records against the same one). A questionnaire that
    fails the check fails each `score` with the same `ParamError`, as `score_answers` would."""

    dimensions: tuple[DimensionSpec, ...]
    questions: tuple[QuestionSpec, ...]
    question_ids: tuple[int, ...]
    #: The check's message when the questionnaire is not usable.
    problem: str | None
    #: Per question, (id, index of its dimension in `dimensions`, reverse scored): what `score`
    #: walks for each record, so that a worker does not look a question's dimension up 40
    #: times per report (empty when the questionnaire is not usable).
    plan: tuple[tuple[int, int, bool], ...] = field(default=(), repr=False)
    #: Questions per dimension, in the order of `dimensions`.
    counts: tuple[int, ...] = field(default=(), repr=False)
    descriptions: Mapping[int, str] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, dimensions: Sequence[DimensionSpec], questions: Sequence[QuestionSpec]) -> Scorer:
        try:
            _check_definition(dimensions, questions)
        except ParamError as exc:
            return cls(tuple(dimensions), tuple(questions), tuple(q.id for q in questions), exc.message)
        index = {d.id: i for i, d in enumerate(dimensions)}
        plan = tuple((q.id, index[q.dimension_id], q.reverse_scored) for q in questions)
        counts = [0] * len(dimensions)
        for _, i, _ in plan:
            counts[i] += 1
        return cls(
            tuple(dimensions),
            tuple(questions),
            tuple(q.id for q in questions),
            None,
            plan,
            tuple(counts),
            {d.id: d.description for d in dimensions},
        )

    def score(self, answers: Mapping[int, int] | Iterable[tuple[int, int]]) -> ScoreReport:
        """Score one record (see `score_answers`)."""
        if self.problem is not None:
            raise ParamError(self.problem)
        if self._well_formed(answers):
            values: Mapping[int, int] = answers  # type: ignore[assignment]  # checked just above
        else:
            # The full check raises the error naming what is wrong (or finds the answers well
            # formed after all: pairs, not a dict; an int subclass).
            values = validate_answers(
                self.question_ids, answers.items() if isinstance(answers, Mapping) else answers
            )
        raw = [0] * len(self.counts)
        for question_id, index, reverse in self.plan:
            raw[index] += counted_value(values[question_id], reverse)
        scored = [
            # dimension_score's arithmetic exactly (its bounds hold: every value is in 1..5).
            (d, r, round((r - MIN_VALUE * n) / ((MAX_VALUE - MIN_VALUE) * n) * 100, 1))
            for d, r, n in zip(self.dimensions, raw, self.counts, strict=True)
        ]
        # Highest score first; equal scores by the questionnaire's own order: deterministic.
        scored.sort(key=lambda item: (-item[2], item[0].sort_order, item[0].id))
        ranked = tuple(
            DimensionScore(d.code, d.name, raw_score, score, rank, level_for(score), d.id)
            for rank, (d, raw_score, score) in enumerate(scored, start=1)
        )
        return ScoreReport(
            dimensions=ranked,
            top_dimensions=tuple(s.code for s in ranked[:TOP_COUNT]),
            summary=build_summary(ranked, self.descriptions),
        )

    def _well_formed(self, answers: object) -> bool:
        """Is `answers` a dict answering every question, and no other, with an int in 1..5
        (ids ints, as `validate_answers` asks)? The common case, checked in one pass."""
        plan = self.plan
        if type(answers) is not dict or len(answers) != len(plan):
            return False
        for question_id, _, _ in plan:
            value = answers.get(question_id)
            if type(value) is not int or not MIN_VALUE <= value <= MAX_VALUE:
                return False
        # As many keys as questions, each question found: the keys are the questions' ids,
        # unless one is an equal non-int (True for 1), which validate_answers refuses.
        return all(type(key) is int for key in answers)


def build_summary(ranked: Sequence[DimensionScore], descriptions: Mapping[int, str] | None = None) -> str:
    """The report's text, in Chinese, built from the top dimensions of `ranked` (by rank)."""
    if not ranked:
        raise ParamError("没有可用于生成总结的维度得分")
    top = ranked[:TOP_COUNT]
    first = top[0]
    listed = "、".join(f"{s.name}（{s.score:.1f} 分，{s.level}）" for s in top)
    parts = [f"在 {len(ranked)} 项智能中，你表现最突出的依次是：{listed}。"]
    description = (descriptions or {}).get(first.dimension_id, "").strip().rstrip("。")
    if description:
        parts.append(f"排在首位的是{first.name}智能，即{description}。")
    if first.level in {"优势", "较强"}:
        parts.append("建议在学习和生活中有意识地发挥这些长处，同时关注得分较低的方面，循序渐进地加以培养。")
    else:
        parts.append(
            "目前各项智能都还有较大的发展空间，建议多尝试不同类型的活动，在实践中发现并培养自己的兴趣和特长。"
        )
    return "".join(parts)
