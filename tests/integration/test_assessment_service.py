"""The user's side of the services against the real PostgreSQL, with fake report queues."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from services.domain.errors import InvalidOperation, ParamError, RecordNotFound, ServiceError
from services.domain.questionnaire import load_questionnaire
from services.domain.views import RecordView
from services.persistence.models import Answer, AssessmentRecord, Question
from services.persistence.questionnaire_seed import seed_questionnaire
from services.persistence.uow import UnitOfWork
from services.usecases import assessment, reports
from tests.support.fakes import RecordingQueue

QUESTION_IDS = [q.id for q in load_questionnaire().questions]


def default_answer(question_id: int) -> int:
    return question_id * 3 % 5 + 1


def full_answers(value: Callable[[int], int] = default_answer) -> list[tuple[int, int]]:
    return [(qid, value(qid)) for qid in QUESTION_IDS]


def state(session_factory: sessionmaker[Session], record_id: int) -> tuple[int, int, bool]:
    """(status, number of answers, submitted_at set) of a record."""
    with session_factory() as s:
        record = s.get(AssessmentRecord, record_id)
        assert record is not None
        count = s.scalar(select(func.count()).select_from(Answer).where(Answer.record_id == record_id))
        return record.status, count or 0, record.submitted_at is not None


# -- records ------------------------------------------------------------------------------


def test_create_and_start_record(uow: UnitOfWork) -> None:
    created = assessment.create_record(uow, 42)
    assert (created.user_id, created.status, created.status_text) == (42, 1, "待测评")
    assert created.created_at.tzinfo is not None
    assert created.started_at is None

    started = assessment.start_record(uow, 42, created.id)
    assert (started.status, started.status_text) == (2, "测评中")
    assert started.started_at is not None
    again = assessment.start_record(uow, 42, created.id)
    assert again == started  # 2 stays 2, started_at unchanged

    assert assessment.get_record(uow, 42, created.id) == started


@pytest.mark.parametrize("status", [3, 4, 5])
def test_start_record_refuses_later_statuses(
    uow: UnitOfWork, make_record: Callable[..., int], status: int
) -> None:
    record_id = make_record(status, user_id=42)
    with pytest.raises(InvalidOperation) as info:
        assessment.start_record(uow, 42, record_id)
    assert info.value.code == 2005


@pytest.mark.parametrize("user_id", [0, -1, True, 2**63])
def test_create_record_checks_user_id(uow: UnitOfWork, user_id: int) -> None:
    with pytest.raises(ParamError):
        assessment.create_record(uow, user_id)


def test_records_of_others_deleted_or_missing_are_not_found(
    uow: UnitOfWork, make_record: Callable[..., int]
) -> None:
    other = make_record(2, user_id=7)
    deleted = make_record(2, user_id=42, deleted=True)
    for record_id in (other, deleted, 999_999, 2**63):
        for call in (
            lambda rid: assessment.get_record(uow, 42, rid),
            lambda rid: assessment.start_record(uow, 42, rid),
            lambda rid: assessment.get_result_status(uow, 42, rid),
            lambda rid: assessment.get_report(uow, 42, rid),
        ):
            with pytest.raises(RecordNotFound) as info:
                call(record_id)
            assert info.value.code == 3241


def test_list_user_records_newest_first_without_deleted(
    uow: UnitOfWork, make_record: Callable[..., int]
) -> None:
    first = make_record(1, user_id=42)
    make_record(1, user_id=7)
    make_record(1, user_id=42, deleted=True)
    last = make_record(4, user_id=42)
    page = assessment.list_user_records(uow, 42)
    assert [r.id for r in page.items] == [last, first]
    assert (page.total, page.next_cursor) == (2, None)
    assert [r.report_ready for r in page.items] == [True, False]
    assert assessment.list_user_records(uow, 1234).items == []


def test_list_questions_in_questionnaire_order(uow: UnitOfWork) -> None:
    questions = assessment.list_questions(uow)
    assert [q.id for q in questions] == QUESTION_IDS
    assert (questions[0].dimension_code, questions[0].dimension_name) == ("linguistic", "语言")
    assert questions[-1].dimension_code == "naturalist"
    assert [q.sort_order for q in questions[:5]] == [1, 2, 3, 4, 5]


def test_seed_is_idempotent_and_deactivates_dropped_questions(uow: UnitOfWork, engine: object) -> None:
    assert seed_questionnaire(uow) == 40
    original = load_questionnaire()
    trimmed_first = replace(original.dimensions[0], questions=original.dimensions[0].questions[:4])
    trimmed = replace(original, dimensions=(trimmed_first, *original.dimensions[1:]))
    try:
        with uow:
            uow.session.execute(text("UPDATE questions SET text = 'changed' WHERE id = 101"))
            uow.commit()
        assert seed_questionnaire(uow, trimmed) == 39
        assert [q.id for q in assessment.list_questions(uow)] == [i for i in QUESTION_IDS if i != 105]
    finally:
        seed_questionnaire(uow)
    with uow:
        assert uow.session.scalar(select(func.count()).select_from(Question).where(Question.is_active)) == 40
        assert (
            uow.session.scalar(select(Question.text).where(Question.id == 101)) == original.questions[0].text
        )


# -- submission ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [1, 2])
def test_submit_answers_saves_sets_3_and_queues_after_commit(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int], status: int
) -> None:
    record_id = make_record(status, user_id=42)
    seen: list[tuple[int, int, bool]] = []

    class CommittedCheckingQueue(RecordingQueue):
        def enqueue(self, record_id: int) -> None:
            # What a worker taking the job right now would see, from another connection.
            seen.append(state(session_factory, record_id))
            super().enqueue(record_id)

    queue = CommittedCheckingQueue()
    result = assessment.submit_answers(uow, queue, 42, record_id, full_answers())
    assert (result.record_id, result.status, result.enqueued) == (record_id, 3, True)
    assert queue.enqueued == [record_id]
    assert seen == [(3, 40, True)]
    with session_factory() as s:
        saved = dict(
            s.execute(select(Answer.question_id, Answer.value).where(Answer.record_id == record_id)).all()
        )
    assert saved == dict(full_answers())


def test_resubmission_replaces_previous_answers(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(2, user_id=42, answers={101: 1, 102: 1})
    assessment.submit_answers(uow, RecordingQueue(), 42, record_id, full_answers(lambda _: 4))
    with session_factory() as s:
        values = s.scalars(select(Answer.value).where(Answer.record_id == record_id)).all()
    assert len(values) == 40
    assert set(values) == {4}


def _without(qid: int) -> list[tuple[int, int]]:
    return [a for a in full_answers() if a[0] != qid]


def _with_value(qid: int, value: object) -> list[tuple[int, object]]:
    return [(q, value if q == qid else v) for q, v in full_answers()]


BAD_ANSWERS: list[tuple[str, Sequence[tuple[object, object]], str]] = [
    ("empty", [], "答案不能为空"),
    ("missing", _without(205), "未作答：205"),
    ("duplicate", [*full_answers(), (101, 3)], "重复作答：101"),
    ("unknown", [*full_answers(), (999, 3)], "不属于本测评的题目：999"),
    ("zero", _with_value(303, 0), "题目 303 的答案必须是 1 到 5"),
    ("six", _with_value(303, 6), "题目 303 的答案必须是 1 到 5"),
    ("bool", _with_value(303, True), "题目 303 的答案必须是 1 到 5"),
    ("str", _with_value(303, "3"), "题目 303 的答案必须是 1 到 5"),
    ("float", _with_value(303, 3.0), "题目 303 的答案必须是 1 到 5"),
]


@pytest.mark.parametrize(
    ("answers", "message"), [b[1:] for b in BAD_ANSWERS], ids=[b[0] for b in BAD_ANSWERS]
)
def test_bad_answers_save_nothing(
    uow: UnitOfWork,
    session_factory: sessionmaker[Session],
    make_record: Callable[..., int],
    answers: list[tuple[int, int]],
    message: str,
) -> None:
    record_id = make_record(2, user_id=42, answers={101: 2})
    queue = RecordingQueue()
    with pytest.raises(ParamError, match=message) as info:
        assessment.submit_answers(uow, queue, 42, record_id, answers)
    assert info.value.code == 1001
    assert state(session_factory, record_id) == (2, 1, False)
    assert queue.enqueued == []


@pytest.mark.parametrize("status", [3, 4, 5])
def test_submit_in_a_later_status_is_refused(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int], status: int
) -> None:
    record_id = make_record(status, user_id=42)
    with session_factory() as s:
        sheet = dict(
            s.execute(select(Answer.question_id, Answer.value).where(Answer.record_id == record_id)).all()
        )
    queue = RecordingQueue()
    with pytest.raises(InvalidOperation, match="当前状态不允许提交答案") as info:
        assessment.submit_answers(uow, queue, 42, record_id, full_answers())
    assert info.value.code == 2005
    assert state(session_factory, record_id) == (status, len(QUESTION_IDS), True)
    with session_factory() as s:  # the submission's sheet, not the refused one
        kept = dict(
            s.execute(select(Answer.question_id, Answer.value).where(Answer.record_id == record_id)).all()
        )
    assert kept == sheet != dict(full_answers())
    assert queue.enqueued == []


def test_submit_to_someone_elses_deleted_or_missing_record(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    other = make_record(2, user_id=7)
    deleted = make_record(2, user_id=42, deleted=True)
    queue = RecordingQueue()
    for record_id in (other, deleted, 999_999):
        with pytest.raises(RecordNotFound):
            assessment.submit_answers(uow, queue, 42, record_id, full_answers())
    assert state(session_factory, other) == (2, 0, False)
    assert state(session_factory, deleted) == (2, 0, False)
    assert queue.enqueued == []


def test_answer_to_an_inactive_question_is_unknown(uow: UnitOfWork, make_record: Callable[..., int]) -> None:
    record_id = make_record(2, user_id=42)
    try:
        with uow:
            uow.session.execute(text("UPDATE questions SET is_active = false WHERE id = 805"))
            uow.commit()
        with pytest.raises(ParamError, match="不属于本测评的题目：805"):
            assessment.submit_answers(uow, RecordingQueue(), 42, record_id, full_answers())
        result = assessment.submit_answers(uow, RecordingQueue(), 42, record_id, _without(805))
        assert result.status == 3
    finally:
        seed_questionnaire(uow)


def test_failing_queue_still_succeeds_with_enqueued_false(
    uow: UnitOfWork,
    session_factory: sessionmaker[Session],
    make_record: Callable[..., int],
    failing_queue: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    record_id = make_record(2, user_id=42)
    queue = failing_queue
    with caplog.at_level(logging.ERROR, logger="services.usecases.assessment"):
        result = assessment.submit_answers(uow, queue, 42, record_id, full_answers())
    assert (result.status, result.enqueued) == (3, False)
    assert queue.calls == 1
    assert state(session_factory, record_id) == (3, 40, True)
    errors = [
        r for r in caplog.records if r.levelno == logging.ERROR and r.name == "services.usecases.assessment"
    ]
    assert len(errors) == 1
    assert errors[0].exc_info is not None
    assert str(record_id) in errors[0].getMessage()


def _wait_for_lock_waiters(session_factory: sessionmaker[Session], count: int, timeout: float = 10.0) -> None:
    """Block until `count` backends of this database wait on a row lock."""
    deadline = time.monotonic() + timeout
    with session_factory() as s:
        while time.monotonic() < deadline:
            waiting = s.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            )
            s.rollback()
            if (waiting or 0) >= count:
                return
            time.sleep(0.02)
    raise AssertionError(f"{count} lock waiters expected")


def _race(session_factory: sessionmaker[Session], record_id: int, call: Callable[[], object]) -> list[object]:
    """Two threads run `call` on the record while its row lock is held, so both wait on it before
    either can check the status; their results (or ServiceErrors) once the lock is released."""
    outcomes: list[object] = []
    lock = threading.Lock()

    def run() -> None:
        result: object
        try:
            result = call()
        except ServiceError as exc:
            result = exc
        with lock:
            outcomes.append(result)

    with session_factory() as holder:
        holder.execute(select(AssessmentRecord).where(AssessmentRecord.id == record_id).with_for_update())
        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        _wait_for_lock_waiters(session_factory, 2)
        holder.commit()
    for t in threads:
        t.join(timeout=30)
    return outcomes


def test_concurrent_submissions_only_one_passes(
    session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(2, user_id=42)
    queue = RecordingQueue()
    outcomes = _race(
        session_factory,
        record_id,
        lambda: assessment.submit_answers(UnitOfWork(session_factory), queue, 42, record_id, full_answers()),
    )

    successes = [o for o in outcomes if not isinstance(o, ServiceError)]
    refusals = [o for o in outcomes if isinstance(o, InvalidOperation)]
    assert len(successes) == 1
    assert len(refusals) == 1
    assert queue.enqueued == [record_id]
    assert state(session_factory, record_id) == (3, 40, True)


def test_concurrent_starts_both_answer_the_started_record(
    session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    """Two starts of one record in 1: one starts it, the other returns it as started (status 2,
    the same started_at), never the status it read before the first committed."""
    record_id = make_record(1, user_id=42)
    outcomes = _race(
        session_factory,
        record_id,
        lambda: assessment.start_record(UnitOfWork(session_factory), 42, record_id),
    )

    started = [o for o in outcomes if isinstance(o, RecordView)]
    assert len(started) == 2, outcomes
    assert {(o.status, o.started_at) for o in started} == {
        (2, assessment.get_record(UnitOfWork(session_factory), 42, record_id).started_at)
    }


# -- result status and report --------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "text_", "description"),
    [
        (1, "待测评", "测评尚未开始"),
        (2, "测评中", "测评进行中，请完成全部题目后提交"),
        (3, "生成中", "报告生成中，请稍后查看"),
        (4, "已完成", "报告已生成"),
        (5, "生成失败", "报告生成失败，请联系客服"),
    ],
)
def test_result_status(
    uow: UnitOfWork, make_record: Callable[..., int], status: int, text_: str, description: str
) -> None:
    record_id = make_record(status, user_id=42)
    view = assessment.get_result_status(uow, 42, record_id)
    assert (view.record_id, view.status, view.status_text, view.description) == (
        record_id,
        status,
        text_,
        description,
    )


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (1, "报告尚未生成"),
        (2, "报告尚未生成"),
        (3, "报告生成中，请稍后查看"),
        (5, "报告生成失败，请联系客服"),
    ],
)
def test_report_before_completion(
    uow: UnitOfWork, make_record: Callable[..., int], status: int, message: str
) -> None:
    """Generating (3) and failed (5) say so, in the original design's words; before that, not yet."""
    record_id = make_record(status, user_id=42)
    with pytest.raises(InvalidOperation) as info:
        assessment.get_report(uow, 42, record_id)
    assert info.value.message == message


def test_full_flow_to_the_report(uow: UnitOfWork, make_record: Callable[..., int]) -> None:
    record = assessment.create_record(uow, 42)
    assessment.start_record(uow, 42, record.id)
    assessment.submit_answers(uow, RecordingQueue(), 42, record.id, full_answers())
    assert reports.generate_report(uow, record.id) == reports.GenerationOutcome.GENERATED

    report = assessment.get_report(uow, 42, record.id)
    assert (report.record_id, report.user_id) == (record.id, 42)
    assert report.completed_at is not None
    assert [d.rank for d in report.dimensions] == list(range(1, 9))
    assert {d.code for d in report.dimensions} == {
        "linguistic",
        "logical",
        "spatial",
        "bodily",
        "musical",
        "interpersonal",
        "intrapersonal",
        "naturalist",
    }
    scores = [d.score for d in report.dimensions]
    assert scores == sorted(scores, reverse=True)
    assert report.top_dimensions == [d.code for d in report.dimensions[:3]]
    assert all(d.name in report.summary for d in report.dimensions[:3])
    assert assessment.get_result_status(uow, 42, record.id).status == 4


def test_completed_record_without_report_rows_is_an_error(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(4, user_id=42)
    with session_factory() as s:  # damaged data: the report's rows deleted by hand
        s.execute(text("DELETE FROM dimension_results WHERE record_id = :id"), {"id": record_id})
        s.execute(text("DELETE FROM report_summaries WHERE record_id = :id"), {"id": record_id})
        s.commit()
    with pytest.raises(ServiceError, match="报告数据缺失"):
        assessment.get_report(uow, 42, record_id)
