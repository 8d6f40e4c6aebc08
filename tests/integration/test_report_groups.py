"""A batch of report jobs in one transaction, one outcome per job (services/usecases/report_groups.py),
against the real PostgreSQL."""

from __future__ import annotations

import logging
import multiprocessing
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from multiprocessing.synchronize import Event as EventType
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from services.domain.errors import ServiceError
from services.domain.questionnaire import load_questionnaire
from services.persistence import report_sql
from services.persistence.db import make_engine, make_session_factory
from services.persistence.driver import Work
from services.persistence.uow import UnitOfWork
from services.usecases.drill import FaultDrillFailure
from services.usecases.report_groups import Job, ReportGroups
from services.usecases.reports import Deferred, Generation, GenerationOutcome, generate_one, generate_reports
from tests.integration.test_report_generation import expected_scores, snapshot
from tests.support.processes import row_locked, sessions_waiting_for_a_lock, wait_until
from tests.support.urls import CLOSED_DATABASE_URL

GENERATED = Generation(GenerationOutcome.GENERATED)
SKIPPED = Generation(GenerationOutcome.SKIPPED)
MakeRecord = Callable[..., int]


def varied_answers(seed: int) -> dict[int, int]:
    """A full set of answers that differs from record to record, so each has its own scores."""
    return {q.id: (q.id * 7 + seed) % 5 + 1 for q in load_questionnaire().questions}


def good_record(make_record: MakeRecord, seed: int) -> int:
    return make_record(3, answers=varied_answers(seed))


def outcomes(groups: ReportGroups, jobs: Sequence[Job]) -> list[Generation]:
    """`groups.generate(jobs)`: each job's outcome, in the order of `jobs` (each exactly once)."""
    found: dict[int, Generation] = {}
    for index, generation in groups.generate(jobs):
        assert index not in found, (index, generation)
        found[index] = generation
    assert sorted(found) == list(range(len(jobs)))
    return [found[i] for i in range(len(jobs))]


def generate_one_job(groups: ReportGroups, record_id: int, attempt: int | None = None) -> Generation:
    """The outcome of a batch of one job (a message outside a batch)."""
    [generation] = outcomes(groups, [Job(record_id, attempt)])
    return generation


def run_threads(groups: ReportGroups, batches: Sequence[Sequence[int]]) -> list[list[Generation]]:
    """Each batch of record ids generated on a thread of its own, all at once; outcomes in order."""
    results: list[list[Generation]] = [[] for _ in batches]
    barrier = threading.Barrier(len(batches), timeout=60)

    def run(index: int) -> None:
        barrier.wait()
        results[index] = outcomes(groups, [Job(r, None) for r in batches[index]])

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a generation never returned"
    return results


def outcome(result: Generation | Deferred) -> Generation | Deferred:
    """A Generation with its outcome only (its latency varies), a Deferred as it is."""
    return Generation(result.outcome) if isinstance(result, Generation) else result


def failed_with(
    result: Generation | Deferred, error: type[BaseException] | tuple[type[BaseException], ...]
) -> str:
    """Assert the job FAILED with an error of this type; its text."""
    assert isinstance(result, Generation), result
    assert result.outcome is GenerationOutcome.FAILED, result
    assert isinstance(result.error, error), result.error
    assert result.detail == str(result.error)
    return str(result.error)


def assert_generated(session_factory: sessionmaker[Session], record_id: int) -> None:
    snap = snapshot(session_factory, record_id)
    assert snap["status"] == 4
    assert snap["completed"]
    assert snap["results"] == expected_scores(session_factory, record_id)
    assert len(snap["summaries"]) == 1


def assert_untouched(session_factory: sessionmaker[Session], record_id: int, status: int = 3) -> None:
    assert snapshot(session_factory, record_id) == {
        "status": status,
        "completed": False,
        "results": [],
        "summaries": [],
    }


def test_each_record_of_a_group_gets_its_own_outcome(
    uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: MakeRecord
) -> None:
    good = [good_record(make_record, seed) for seed in range(3)]
    not_generating = make_record(2, answers=varied_answers(9))
    no_answers = make_record(3, answers={})
    deleted = make_record(3, deleted=True)
    missing = 999_999
    ids = [good[0], not_generating, no_answers, good[1], deleted, missing, good[2], good[0]]

    results = generate_reports(uow, ids)

    assert [outcome(r) for r in results[:2]] == [GENERATED, SKIPPED]
    assert "答案不完整" in failed_with(results[2], ServiceError)
    assert [outcome(r) for r in results[3:]] == [GENERATED, SKIPPED, SKIPPED, GENERATED, SKIPPED]
    for record_id in good:
        assert_generated(session_factory, record_id)
    assert_untouched(session_factory, not_generating, status=2)
    assert_untouched(session_factory, no_answers)
    assert_untouched(session_factory, deleted)
    # Each record its own scores: the group did not mix them up.
    assert len({tuple(snapshot(session_factory, r)["results"]) for r in good}) == 3


def test_a_batch_run_as_one_group_settles_each_job_on_its_own(
    session_factory: sessionmaker[Session], make_record: MakeRecord
) -> None:
    good = [good_record(make_record, seed) for seed in range(3)]
    no_answers = make_record(3, answers={})
    sizes: list[int] = []
    groups = ReportGroups(lambda: UnitOfWork(session_factory), on_group=sizes.append)
    jobs = [Job(r, 1) for r in [good[0], 0, no_answers, good[1], good[2], good[0]]]

    results = outcomes(groups, jobs)

    assert [outcome(r) for r in results[:2]] == [GENERATED, SKIPPED]  # 0: not a valid id
    assert results[1].detail == "not a valid record id"
    failed_with(results[2], ServiceError)
    assert [outcome(r) for r in results[3:]] == [GENERATED, GENERATED, SKIPPED]  # the duplicate
    assert sizes == [5]  # one group: the valid ids, in one transaction
    for record_id in good:
        assert_generated(session_factory, record_id)
    assert_untouched(session_factory, no_answers)


def test_a_batch_whose_group_fails_runs_each_record_alone(
    session_factory: sessionmaker[Session],
    make_record: MakeRecord,
    refused_insert: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = make_record(3, user_id=refused_insert, answers=varied_answers(1))
    others = [good_record(make_record, seed) for seed in (2, 3)]
    sizes: list[int] = []
    groups = ReportGroups(lambda: UnitOfWork(session_factory), on_group=sizes.append)

    results = outcomes(groups, [Job(r, 1) for r in [others[0], bad, others[1]]])

    # Its own database error, from its run alone (raised at its commit, through SQLAlchemy).
    assert "refused results of record" in failed_with(results[1], (psycopg.Error, DBAPIError))
    assert [outcome(results[0]), outcome(results[2])] == [GENERATED, GENERATED]
    assert sizes == [3]  # one group; the runs alone are not groups
    for record_id in others:
        assert_generated(session_factory, record_id)
    assert_untouched(session_factory, bad)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("group of 3 reports failed" in m and "each runs again alone" in m for m in warnings)


def test_an_unreachable_database_is_an_unknown_outcome_for_every_job() -> None:
    """Nothing was done: no job's failure (UNKNOWN: back to the queue uncounted, the gate closed)."""
    engine = make_engine(CLOSED_DATABASE_URL, pool_size=1, connect_timeout_s=1)
    try:
        groups = ReportGroups(lambda: UnitOfWork(make_session_factory(engine)))
        batch = outcomes(groups, [Job(1, 1), Job(0, 1), Job(2, 1)])
        alone = run_threads(groups, [[3], [4], [5]])
    finally:
        engine.dispose()
    assert [r.outcome for r in batch] == [
        GenerationOutcome.UNKNOWN,
        GenerationOutcome.SKIPPED,  # not a valid id: needs no database
        GenerationOutcome.UNKNOWN,
    ]
    assert [r.outcome for [r] in alone] == [GenerationOutcome.UNKNOWN] * 3
    for result in [batch[0], batch[2], *(r for [r] in alone)]:
        assert result.error is None
        assert "database unreachable" in result.detail


def submit_at(engine: Engine, record_id: int, ago: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE assessment_records SET submitted_at = now() - CAST(:ago AS interval),"
                " updated_at = now() - CAST(:ago AS interval) WHERE id = :id"
            ),
            {"id": record_id, "ago": ago},
        )


def test_a_group_reads_back_each_records_latency(
    uow: UnitOfWork, engine: Engine, make_record: MakeRecord
) -> None:
    submitted, unsubmitted = good_record(make_record, 1), good_record(make_record, 2)
    regenerated = good_record(make_record, 4)
    # As a submission writes them: submitted_at and updated_at together (the model's onupdate).
    submit_at(engine, submitted, "90 seconds")
    # Submitted an hour ago, regenerated 5 s ago (the reset sets updated_at): counted from then.
    submit_at(engine, regenerated, "1 hour")
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE assessment_records SET updated_at = now() - interval '5 seconds' WHERE id = :id"),
            {"id": regenerated},
        )
        # In 3 without a submission time (rows the product did not write: an import, a hand edit).
        conn.execute(
            text("UPDATE assessment_records SET submitted_at = NULL WHERE id = :id"), {"id": unsubmitted}
        )
    first, second, third = generate_reports(uow, [submitted, unsubmitted, regenerated])
    assert isinstance(first, Generation)
    assert first.latency_s is not None
    assert 90 <= first.latency_s < 90 + 600
    assert isinstance(second, Generation)
    assert (second.outcome, second.latency_s) == (GenerationOutcome.GENERATED, None)  # no submission time
    # Each names its report's moment (its event's), read back by the same write.
    with engine.connect() as conn:
        stored: dict[int, object] = dict(
            conn.execute(
                text("SELECT id, completed_at FROM assessment_records WHERE id = ANY(:ids)"),
                {"ids": [submitted, unsubmitted]},
            ).all()
        )
    assert (first.report_at, second.report_at) == (stored[submitted], stored[unsubmitted])
    assert isinstance(third, Generation)
    assert third.latency_s is not None
    assert 5 <= third.latency_s < 600  # not the hour since its first submission
    # The single-record path reads it back the same way.
    again = good_record(make_record, 3)
    submit_at(engine, again, "5 seconds")
    alone = generate_one(uow, again)
    assert alone.latency_s is not None
    assert 5 <= alone.latency_s < 5 + 600


def test_an_empty_group_does_nothing(uow: UnitOfWork, session_factory: sessionmaker[Session]) -> None:
    assert generate_reports(uow, []) == []
    sizes: list[int] = []
    groups = ReportGroups(lambda: UnitOfWork(session_factory), on_group=sizes.append)
    assert list(groups.generate([])) == []
    assert (
        outcomes(groups, [Job(0, 1), Job(-1, 1)])
        == [Generation(GenerationOutcome.SKIPPED, detail="not a valid record id")] * 2
    )
    assert sizes == []  # no group: nothing to generate


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    records=st.integers(min_value=1, max_value=12),
    picks=st.lists(st.integers(min_value=0, max_value=11), min_size=1, max_size=24),
    threads=st.integers(min_value=1, max_value=8),
)
def test_many_threads_on_one_generator_generate_each_record_exactly_once(
    session_factory: sessionmaker[Session],
    make_record: MakeRecord,
    records: int,
    picks: list[int],
    threads: int,
) -> None:
    """Batches of jobs on threads at once (a record may have several jobs, in one batch or in
    several: redeliveries, a regeneration): each report is generated exactly once."""
    ids = [good_record(make_record, seed) for seed in range(records)]
    jobs = [ids[p % records] for p in picks]
    batches = [jobs[i::threads] for i in range(threads) if jobs[i::threads]]
    sizes: list[int] = []
    groups = ReportGroups(lambda: UnitOfWork(session_factory), on_group=sizes.append)
    results = [r for batch in run_threads(groups, batches) for r in batch]
    ordered = [j for batch in batches for j in batch]
    for record_id in set(jobs):
        mine = [outcome(r) for j, r in zip(ordered, results, strict=True) if j == record_id]
        assert sorted(map(str, mine)) == sorted(map(str, [GENERATED] + [SKIPPED] * (len(mine) - 1))), mine
        assert_generated(session_factory, record_id)
    assert sorted(sizes) == sorted(len(batch) for batch in batches)  # one group per batch


@pytest.fixture
def refused_insert(engine: Engine) -> Iterator[int]:
    """A trigger that makes PostgreSQL refuse the results of records of user 666: a real
    database error in the middle of a group's transaction. Yields that user id."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE FUNCTION mi_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
                " BEGIN"
                "  IF EXISTS (SELECT 1 FROM assessment_records WHERE id = NEW.record_id AND user_id = 666)"
                "  THEN RAISE EXCEPTION 'refused results of record %', NEW.record_id; END IF;"
                "  RETURN NEW;"
                " END $$"
            )
        )
        conn.execute(
            text(
                "CREATE TRIGGER mi_test_refuse BEFORE INSERT ON dimension_results"
                " FOR EACH ROW EXECUTE FUNCTION mi_test_refuse()"
            )
        )
    try:
        yield 666
    finally:
        with engine.begin() as conn:
            conn.execute(text("DROP TRIGGER IF EXISTS mi_test_refuse ON dimension_results"))
            conn.execute(text("DROP FUNCTION IF EXISTS mi_test_refuse()"))


def generate_waiting_on_its_lock(
    groups: ReportGroups, record_id: int, database_url: str
) -> tuple[threading.Thread, list[Generation]]:
    """The record's job (a batch of one) in a thread of its own, once it waits on the record's
    row lock (held by the caller): the thread, and the list its outcome goes in."""
    results: list[Generation] = []
    alone = threading.Thread(target=lambda: results.append(generate_one_job(groups, record_id)))
    alone.start()
    wait_until(
        lambda: sessions_waiting_for_a_lock(database_url) >= 1,
        timeout=30,
        what="the locked record's job waiting on its lock",
    )
    return alone, results


def test_a_record_locked_elsewhere_leaves_the_group_and_waits_alone(
    settings: Settings, uow: UnitOfWork, session_factory: sessionmaker[Session], make_record: MakeRecord
) -> None:
    locked, *free = (good_record(make_record, seed) for seed in range(3))
    with row_locked(settings.database_url, locked):
        # The group does not wait for the lock: the free records are generated at once.
        assert [outcome(r) for r in generate_reports(uow, [locked, *free])] == [
            Deferred.LOCKED,
            GENERATED,
            GENERATED,
        ]
        assert_untouched(session_factory, locked)
        # Through the generator: the locked record's job waits alone, on the lock, as a job
        # always did; a second record's jobs are not held up by it meanwhile.
        groups = ReportGroups(lambda: UnitOfWork(session_factory))
        alone, waiting = generate_waiting_on_its_lock(groups, locked, settings.database_url)
        later = good_record(make_record, 7)
        assert generate_one_job(groups, later).outcome is GenerationOutcome.GENERATED
        assert waiting == []
    alone.join(30)
    assert [outcome(r) for r in waiting] == [GENERATED]
    for record_id in [locked, *free, later]:
        assert_generated(session_factory, record_id)


def test_a_batch_gives_its_other_outcomes_before_its_locked_record_waits(
    settings: Settings, session_factory: sessionmaker[Session], make_record: MakeRecord
) -> None:
    """A record locked elsewhere must not hold the rest of its batch: their outcomes come
    (committed) while the locked record's job still waits alone, on the lock."""
    locked, *free = (good_record(make_record, seed) for seed in range(4))
    groups = ReportGroups(lambda: UnitOfWork(session_factory))
    jobs = [Job(free[0], 1), Job(locked, 1), Job(free[1], 1), Job(free[2], 1)]
    generation = groups.generate(jobs)
    with row_locked(settings.database_url, locked):
        first = [next(generation) for _ in free]
        assert [(index, outcome(r)) for index, r in first] == [(0, GENERATED), (2, GENERATED), (3, GENERATED)]
        for record_id in free:
            assert_generated(session_factory, record_id)
        rest: list[tuple[int, Generation]] = []
        waiting = threading.Thread(target=lambda: rest.extend(generation))
        waiting.start()
        wait_until(
            lambda: sessions_waiting_for_a_lock(settings.database_url) >= 1,
            timeout=30,
            what="the locked record's job waiting on its lock",
        )
        assert rest == []
    waiting.join(30)
    assert [(index, outcome(r)) for index, r in rest] == [(1, GENERATED)]
    assert_generated(session_factory, locked)


def _generate_in_a_process(
    database_url: str, record_ids: list[int], threads: int, go: EventType, out: Any
) -> None:
    """A worker process of its own: `threads` threads sharing one ReportGroups, each generating
    its records in batches of a few (in the order given, so two processes' batches overlap)."""
    engine = make_engine(database_url, pool_size=threads)
    factory = make_session_factory(engine)
    groups = ReportGroups(lambda: UnitOfWork(factory))
    found: dict[int, list[str]] = {}
    lock = threading.Lock()

    def work(mine: list[int]) -> None:
        for start in range(0, len(mine), 3):
            batch = mine[start : start + 3]
            for index, generation in groups.generate([Job(r, None) for r in batch]):
                with lock:
                    found.setdefault(batch[index], []).append(str(generation.outcome))

    go.wait(60)
    workers = [
        threading.Thread(target=work, args=(record_ids[i::threads],), daemon=True) for i in range(threads)
    ]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)  # a thread still running: its outcomes are missing, which the test asserts
    engine.dispose()
    out.put(found)


@pytest.mark.parametrize("order", ["same", "reversed"])
def test_two_processes_racing_on_the_same_records_write_each_report_once(
    settings: Settings, session_factory: sessionmaker[Session], make_record: MakeRecord, order: str
) -> None:
    ids = [good_record(make_record, seed) for seed in range(40)]
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    second = ids if order == "same" else ids[::-1]
    processes = [
        ctx.Process(
            target=_generate_in_a_process, args=(settings.database_url, job_ids, 8, go, out), daemon=True
        )
        for job_ids in (ids, second)
    ]
    for p in processes:
        p.start()
    go.set()
    found = [out.get(timeout=120), out.get(timeout=120)]
    for p in processes:
        p.join(30)
        assert p.exitcode == 0
    for record_id in ids:
        outcomes = sorted(found[0][record_id] + found[1][record_id])
        assert outcomes == ["generated", "skipped"], (record_id, outcomes)
        assert_generated(session_factory, record_id)


def test_drilled_records_of_a_group_fail_alone_and_are_not_touched(
    session_factory: sessionmaker[Session], make_record: MakeRecord
) -> None:
    drilled, *free = (good_record(make_record, seed) for seed in range(3))
    asked: list[list[int]] = []

    def in_drill(record_ids: Sequence[int]) -> set[int]:
        asked.append(sorted(record_ids))
        return {drilled} & set(record_ids)

    groups = ReportGroups(lambda: UnitOfWork(session_factory), drilled=in_drill)
    results = outcomes(groups, [Job(r, 1) for r in [drilled, *free]])

    # The drilled job fails with the drill's failure, its own; the others are generated.
    assert str(drilled) in failed_with(results[0], FaultDrillFailure)
    assert [outcome(r) for r in results[1:]] == [GENERATED, GENERATED]
    assert_untouched(session_factory, drilled)
    for record_id in free:
        assert_generated(session_factory, record_id)
    # Asked once per batch, not per job.
    assert asked == [sorted([drilled, *free])]


def test_a_drilled_failure_is_dated_before_the_drill_read_the_records_state(
    session_factory: sessionmaker[Session], make_record: MakeRecord
) -> None:
    """Another job of the record may commit its report right after the drill read status 3;
    the drilled attempt's failure is dated before that read, so it never follows the report."""
    drilled, free = good_record(make_record, 1), good_record(make_record, 2)
    asked_at: list[datetime] = []

    def in_drill(record_ids: Sequence[int]) -> set[int]:
        asked_at.append(datetime.now(UTC))
        return {drilled} & set(record_ids)

    groups = ReportGroups(lambda: UnitOfWork(session_factory), drilled=in_drill)
    before = datetime.now(UTC)
    failure, generated = outcomes(groups, [Job(drilled, 1), Job(free, 1)])

    failed_with(failure, FaultDrillFailure)
    assert failure.failed_at is not None
    assert before <= failure.failed_at <= asked_at[0]  # decided before the drill and the status were read
    assert outcome(generated) == GENERATED


def test_a_drilled_record_of_a_failed_group_still_fails_by_the_drill(
    session_factory: sessionmaker[Session],
    make_record: MakeRecord,
    refused_insert: int,
) -> None:
    bad = make_record(3, user_id=refused_insert, answers=varied_answers(1))
    drilled = good_record(make_record, 2)
    asked: list[list[int]] = []

    def in_drill(record_ids: Sequence[int]) -> set[int]:
        # Put into the drill after the group's check: the job's check alone, once the group
        # failed, decides before the record runs alone.
        asked.append(sorted(record_ids))
        return {drilled} if list(record_ids) == [drilled] else set()

    groups = ReportGroups(lambda: UnitOfWork(session_factory), drilled=in_drill)
    results = outcomes(groups, [Job(r, 1) for r in [bad, drilled]])

    failed_with(results[0], (psycopg.Error, DBAPIError))
    failed_with(results[1], FaultDrillFailure)
    assert_untouched(session_factory, bad)
    assert_untouched(session_factory, drilled)
    assert sorted(asked) == sorted([sorted([bad, drilled]), [bad], [drilled]])


def fail_once(
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    error: Exception,
    *,
    after_running: bool = False,
    then: Callable[[], None] | None = None,
) -> None:
    """The next call of `report_sql.<name>` ("read" or "write") raises `error` (after doing its
    work when `after_running`: a COMMIT that landed with its reply lost) and calls `then` first;
    later calls are the real ones."""
    real = getattr(report_sql, name)

    def once(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(report_sql, name, real)
        if after_running:
            real(*args, **kwargs)
        if then is not None:
            then()
        raise error

    monkeypatch.setattr(report_sql, name, once)


def test_a_group_whose_commit_landed_but_whose_reply_was_lost_reports_its_records_generated(
    session_factory: sessionmaker[Session], make_record: MakeRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection lost with the group's COMMIT in the pipeline: the commit landed, the
    worker saw an error, and the record's run alone found it in status 4. It was the group's
    report: GENERATED, its report.generated committed with it (found by the soak, bench/soak.py:
    the job said "skipped" and the record's timeline lacked its report)."""
    record_id = good_record(make_record, 0)
    lost = psycopg.OperationalError("cannot exit pipeline mode while busy")
    fail_once(monkeypatch, "write", lost, after_running=True)
    groups = ReportGroups(lambda: UnitOfWork(session_factory))
    assert outcome(generate_one_job(groups, record_id, attempt=2)) == GENERATED
    assert_generated(session_factory, record_id)
    with session_factory() as session:
        events = session.execute(
            text("SELECT data FROM event_log WHERE record_id = :id AND event_type = 'report.generated'"),
            {"id": record_id},
        ).scalars()
        assert list(events) == [{"attempt": 2}]  # the group's, committed with its report; once


def test_a_group_whose_connection_was_lost_twice_leaves_its_records_to_the_gate(
    session_factory: sessionmaker[Session], make_record: MakeRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The group's COMMIT was in flight when the connection went, and the record's run alone
    lost its connection too (PostgreSQL restarting): whether the report exists is unknown, so
    the job's outcome is UNKNOWN (no attempt spent, the gate holds it), not a failed
    attempt. Found by the soak: such a job logged "attempt 1 failed" after the record's
    report, which its redelivery had already found committed."""
    record_id = good_record(make_record, 0)
    fail_once(
        monkeypatch,
        "write",
        psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly"),
        after_running=True,
        then=lambda: fail_once(monkeypatch, "read", psycopg.OperationalError("the connection is closed")),
    )
    groups = ReportGroups(lambda: UnitOfWork(session_factory))
    unknown = generate_one_job(groups, record_id)
    assert (unknown.outcome, unknown.error) == (GenerationOutcome.UNKNOWN, None)
    assert unknown.detail.startswith("database lost twice, the outcome unknown")
    # The gate's next delivery finds the group's report.
    again = generate_one_job(groups, record_id)
    assert (again.outcome, again.detail) == (GenerationOutcome.SKIPPED, "record in status 4")
    assert again.report_at is not None
    assert_generated(session_factory, record_id)


def test_a_statement_error_alone_after_a_lost_group_is_still_the_records_failure(
    session_factory: sessionmaker[Session], make_record: MakeRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a connection lost again makes the outcome unknown: an error of the record's own
    statements, alone, is its failure (retried on the schedule, dead-lettered at last)."""
    record_id = good_record(make_record, 0)
    fail_once(
        monkeypatch,
        "write",
        psycopg.OperationalError("server closed the connection unexpectedly"),
        then=lambda: fail_once(monkeypatch, "read", psycopg.errors.DataError("invalid input")),
    )
    groups = ReportGroups(lambda: UnitOfWork(session_factory))
    failed_with(generate_one_job(groups, record_id), psycopg.errors.DataError)
    assert_untouched(session_factory, record_id)


def test_a_record_alone_whose_commit_landed_but_whose_reply_was_lost_is_generated(
    session_factory: sessionmaker[Session], make_record: MakeRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The single-record path's own COMMIT in flight when the connection went (the group
    failed on a statement error, the record ran alone, and its write lost the reply): the
    report is committed, so the job is GENERATED, not a failed attempt. Found by the 60-minute
    soak: "cannot exit pipeline mode while busy" failed an attempt after its report was
    committed, and the retry found it."""
    record_id = good_record(make_record, 0)
    fail_once(
        monkeypatch,
        "write",
        psycopg.errors.DataError("invalid input"),
        then=lambda: fail_once(
            monkeypatch,
            "write",
            psycopg.OperationalError("cannot exit pipeline mode while busy"),
            after_running=True,
        ),
    )
    groups = ReportGroups(lambda: UnitOfWork(session_factory))
    generation = generate_one_job(groups, record_id)
    assert (generation.outcome, generation.detail) == (GenerationOutcome.GENERATED, "committed, reply lost")
    assert generation.report_at is not None
    assert_generated(session_factory, record_id)


def test_a_locked_record_alone_whose_commit_landed_but_whose_reply_was_lost_is_generated(
    settings: Settings,
    session_factory: sessionmaker[Session],
    make_record: MakeRecord,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same on the path of a record another transaction held: the group left it, it
    waited alone for the lock, and its COMMIT landed with the reply lost."""
    record_id = good_record(make_record, 0)
    groups = ReportGroups(lambda: UnitOfWork(session_factory))
    with row_locked(settings.database_url, record_id):
        fail_once(
            monkeypatch, "write", psycopg.OperationalError("server closed the connection"), after_running=True
        )
        alone, results = generate_waiting_on_its_lock(groups, record_id, settings.database_url)
    alone.join(30)
    assert [outcome(r) for r in results] == [GENERATED]
    assert_generated(session_factory, record_id)


def test_a_record_alone_that_loses_its_connection_before_its_commit_generates_on_the_second_try(
    session_factory: sessionmaker[Session], make_record: MakeRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection lost on the single-record path before anything was written is not the
    record's failure either: one more try generates the report."""
    record_id = good_record(make_record, 0)
    fail_once(
        monkeypatch,
        "write",
        psycopg.errors.DataError("invalid input"),
        then=lambda: fail_once(monkeypatch, "read", psycopg.OperationalError("the connection is closed")),
    )
    groups = ReportGroups(lambda: UnitOfWork(session_factory))
    generation = generate_one_job(groups, record_id)
    assert (generation.outcome, generation.detail) == (GenerationOutcome.GENERATED, "")
    assert_generated(session_factory, record_id)


def test_a_pipeline_that_cannot_end_does_not_poison_the_pool(
    settings: Settings, make_record: MakeRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg could not leave pipeline mode after the group's COMMIT ("cannot exit pipeline mode
    while busy"): that connection must not go back to the pool, or the record's run alone gets
    it and fails ("can't change 'autocommit' now: connection in transaction status ACTIVE";
    found by the soak). One pooled connection, so the run alone would get the same one."""
    engine = make_engine(settings.database_url, pool_size=1, max_overflow=0)
    factory = make_session_factory(engine)
    record_id = good_record(make_record, 0)
    real_exit = psycopg.Pipeline.__exit__

    def exit_fails_busy(self: psycopg.Pipeline, *exc_info: Any) -> None:
        # Once, after the COMMIT landed, leaving the pipeline in place as the failed exit does.
        monkeypatch.setattr(psycopg.Pipeline, "__exit__", real_exit)
        self._conn.execute("SELECT pg_sleep(0.2)")  # a reply still pending: the connection is busy
        raise psycopg.OperationalError("cannot exit pipeline mode while busy")

    real_write = report_sql.write

    def write_and_fail_to_exit(
        work: Work, reports: dict[int, Any], **options: Any
    ) -> dict[int, report_sql.Completed]:
        monkeypatch.setattr(report_sql, "write", real_write)
        monkeypatch.setattr(psycopg.Pipeline, "__exit__", exit_fails_busy)
        return real_write(work, reports, **options)

    monkeypatch.setattr(report_sql, "write", write_and_fail_to_exit)
    try:
        groups = ReportGroups(lambda: UnitOfWork(factory))
        generation = generate_one_job(groups, record_id)
        assert (generation.outcome, generation.detail) == (
            GenerationOutcome.GENERATED,
            "committed, reply lost",
        )
        assert_generated(factory, record_id)
        with UnitOfWork(factory) as uow:  # the pool's connection works
            assert uow.session.connection().exec_driver_sql("SELECT 42").scalar() == 42
    finally:
        engine.dispose()


def test_a_groups_connection_stays_out_of_the_pool_until_its_pipeline_ends(
    settings: Settings, make_record: MakeRecord, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write's COMMIT is inside its pipeline; the connection must not be back in the pool
    before the pipeline ends, or another thread takes it and its statements run through this
    pipeline (the soak's "cannot exit pipeline mode while busy" under 16 threads)."""
    engine = make_engine(settings.database_url, pool_size=2, max_overflow=0)
    factory = make_session_factory(engine)
    checked_out_at_exit: list[int] = []
    real_exit = psycopg.Pipeline.__exit__

    def exit_counting(self: psycopg.Pipeline, *exc_info: Any) -> None:
        checked_out_at_exit.append(engine.pool.checkedout())  # type: ignore[attr-defined]
        real_exit(self, *exc_info)

    records = [good_record(make_record, 0), good_record(make_record, 1)]
    monkeypatch.setattr(psycopg.Pipeline, "__exit__", exit_counting)
    try:
        generate_reports(UnitOfWork(factory), records)
    finally:
        monkeypatch.setattr(psycopg.Pipeline, "__exit__", real_exit)
        engine.dispose()
    assert checked_out_at_exit == [1, 1]  # the read's pipeline and the write's
