"""The scoring rules: pure functions, checked with examples and Hypothesis properties."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.domain import scoring
from services.domain.errors import ParamError
from services.domain.questionnaire import load_questionnaire
from services.domain.scoring import (
    DimensionSpec,
    QuestionSpec,
    Scorer,
    ScoreReport,
    build_summary,
    counted_value,
    dimension_score,
    level_for,
    score_answers,
    validate_answers,
    validate_partial_answers,
)

Definition = tuple[list[DimensionSpec], list[QuestionSpec]]


def real_definition() -> Definition:
    q = load_questionnaire()
    dims = [
        DimensionSpec(id=d.id, code=d.code, name=d.name, sort_order=d.sort_order, description=d.description)
        for d in q.dimensions
    ]
    questions = [
        QuestionSpec(id=question.id, dimension_id=d.id, reverse_scored=question.reverse_scored)
        for d in q.dimensions
        for question in d.questions
    ]
    return dims, questions


@st.composite
def definitions(draw: st.DrawFn) -> Definition:
    """1..8 dimensions in a random sort order, each with 1..6 questions, random reverse flags."""
    n = draw(st.integers(1, 8))
    orders = draw(st.permutations(range(1, n + 1)))
    dims = [
        DimensionSpec(id=i + 1, code=f"d{i + 1}", name=f"维度{i + 1}", sort_order=orders[i]) for i in range(n)
    ]
    questions: list[QuestionSpec] = []
    for d in dims:
        for _ in range(draw(st.integers(1, 6))):
            questions.append(
                QuestionSpec(id=100 + len(questions), dimension_id=d.id, reverse_scored=draw(st.booleans()))
            )
    return dims, questions


@st.composite
def answered(draw: st.DrawFn) -> tuple[list[DimensionSpec], list[QuestionSpec], list[tuple[int, int]]]:
    dims, questions = draw(definitions())
    answers = [(q.id, draw(st.integers(1, 5))) for q in questions]
    return dims, questions, answers


def all_answers(questions: list[QuestionSpec], value: int) -> list[tuple[int, int]]:
    return [(q.id, value) for q in questions]


# -- properties ---------------------------------------------------------------------------


@given(answered())
def test_scores_stay_within_bounds(
    case: tuple[list[DimensionSpec], list[QuestionSpec], list[tuple[int, int]]],
) -> None:
    dims, questions, answers = case
    report = score_answers(dims, questions, answers)
    per_dim = {d.id: sum(1 for q in questions if q.dimension_id == d.id) for d in dims}
    for s in report.dimensions:
        assert 0.0 <= s.score <= 100.0
        assert per_dim[s.dimension_id] <= s.raw_score <= 5 * per_dim[s.dimension_id]
        assert s.score == round(s.score, 1)


@given(answered(), st.randoms(use_true_random=False))
def test_answer_order_does_not_matter(
    case: tuple[list[DimensionSpec], list[QuestionSpec], list[tuple[int, int]]], rnd: random.Random
) -> None:
    dims, questions, answers = case
    shuffled = list(answers)
    rnd.shuffle(shuffled)
    assert score_answers(dims, questions, shuffled) == score_answers(dims, questions, answers)
    assert score_answers(dims, questions, dict(shuffled)) == score_answers(dims, questions, answers)


@given(answered(), st.data())
def test_reverse_question_answered_v_equals_normal_question_answered_6_minus_v(
    case: tuple[list[DimensionSpec], list[QuestionSpec], list[tuple[int, int]]], data: st.DataObject
) -> None:
    dims, questions, answers = case
    flip = data.draw(st.sets(st.sampled_from([q.id for q in questions])))
    flipped_questions = [
        QuestionSpec(q.id, q.dimension_id, not q.reverse_scored) if q.id in flip else q for q in questions
    ]
    flipped_answers = [(qid, 6 - v) if qid in flip else (qid, v) for qid, v in answers]
    assert score_answers(dims, flipped_questions, flipped_answers) == score_answers(dims, questions, answers)


@given(answered())
def test_ranks_are_a_permutation_ordered_by_score_then_sort_order(
    case: tuple[list[DimensionSpec], list[QuestionSpec], list[tuple[int, int]]],
) -> None:
    dims, questions, answers = case
    report = score_answers(dims, questions, answers)
    assert sorted(s.rank for s in report.dimensions) == list(range(1, len(dims) + 1))
    assert [s.rank for s in report.dimensions] == list(range(1, len(dims) + 1))
    order = {d.id: d.sort_order for d in dims}
    keys = [(-s.score, order[s.dimension_id]) for s in report.dimensions]
    assert keys == sorted(keys)
    assert report.top_dimensions == tuple(s.code for s in report.dimensions[:3])
    assert all(s.level == level_for(s.score) for s in report.dimensions)


@given(answered())
def test_score_formula(case: tuple[list[DimensionSpec], list[QuestionSpec], list[tuple[int, int]]]) -> None:
    dims, questions, answers = case
    values = dict(answers)
    report = score_answers(dims, questions, answers)
    for s in report.dimensions:
        own = [q for q in questions if q.dimension_id == s.dimension_id]
        raw = sum(6 - values[q.id] if q.reverse_scored else values[q.id] for q in own)
        assert s.raw_score == raw
        assert s.score == round((raw - len(own)) / (4 * len(own)) * 100, 1)


# -- examples -----------------------------------------------------------------------------


def test_weakest_and_strongest_answers_score_0_and_100() -> None:
    dims, questions = real_definition()
    weakest = [(q.id, 5 if q.reverse_scored else 1) for q in questions]
    strongest = [(q.id, 1 if q.reverse_scored else 5) for q in questions]
    assert {s.score for s in score_answers(dims, questions, weakest).dimensions} == {0.0}
    assert {s.score for s in score_answers(dims, questions, strongest).dimensions} == {100.0}
    assert {s.level for s in score_answers(dims, questions, weakest).dimensions} == {"待发展"}


def test_ties_are_ranked_by_sort_order() -> None:
    dims, questions = real_definition()
    report = score_answers(dims, questions, all_answers(questions, 3))
    assert [s.code for s in report.dimensions] == [d.code for d in sorted(dims, key=lambda d: d.sort_order)]
    assert report.top_dimensions == ("linguistic", "logical", "spatial")


def test_real_questionnaire_example() -> None:
    dims, questions = real_definition()
    # Everything "3" except the musical questions, answered as strongly as possible.
    answers = dict(all_answers(questions, 3))
    for q in questions:
        if q.dimension_id == 5:
            answers[q.id] = 1 if q.reverse_scored else 5
    report = score_answers(dims, questions, answers)
    first = report.dimensions[0]
    assert (first.code, first.raw_score, first.score, first.rank, first.level) == (
        "musical",
        25,
        100.0,
        1,
        "优势",
    )
    assert all(s.score == 50.0 and s.level == "中等" for s in report.dimensions[1:])
    assert report.summary.startswith(
        "在 8 项智能中，你表现最突出的依次是：音乐（100.0 分，优势）、语言（50.0 分，中等）"
    )
    assert "音乐智能" in report.summary


@pytest.mark.parametrize(
    ("score", "level"),
    [
        (100.0, "优势"),
        (80.0, "优势"),
        (79.9, "较强"),
        (60.0, "较强"),
        (59.9, "中等"),
        (40.0, "中等"),
        (39.9, "待发展"),
        (0.0, "待发展"),
    ],
)
def test_levels(score: float, level: str) -> None:
    assert level_for(score) == level


def test_counted_value_and_dimension_score() -> None:
    assert [counted_value(v, True) for v in range(1, 6)] == [5, 4, 3, 2, 1]
    assert [counted_value(v, False) for v in range(1, 6)] == [1, 2, 3, 4, 5]
    assert dimension_score(5, 5) == 0.0
    assert dimension_score(25, 5) == 100.0
    assert dimension_score(4, 3) == 8.3  # (4 - 3) / 12 * 100 = 8.33…
    with pytest.raises(ParamError):
        dimension_score(3, 0)
    with pytest.raises(ParamError):
        dimension_score(26, 5)


def test_summary_of_a_low_profile_encourages() -> None:
    dims, questions = real_definition()
    report: ScoreReport = score_answers(dims, questions, all_answers(questions, 2))
    assert "发展空间" in report.summary


def test_summary_needs_scores() -> None:
    with pytest.raises(ParamError):
        build_summary([])


# -- validation ---------------------------------------------------------------------------

IDS = [101, 102, 103]


@pytest.mark.parametrize(
    ("answers", "fragment"),
    [
        ([], "答案不能为空"),
        ([(101, 1), (102, 1)], "未作答：103"),
        ([(101, 1), (102, 1), (103, 1), (101, 2)], "重复作答：101"),
        ([(101, 1), (102, 1), (103, 1), (999, 2)], "不属于本测评的题目：999"),
        ([(101, 0), (102, 1), (103, 1)], "题目 101 的答案必须是 1 到 5"),
        ([(101, 6), (102, 1), (103, 1)], "题目 101 的答案必须是 1 到 5"),
        ([(101, True), (102, 1), (103, 1)], "题目 101 的答案必须是 1 到 5"),
        ([(101, 2.0), (102, 1), (103, 1)], "题目 101 的答案必须是 1 到 5"),
        ([(101, "3"), (102, 1), (103, 1)], "题目 101 的答案必须是 1 到 5"),
        ([(True, 3), (102, 1), (103, 1)], "第 1 个答案的题目ID必须是整数"),
        ([(101, 1, 1), (102, 1), (103, 1)], "第 1 个答案格式错误"),
        ([101, (102, 1), (103, 1)], "第 1 个答案格式错误"),
    ],
)
def test_validate_answers_names_the_problem(answers: list[object], fragment: str) -> None:
    with pytest.raises(ParamError, match=fragment) as info:
        validate_answers(IDS, answers)
    assert info.value.code == 1001


def test_validate_answers_lists_at_most_ten_ids() -> None:
    ids = list(range(1, 31))
    with pytest.raises(ParamError, match=r"未作答：1、2、3、4、5、6、7、8、9、10 等 29 题"):
        validate_answers(ids, [(30, 3)])


def test_validate_answers_returns_a_mapping() -> None:
    assert validate_answers(IDS, [(103, 5), (101, 1), (102, 3)]) == {101: 1, 102: 3, 103: 5}


def test_definition_errors() -> None:
    dims, questions = real_definition()
    answers = all_answers(questions, 3)
    with pytest.raises(ParamError, match="测评维度不能为空"):
        score_answers([], questions, answers)
    with pytest.raises(ParamError, match="维度没有题目：naturalist"):
        score_answers(dims, [q for q in questions if q.dimension_id != 8], answers[:35])
    with pytest.raises(ParamError, match="题目所属维度不存在"):
        score_answers(dims[:7], questions, answers)
    with pytest.raises(ParamError, match="维度ID重复"):
        score_answers([*dims, dims[0]], questions, answers)
    with pytest.raises(ParamError, match="题目ID重复"):
        score_answers(dims, [*questions, questions[0]], answers)
    with pytest.raises(ParamError, match="维度代码重复"):
        score_answers(
            [*dims, DimensionSpec(id=99, code="linguistic", name="x", sort_order=99)], questions, answers
        )


@given(answered())
def test_a_scorer_scores_as_score_answers(
    case: tuple[list[DimensionSpec], list[QuestionSpec], list[tuple[int, int]]],
) -> None:
    dims, questions, answers = case
    assert Scorer.of(dims, questions).score(answers) == score_answers(dims, questions, answers)


def test_a_scorer_of_a_broken_questionnaire_refuses_each_record_as_score_answers_does() -> None:
    dims, questions = real_definition()
    orphaned = [*questions, QuestionSpec(id=999, dimension_id=12345)]
    answers = [*all_answers(questions, 3), (999, 3)]
    scorer = Scorer.of(dims, orphaned)
    with pytest.raises(ParamError) as expected:
        score_answers(dims, orphaned, answers)
    for _ in range(2):
        with pytest.raises(ParamError) as refused:
            scorer.score(answers)
        assert refused.value.message == expected.value.message


_ANSWER_PARTS = st.one_of(
    st.integers(min_value=-1, max_value=7), st.booleans(), st.none(), st.text(max_size=2), st.floats()
)


@settings(max_examples=300)
@given(
    question_ids=st.sets(st.integers(min_value=1, max_value=12), max_size=8),
    answers=st.lists(
        st.one_of(
            st.tuples(st.integers(min_value=0, max_value=13), st.integers(min_value=0, max_value=6)),
            st.lists(_ANSWER_PARTS, min_size=0, max_size=3),
            st.tuples(_ANSWER_PARTS, _ANSWER_PARTS),
            _ANSWER_PARTS,
        ),
        max_size=10,
    ),
)
def test_the_one_pass_check_agrees_with_the_pair_by_pair_check(
    question_ids: set[int], answers: list[object]
) -> None:
    """The fast path answers only what the full check would accept, with the same values and
    order; anything else goes to the full check, whose error names the problem."""
    fast = scoring._well_formed(question_ids, answers)
    try:
        checked: dict[int, int] | ParamError = scoring._checked_answers(question_ids, answers)
    except ParamError as exc:
        checked = exc
    if fast is not None:
        assert isinstance(checked, dict)
        assert list(fast.items()) == list(checked.items())
    outcome = validate_partial_answers(question_ids, answers) if isinstance(checked, dict) else None
    assert outcome == (checked if isinstance(checked, dict) else None)


def _outcome(scorer: Scorer, answers: object) -> ScoreReport | str:
    try:
        return scorer.score(answers)  # type: ignore[arg-type]  # malformed on purpose
    except ParamError as exc:
        return exc.message


@settings(max_examples=200)
@given(answered(), st.data())
def test_a_dict_of_answers_scores_or_is_refused_as_its_pairs_are(
    case: tuple[list[DimensionSpec], list[QuestionSpec], list[tuple[int, int]]], data: st.DataObject
) -> None:
    """A dict answering every question once with 1..5 takes `Scorer.score`'s one-pass path; the
    same answers as pairs take the full check. Both give the same report, and a dict the
    one-pass check refuses (an id missing or extra, a value out of range or not an int, an id
    that only equals an int) gets the full check's error."""
    dims, questions, answers = case
    mapping: dict[object, object] = dict(answers)
    change = data.draw(st.sampled_from(["none", "drop", "extra", "value", "float key"]))
    victim = data.draw(st.sampled_from([qid for qid, _ in answers]))
    if change == "drop":
        del mapping[victim]
    elif change == "extra":
        mapping[10_000] = 3
    elif change == "value":
        mapping[victim] = data.draw(st.one_of(st.integers(-2, 8), st.booleans(), st.floats(1, 5), st.none()))
    elif change == "float key":
        mapping[float(victim)] = mapping.pop(victim)  # 100.0 == 100: the dict finds it by the int
    scorer = Scorer.of(dims, questions)
    by_dict, by_pairs = _outcome(scorer, mapping), _outcome(scorer, list(mapping.items()))
    assert by_dict == by_pairs
    if change == "none":
        assert by_dict == score_answers(dims, questions, answers)
        assert isinstance(by_dict, ScoreReport)
    elif change in ("drop", "extra", "float key"):
        assert isinstance(by_dict, str)
