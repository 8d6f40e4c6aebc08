"""Report generation (the worker's job) against the real PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session, sessionmaker

from services.domain.errors import ServiceError
from services.domain.questionnaire import load_questionnaire
from services.domain.scoring import DimensionSpec, QuestionSpec, score_answers
from services.domain.status import RecordStatus
from services.persistence.models import Answer, AssessmentRecord, DimensionResult, ReportSummary
from services.persistence.uow import UnitOfWork
from services.usecases.reports import GenerationOutcome, generate_report, mark_generation_failed

GENERATED = GenerationOutcome.GENERATED
SKIPPED = GenerationOutcome.SKIPPED


def snapshot(session_factory: sessionmaker[Session], record_id: int) -> dict[str, Any]:
    """Everything generation writes for a record (without the generation timestamps)."""
    with session_factory() as s:
        record = s.get(AssessmentRecord, record_id)
        assert record is not None
        results = s.execute(
            select(
                DimensionResult.dimension_id,
                DimensionResult.raw_score,
                DimensionResult.score,
                DimensionResult.rank,
                DimensionResult.level,
            )
            .where(DimensionResult.record_id == record_id)
            .order_by(DimensionResult.dimension_id)
        ).all()
        summaries = s.execute(
            select(ReportSummary.top_dimensions, ReportSummary.summary).where(
                ReportSummary.record_id == record_id
            )
        ).all()
        return {
            "status": record.status,
            "completed": record.completed_at is not None,
            "results": [tuple(r) for r in results],
            "summaries": [tuple(r) for r in summaries],
        }


def expected_scores(
    session_factory: sessionmaker[Session], record_id: int
) -> list[tuple[int, int, float, int, str]]:
    """The pure scoring of the record's stored answers, as result rows ordered by dimension."""
    q = load_questionnaire()
    dims = [DimensionSpec(d.id, d.code, d.name, d.sort_order, d.description) for d in q.dimensions]
    questions = [QuestionSpec(x.id, d.id, x.reverse_scored) for d in q.dimensions for x in d.questions]
    with session_factory() as s:
        answers = dict(
            s.execute(select(Answer.question_id, Answer.value).where(Answer.record_id == record_id)).all()
        )
    report = score_answers(dims, questions, answers)
    return sorted((d.dimension_id, d.raw_score, d.score, d.rank, d.level) for d in report.dimensions)


def set_status(session_factory: sessionmaker[Session], record_id: int, status: int) -> None:
    with session_factory() as s:
        s.execute(
            text("UPDATE assessment_records SET status = :s WHERE id = :id"), {"s": status, "id": record_id}
        )
        s.commit()


def test_generate_writes_results_summary_and_status_4(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(3)
    assert generate_report(uow, record_id) == GENERATED
    snap = snapshot(session_factory, record_id)
    assert snap["status"] == 4
    assert snap["completed"]
    assert snap["results"] == expected_scores(session_factory, record_id)
    assert sorted(r[3] for r in snap["results"]) == list(range(1, 9))
    [(top, summary)] = snap["summaries"]
    by_rank = sorted(snap["results"], key=lambda r: r[3])
    codes = {d.id: d.code for d in load_questionnaire().dimensions}
    assert top == [codes[r[0]] for r in by_rank[:3]]
    assert summary.startswith("在 8 项智能中")


def test_generate_twice_gives_the_same_rows(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(3)
    assert generate_report(uow, record_id) == GENERATED
    first = snapshot(session_factory, record_id)
    # A redelivered message: the record is done, nothing to do.
    assert generate_report(uow, record_id) == SKIPPED
    assert snapshot(session_factory, record_id) == first
    # A regeneration (status back to 3, old rows still there): replaced, never duplicated.
    set_status(session_factory, record_id, 3)
    assert generate_report(uow, record_id) == GENERATED
    assert snapshot(session_factory, record_id) == first


def test_stale_rows_are_replaced(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    record_id = make_record(3)
    with session_factory() as s:
        s.add(
            DimensionResult(
                record_id=record_id, dimension_id=1, raw_score=5, score=0.0, rank=8, level="待发展"
            )
        )
        s.add(ReportSummary(record_id=record_id, top_dimensions=["stale"], summary="stale"))
        s.commit()
    assert generate_report(uow, record_id) == GENERATED
    snap = snapshot(session_factory, record_id)
    assert snap["results"] == expected_scores(session_factory, record_id)
    assert snap["summaries"][0][1] != "stale"


@pytest.mark.parametrize("status", [1, 2, 4, 5])
def test_other_statuses_are_skipped(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int], status: int
) -> None:
    record_id = make_record(status, answers={q.id: 3 for q in load_questionnaire().questions})
    before = snapshot(session_factory, record_id)
    completed = status == RecordStatus.COMPLETED  # its own report, made before
    assert (before["status"], before["completed"]) == (status, completed)
    assert (bool(before["results"]), bool(before["summaries"])) == (completed, completed)
    assert generate_report(uow, record_id) == SKIPPED
    assert snapshot(session_factory, record_id) == before


def test_missing_and_deleted_records_are_skipped(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    deleted = make_record(3, deleted=True)
    assert generate_report(uow, deleted) == SKIPPED
    assert snapshot(session_factory, deleted)["status"] == 3
    assert generate_report(uow, 999_999) == SKIPPED
    assert generate_report(uow, 0) == SKIPPED
    assert generate_report(uow, 2**63) == SKIPPED


def test_missing_answers_raise_and_write_nothing(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    answers = {q.id: 3 for q in load_questionnaire().questions if q.id not in (203, 804)}
    record_id = make_record(3, answers=answers)
    with pytest.raises(ServiceError, match=r"答案不完整，缺少题目：203、804"):
        generate_report(uow, record_id)
    assert snapshot(session_factory, record_id) == {
        "status": 3,
        "completed": False,
        "results": [],
        "summaries": [],
    }


def test_no_answers_at_all_raise(uow: UnitOfWork, make_record: Callable[..., int]) -> None:
    record_id = make_record(3, answers={})
    with pytest.raises(ServiceError, match="缺少题目"):
        generate_report(uow, record_id)


def _race(
    session_factory: sessionmaker[Session], record_id: int, workers: int, hold_lock: bool
) -> list[object]:
    outcomes: list[object] = []
    guard = threading.Lock()
    barrier = threading.Barrier(workers, timeout=60)

    def run() -> None:
        barrier.wait()
        try:
            outcome: object = generate_report(UnitOfWork(session_factory), record_id)
        except Exception as exc:  # collected, the test asserts there are none
            outcome = exc
        with guard:
            outcomes.append(outcome)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(workers)]
    if hold_lock:
        # All workers queue up on the row lock, then are released together.
        with session_factory() as holder:
            holder.execute(
                select(AssessmentRecord.id).where(AssessmentRecord.id == record_id).with_for_update()
            )
            for t in threads:
                t.start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with session_factory() as probe:
                    waiting = probe.scalar(
                        text(
                            "SELECT count(*) FROM pg_stat_activity "
                            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                        )
                    )
                if (waiting or 0) >= workers:
                    break
                time.sleep(0.02)
            else:
                raise AssertionError("the workers never waited on the row lock")
            holder.commit()
    else:
        for t in threads:
            t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a generation never returned"
    return outcomes


@pytest.mark.parametrize("hold_lock", [True, False], ids=["lock-held", "free-run"])
def test_racing_workers_generate_exactly_once(
    session_factory: sessionmaker[Session], make_record: Callable[..., int], hold_lock: bool
) -> None:
    for _ in range(3 if hold_lock else 10):
        record_id = make_record(3)
        outcomes = _race(session_factory, record_id, 4, hold_lock)
        assert sorted(map(str, outcomes)) == ["generated", "skipped", "skipped", "skipped"]
        with session_factory() as s:
            results = s.scalar(
                select(func.count())
                .select_from(DimensionResult)
                .where(DimensionResult.record_id == record_id)
            )
            summaries = s.scalar(
                select(func.count()).select_from(ReportSummary).where(ReportSummary.record_id == record_id)
            )
        assert (results, summaries) == (8, 1)
        assert snapshot(session_factory, record_id)["results"] == expected_scores(session_factory, record_id)


def test_mark_generation_failed_only_from_3(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    generating = make_record(3)
    assert mark_generation_failed(uow, generating) is True
    assert snapshot(session_factory, generating)["status"] == 5
    assert mark_generation_failed(uow, generating) is False
    for status in (1, 2, 4):
        record_id = make_record(status)
        assert mark_generation_failed(uow, record_id) is False
        assert snapshot(session_factory, record_id)["status"] == status
    assert mark_generation_failed(uow, 999_999) is False
    assert mark_generation_failed(uow, 2**63) is False
