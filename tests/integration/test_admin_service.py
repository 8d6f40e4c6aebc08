"""The admin services (seed 000, properties 4-7) against the real PostgreSQL."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, event, func, insert, select, text
from sqlalchemy.orm import Session, sessionmaker

from services.domain.errors import (
    MSG_EMPTY_ID_LIST,
    MSG_REGENERATE_NOT_ALLOWED,
    InvalidOperation,
    ParamError,
    QueueUnavailable,
    RecordNotFound,
)
from services.domain.views import RecordFilter
from services.persistence.models import AssessmentRecord, DimensionResult, ReportSummary
from services.persistence.uow import UnitOfWork
from services.usecases import admin
from services.usecases.reports import generate_report
from tests.support.fakes import RecordingQueue


def state(session_factory: sessionmaker[Session], record_id: int) -> tuple[int, bool, int, int]:
    """(status, completed_at set, result rows, summary rows)."""
    with session_factory() as s:
        record = s.get(AssessmentRecord, record_id)
        assert record is not None
        results = s.scalar(
            select(func.count()).select_from(DimensionResult).where(DimensionResult.record_id == record_id)
        )
        summaries = s.scalar(
            select(func.count()).select_from(ReportSummary).where(ReportSummary.record_id == record_id)
        )
        return record.status, record.completed_at is not None, results or 0, summaries or 0


@pytest.fixture
def reported_record(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> Callable[[int], int]:
    """A record with a generated report, then put in `status` (as a failed regeneration would leave it)."""

    def make(status: int) -> int:
        record_id = make_record(3)
        generate_report(uow, record_id)
        with session_factory() as s:
            s.execute(
                text("UPDATE assessment_records SET status = :s WHERE id = :id"),
                {"s": status, "id": record_id},
            )
            s.commit()
        return record_id

    return make


@contextmanager
def count_statements(engine: Engine) -> Iterator[list[str]]:
    """The statements sent to the database in the block: SQLAlchemy's, and those the repositories
    send on the unit of work's psycopg connection directly (services/persistence/driver.py)."""
    statements: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    execute = psycopg.Connection.execute

    def driver_execute(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(str(query))
        return execute(self, query, *args, **kwargs)

    event.listen(engine, "before_cursor_execute", before)
    psycopg.Connection.execute = driver_execute  # type: ignore[method-assign]
    try:
        yield statements
    finally:
        psycopg.Connection.execute = execute  # type: ignore[method-assign]
        event.remove(engine, "before_cursor_execute", before)


# -- regenerate_report --------------------------------------------------------------------


@pytest.mark.parametrize("status", [3, 5])
def test_regenerate_resets_clears_and_queues(
    uow: UnitOfWork,
    session_factory: sessionmaker[Session],
    reported_record: Callable[[int], int],
    status: int,
) -> None:
    record_id = reported_record(status)
    assert state(session_factory, record_id) == (status, True, 8, 1)
    queue = RecordingQueue()
    admin.regenerate_report(uow, queue, record_id)
    assert state(session_factory, record_id) == (3, False, 0, 0)
    assert queue.enqueued == [record_id]
    # And the worker can then generate it again.
    assert generate_report(uow, record_id) == "generated"
    assert state(session_factory, record_id) == (4, True, 8, 1)


@pytest.mark.parametrize("status", [1, 2, 4])
def test_regenerate_refuses_other_statuses_and_changes_nothing(
    uow: UnitOfWork,
    session_factory: sessionmaker[Session],
    reported_record: Callable[[int], int],
    status: int,
) -> None:
    record_id = reported_record(status)
    queue = RecordingQueue()
    with pytest.raises(InvalidOperation) as info:
        admin.regenerate_report(uow, queue, record_id)
    assert (info.value.code, info.value.message) == (2005, MSG_REGENERATE_NOT_ALLOWED)
    assert state(session_factory, record_id) == (status, True, 8, 1)
    assert queue.enqueued == []


def test_regenerate_missing_or_deleted_is_3241(uow: UnitOfWork, make_record: Callable[..., int]) -> None:
    deleted = make_record(5, deleted=True)
    queue = RecordingQueue()
    for record_id in (deleted, 999_999, 0, 2**63):
        with pytest.raises(RecordNotFound) as info:
            admin.regenerate_report(uow, queue, record_id)
        assert (info.value.code, info.value.message) == (3241, "测评记录不存在")
    assert queue.enqueued == []


def test_regenerate_with_a_failing_queue(
    uow: UnitOfWork,
    session_factory: sessionmaker[Session],
    reported_record: Callable[[int], int],
    failing_queue: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    record_id = reported_record(5)
    with (
        caplog.at_level(logging.ERROR, logger="services.usecases.admin"),
        pytest.raises(QueueUnavailable) as info,
    ):
        admin.regenerate_report(uow, failing_queue, record_id)
    assert info.value.code == 5003
    assert state(session_factory, record_id) == (3, False, 0, 0)
    assert any(r.exc_info for r in caplog.records if r.name == "services.usecases.admin")


# -- batch_regenerate_report ---------------------------------------------------------------


@pytest.mark.parametrize("ids", [[], ()])
def test_batch_with_no_ids_is_1001(uow: UnitOfWork, ids: Sequence[int]) -> None:
    with pytest.raises(ParamError) as info:
        admin.batch_regenerate_report(uow, RecordingQueue(), ids)
    assert (info.value.code, info.value.message) == (1001, MSG_EMPTY_ID_LIST)


@pytest.mark.parametrize("bad", [True, "1", 1.0, None])
def test_batch_with_a_non_int_id_is_1001(
    uow: UnitOfWork, make_record: Callable[..., int], bad: object
) -> None:
    record_id = make_record(5)
    with pytest.raises(ParamError):
        admin.batch_regenerate_report(uow, RecordingQueue(), [record_id, bad])  # type: ignore[list-item]


def test_batch_regenerates_only_3_and_5(
    uow: UnitOfWork,
    session_factory: sessionmaker[Session],
    reported_record: Callable[[int], int],
    make_record: Callable[..., int],
) -> None:
    by_status = {status: reported_record(status) for status in (1, 2, 3, 4, 5)}
    deleted = make_record(5, deleted=True)
    ids = [
        by_status[5],
        by_status[1],
        999_999,
        by_status[3],
        deleted,
        by_status[4],
        by_status[5],
        by_status[2],
        -3,
    ]
    queue = RecordingQueue()
    result = admin.batch_regenerate_report(uow, queue, ids)
    assert (result.success_count, result.skipped_count) == (2, 7)
    assert queue.batches == [[by_status[5], by_status[3]]]  # request order, each once
    for status in (3, 5):
        assert state(session_factory, by_status[status]) == (3, False, 0, 0)
    for status in (1, 2, 4):
        assert state(session_factory, by_status[status]) == (status, True, 8, 1)
    assert state(session_factory, deleted) == (5, False, 0, 0)


def test_batch_with_nothing_eligible_does_not_call_the_queue(
    uow: UnitOfWork, make_record: Callable[..., int]
) -> None:
    queue = RecordingQueue()
    result = admin.batch_regenerate_report(uow, queue, [make_record(1), 999_999, 2**64])
    assert (result.success_count, result.skipped_count) == (0, 3)
    assert queue.batches == []


def test_batch_with_a_failing_queue_counts_everything_skipped(
    uow: UnitOfWork,
    session_factory: sessionmaker[Session],
    make_record: Callable[..., int],
    failing_queue: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = [make_record(5), make_record(3), make_record(4)]
    with caplog.at_level(logging.ERROR, logger="services.usecases.admin"):
        result = admin.batch_regenerate_report(uow, failing_queue, ids)
    assert (result.success_count, result.skipped_count) == (0, 3)
    assert failing_queue.calls == 1
    assert [state(session_factory, i)[0] for i in ids] == [3, 3, 4]
    assert any(r.exc_info for r in caplog.records if r.name == "services.usecases.admin")


def test_batch_of_a_thousand_ids_is_set_based(
    uow: UnitOfWork, session_factory: sessionmaker[Session], engine: Engine
) -> None:
    with session_factory() as s:
        ids = list(
            s.scalars(
                insert(AssessmentRecord).returning(AssessmentRecord.id),
                [{"user_id": 1, "status": 5 if i % 2 else 4} for i in range(1000)],
            )
        )
        s.commit()
    queue = RecordingQueue()
    with count_statements(engine) as statements:
        result = admin.batch_regenerate_report(uow, queue, ids)
    assert (result.success_count, result.skipped_count) == (500, 500)
    assert len(queue.batches) == 1
    assert len(queue.batches[0]) == 500
    # SELECT ... FOR UPDATE, UPDATE, two DELETEs, one INSERT of the events: the same for 1 id or 1,000.
    assert len(statements) == 5, statements
    with session_factory() as s:
        statuses = dict(
            s.execute(
                select(AssessmentRecord.status, func.count())
                .where(AssessmentRecord.id.in_(ids))
                .group_by(AssessmentRecord.status)
            ).all()
        )
    assert statuses == {3: 500, 4: 500}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_batch_counts_and_filtering_properties(
    uow: UnitOfWork,
    session_factory: sessionmaker[Session],
    make_record: Callable[..., int],
    data: st.DataObject,
) -> None:
    """Seed 000 property 6 (only 3/5 regenerated, the others unchanged) and 7 (counts add up)."""
    kinds = data.draw(
        st.lists(st.tuples(st.integers(1, 5), st.booleans()), min_size=1, max_size=6),
        label="records (status, deleted)",
    )
    records = {make_record(status, deleted=deleted): (status, deleted) for status, deleted in kinds}
    pool = [*records, 10**9, 10**9 + 1]
    ids = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=12), label="ids")
    queue = RecordingQueue()
    result = admin.batch_regenerate_report(uow, queue, ids)

    assert result.success_count + result.skipped_count == len(ids)
    eligible = list(
        dict.fromkeys(i for i in ids if i in records and records[i][0] in (3, 5) and not records[i][1])
    )
    assert result.success_count == len(eligible)
    assert queue.batches == ([eligible] if eligible else [])
    for record_id, (status, deleted) in records.items():
        expected = 3 if record_id in eligible else status
        assert state(session_factory, record_id)[0] == expected, (record_id, status, deleted)


# -- list_records and soft delete ------------------------------------------------------------


def test_list_records_filters_orders_and_pages(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: Callable[..., int]
) -> None:
    ids = [make_record(status, user_id=user) for user in (1, 2) for status in (1, 3, 5)]
    deleted = make_record(5, user_id=1, deleted=True)
    base = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)
    with session_factory() as s:
        for n, record_id in enumerate([*ids, deleted]):
            s.execute(
                text("UPDATE assessment_records SET created_at = :t WHERE id = :id"),
                {"t": base + timedelta(days=n), "id": record_id},
            )
        s.commit()

    everything = admin.list_records(uow, RecordFilter())
    assert [r.id for r in everything.items] == sorted(ids, reverse=True)
    assert (everything.total, everything.page, everything.page_size) == (6, 1, 20)
    assert everything.items[0].status_name == "生成失败"

    assert admin.list_records(uow, RecordFilter(include_deleted=True)).total == 7
    assert admin.list_records(uow, RecordFilter(include_deleted=True)).items[0].is_deleted
    assert [r.id for r in admin.list_records(uow, RecordFilter(status=5)).items] == [ids[5], ids[2]]
    assert [r.id for r in admin.list_records(uow, RecordFilter(user_id=2, status=1)).items] == [ids[3]]
    window = RecordFilter(created_from=base + timedelta(days=1), created_to=base + timedelta(days=3))
    assert [r.id for r in admin.list_records(uow, window).items] == [ids[2], ids[1]]
    naive = RecordFilter(created_from=datetime(2025, 1, 20, 10, 30))  # taken as UTC
    assert [r.id for r in admin.list_records(uow, naive, page_size=100).items] == [ids[5]]

    page2 = admin.list_records(uow, RecordFilter(), page=2, page_size=4)
    assert [r.id for r in page2.items] == sorted(ids, reverse=True)[4:]
    assert (page2.total, page2.pages) == (6, 2)
    assert admin.list_records(uow, RecordFilter(), page=9, page_size=4).items == []


@pytest.mark.parametrize(
    ("filters", "page", "page_size"),
    [
        (RecordFilter(), 0, 20),
        (RecordFilter(), 1, 0),
        (RecordFilter(), 1, 101),
        (RecordFilter(status=6), 1, 20),
        (RecordFilter(user_id=0), 1, 20),
        (
            RecordFilter(
                created_from=datetime(2025, 2, 1, tzinfo=UTC), created_to=datetime(2025, 1, 1, tzinfo=UTC)
            ),
            1,
            20,
        ),
    ],
)
def test_list_records_rejects_bad_parameters(
    uow: UnitOfWork, filters: RecordFilter, page: int, page_size: int
) -> None:
    with pytest.raises(ParamError):
        admin.list_records(uow, filters, page, page_size)


def test_soft_delete(uow: UnitOfWork, make_record: Callable[..., int]) -> None:
    record_id = make_record(5)
    admin.soft_delete_record(uow, record_id)
    assert admin.list_records(uow, RecordFilter()).total == 0
    with pytest.raises(RecordNotFound):
        admin.soft_delete_record(uow, record_id)
    with pytest.raises(RecordNotFound):
        admin.regenerate_report(uow, RecordingQueue(), record_id)
    with pytest.raises(RecordNotFound):
        admin.soft_delete_record(uow, 999_999)
