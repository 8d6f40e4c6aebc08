"""Report generation: what a worker does with the messages of `report:queue`.

A record's report is written in one transaction, row-locked on the record and idempotent:
it only acts on a record in status 3 and leaves it in 4, so a second run, a redelivered
message or a racing worker finds nothing to do and reports SKIPPED (the message is then
acknowledged, not retried). A record that cannot be scored is FAILED with its
`ServiceError`, and database errors propagate, so the worker retries and finally
dead-letters the message and calls `mark_generation_failed`.

The worker generates a batch of jobs in one transaction (`generate_reports`, through
services/usecases/report_groups.py); `generate_one` is the single-record path a record
locked elsewhere falls back to: the same set-based SQL with one id
(services/persistence/report_sql.py). `generate_report` is `generate_one`'s outcome alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import Enum, StrEnum
from typing import Any

from services.domain.errors import ParamError, ServiceError
from services.domain.events import EventType
from services.domain.limits import MAX_ID
from services.domain.scoring import DimensionSpec, QuestionSpec, Scorer, ScoreReport, format_ids
from services.domain.status import RecordStatus
from services.persistence import report_sql
from services.persistence.uow import UnitOfWork
from services.usecases.change_events import log_change

#: Who a report's `report.generated` event names as its actor (the worker's generation).
GENERATOR_ACTOR = "worker"


class GenerationOutcome(StrEnum):
    """What became of one job's generation."""

    #: Its report was committed (with its `report.generated`).
    GENERATED = "generated"
    #: Nothing to do: the record is missing, deleted, not in status 3, or the id is invalid.
    SKIPPED = "skipped"
    #: The record's own failure (`Generation.error`): retried on the schedule, dead-lettered at last.
    FAILED = "failed"
    #: Not known, and not the record's failure: the database could not be reached, or the
    #: connection was lost with a COMMIT in flight and again when it was checked. The job goes
    #: back to its queue uncounted; its next delivery finds what was committed.
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Generation:
    """What generating one record's report did: one per job."""

    outcome: GenerationOutcome
    #: Seconds from the record's submission to its report (completed_at - submitted_at, by the
    #: database's clock, read back from the write itself): the latency operators watch. None
    #: unless GENERATED, or when the record has no submission time.
    latency_s: float | None = None
    #: Why: a SKIPPED record's reason ("record in status 4"), a FAILED one's error text, an
    #: UNKNOWN one's cause; for its job's log line.
    detail: str = ""
    #: The moment of the report the record has in status 4 after this job: the one it
    #: generated or, SKIPPED in status 4, the one it found (None otherwise). Its
    #: `report.generated` event was committed with it, at that moment.
    report_at: datetime | None = None
    #: FAILED: what the job fails with (a `ServiceError`, a database error, the fault drill's
    #: `FaultDrillFailure`), for the retry schedule and the failure's event.
    error: Exception | None = None
    #: FAILED: when the failure was decided, when earlier than its event (the fault drill's
    #: decision, taken before it read the record's state); None: when the event is made.
    failed_at: datetime | None = None

    @classmethod
    def failed(cls, error: Exception, *, at: datetime | None = None) -> Generation:
        return cls(GenerationOutcome.FAILED, detail=str(error), error=error, failed_at=at)

    @classmethod
    def unknown(cls, why: str) -> Generation:
        return cls(GenerationOutcome.UNKNOWN, detail=why)


@dataclass(frozen=True)
class Questionnaire:
    """The active questions and the dimensions they score, as read in a generation's transaction."""

    questions: list[QuestionSpec]
    dimensions: list[DimensionSpec]
    active: frozenset[int]
    #: Checked once for the group's records (`score` of each).
    scorer: Scorer

    @classmethod
    def of(
        cls, question_rows: Iterable[Sequence[Any]], dimension_rows: Iterable[Sequence[Any]]
    ) -> Questionnaire:
        """From the rows of `ACTIVE_QUESTIONS_SQL` and `DIMENSIONS_SQL`."""
        questions = [
            QuestionSpec(id=qid, dimension_id=did, reverse_scored=rev) for qid, did, rev in question_rows
        ]
        used = {q.dimension_id for q in questions}
        dimensions = [
            DimensionSpec(id=did, code=code, name=name, sort_order=order, description=description)
            for did, code, name, order, description in dimension_rows
            if did in used
        ]
        return cls(
            questions, dimensions, frozenset(q.id for q in questions), Scorer.of(dimensions, questions)
        )

    def score(self, record_id: int, answer_values: Mapping[int, int]) -> ScoreReport:
        """The report of a record's answers ({question id: value}); `ServiceError` when an active
        question lacks its answer (damaged data must not yield a report) or scoring refuses."""
        answers = answer_values
        # The common case, compared in C: the record answered exactly the active questions.
        if answers.keys() != self.active:
            answers = {qid: value for qid, value in answer_values.items() if qid in self.active}
        missing = self.active - answers.keys()
        if missing:
            raise ServiceError(
                f"测评记录 {record_id} 的答案不完整，缺少题目：{format_ids(missing)}，无法生成报告"
            )
        try:
            return self.scorer.score(answers)
        except ParamError as exc:
            raise ServiceError(f"测评记录 {record_id} 无法生成报告：{exc.message}") from exc


#: The outcome of a job whose record id is out of range (0, negative, beyond MAX_ID).
INVALID_ID = Generation(GenerationOutcome.SKIPPED, detail="not a valid record id")


def generate_report(uow: UnitOfWork, record_id: int) -> GenerationOutcome:
    """Generate the report of record `record_id` alone (see `generate_one`): its outcome;
    raises the record's `ServiceError` when it cannot be scored."""
    generation = generate_one(uow, record_id)
    if generation.error is not None:
        raise generation.error
    return generation.outcome


def generate_one(uow: UnitOfWork, record_id: int, *, attempt: int | None = None) -> Generation:
    """Score the answers of record `record_id` and write its results, summary and status 4.

    SKIPPED when the record is missing, soft-deleted or not in status 3 (or the id is not
    valid). FAILED with a `ServiceError` when a record in status 3 lacks answers to active
    questions (damaged data must not yield a report) or scoring refuses. Database errors
    propagate (nothing is committed then, unless the connection was lost with the COMMIT in
    flight: `services.persistence.driver.connection_lost`).

    Only active questions count: answers to a question deactivated since the submission
    are ignored, and every active question must have an answer.

    `generate_reports` with one id, waiting for the record's lock where a batch would leave
    it (services/persistence/report_sql.py: two pipelined round trips). `attempt`: the job's
    attempt, for the report's event. Logs nothing: the caller logs the outcome.
    """
    if not 1 <= record_id <= MAX_ID:
        return INVALID_ID
    (result,) = generate_reports(uow, [record_id], attempts=[attempt], wait_for_locks=True)
    if not isinstance(result, Generation):  # pragma: no cover - a waiting lock never defers
        raise TypeError(f"unexpected result {result!r}")
    return result


class Deferred(Enum):
    """A batch's answer for a record it left to the single-record path (`generate_one`)."""

    #: Locked by another transaction when the batch locked its records.
    LOCKED = "locked"


#: What `generate_reports` gives each id: its job's outcome, or the record left to run alone.
GroupResult = Generation | Deferred

#: The second job of one record in one batch: the first one's report is committed with it.
DUPLICATE = Generation(GenerationOutcome.SKIPPED, detail="record in status 4 (generated by its group)")


def generate_reports(
    uow: UnitOfWork,
    record_ids: Sequence[int],
    *,
    attempts: Sequence[int | None] | None = None,
    wait_for_locks: bool = False,
) -> list[GroupResult]:
    """Generate the reports of `record_ids` (valid ids, 1..MAX_ID) in one transaction.

    Each report generated commits with its `report.generated` event (actor GENERATOR_ACTOR,
    data ``{"attempt": n}``: `attempts[i]` is the attempt of the job of `record_ids[i]`, None
    when unknown; the first job of an id given twice names it).

    One result per id, in order: a `Generation` (GENERATED, SKIPPED, or FAILED with the
    record's `ServiceError`), or `Deferred.LOCKED` for a record another transaction holds
    (not waited for; the caller runs it alone) unless `wait_for_locks` (the single-record
    path: `generate_one`). An id given twice is generated once; its second place gets
    SKIPPED (as a second job on the record would, after the first one's commit), or a
    failure of its own with the same message. Database errors propagate (nothing is
    committed then). Logs nothing per record: the actor logs each job's outcome in that
    job's context (its message and record ids).
    """
    if not record_ids:
        return []
    unique = sorted(set(record_ids))
    with uow:
        reads = report_sql.read(uow, unique, wait_for_locks=wait_for_locks)
        questionnaire = Questionnaire.of(reads.question_rows, reads.dimension_rows)
        results: dict[int, GroupResult] = {}
        reports: dict[int, ScoreReport] = {}
        for rid in unique:
            state = reads.locked.get(rid)
            if state is None and rid in reads.existing:
                results[rid] = Deferred.LOCKED
                continue
            if state is None or state[1] or state[0] != RecordStatus.GENERATING:
                results[rid] = _skipped(state)
                continue
            try:
                reports[rid] = questionnaire.score(rid, reads.answers.get(rid, {}))
            except ServiceError as exc:
                results[rid] = Generation.failed(exc)
        completed: dict[int, report_sql.Completed] = {}
        if reports:
            completed = report_sql.write(
                uow,
                reports,
                event_data=_event_data(record_ids, attempts, reports),
                actor=GENERATOR_ACTOR,
            )
    for rid, done in completed.items():
        results[rid] = Generation(GenerationOutcome.GENERATED, latency_s=done.latency_s, report_at=done.at)

    ordered: list[GroupResult] = []
    seen: set[int] = set()
    for rid in record_ids:
        result = results[rid]
        if rid in seen and isinstance(result, Generation):
            # Each job its own error instance (an exception carries its own traceback).
            result = (
                Generation.failed(ServiceError(str(result.error)))
                if result.error is not None
                else replace(DUPLICATE, report_at=result.report_at)
            )
        seen.add(rid)
        ordered.append(result)
    return ordered


def _event_data(
    record_ids: Sequence[int], attempts: Sequence[int | None] | None, generated: Mapping[int, object]
) -> dict[int, dict[str, object]]:
    """The `report.generated` data of each record generated: its first job's attempt."""
    data: dict[int, dict[str, object]] = {}
    for index, rid in enumerate(record_ids):
        if rid in generated and rid not in data:
            data[rid] = {"attempt": attempts[index] if attempts is not None else None}
    return data


def _skipped(state: tuple[int, bool, datetime | None] | None) -> Generation:
    """The outcome of a record a generation does not act on: (status, is_deleted, completed_at)
    as locked, or None when missing. A live record in status 4 names its report's moment."""
    if state is None:
        return Generation(GenerationOutcome.SKIPPED, detail="record missing")
    status, deleted, completed_at = state
    if deleted:
        return Generation(GenerationOutcome.SKIPPED, detail="record deleted")
    found = completed_at if status == RecordStatus.COMPLETED else None
    return Generation(GenerationOutcome.SKIPPED, detail=f"record in status {status}", report_at=found)


def would_generate(uow: UnitOfWork, record_ids: Sequence[int]) -> set[int]:
    """Which of these records would a generation act on (live, in status 3); the others would be
    skipped. The fault drill fails only attempts that would really generate: one SELECT for
    all of them, asked only for drilled records."""
    valid = [rid for rid in record_ids if 1 <= rid <= MAX_ID]
    if not valid:
        return set()
    with uow:
        return uow.records.generating_among(valid)


def mark_generation_failed(
    uow: UnitOfWork,
    record_id: int,
    *,
    event_data: Mapping[str, Any] | None = None,
    actor: str | None = None,
    event_type: EventType = EventType.REPORT_DEAD_LETTERED,
) -> bool:
    """Set a record from 3 to 5 (生成失败); True if it changed, False if it was not in 3.

    With `event_data`, a change commits with its event, `event_type`
    (`report.dead_lettered`, or `report.retry_deleted` for an admin's deletion of the waiting
    retry), by `actor`, with the data and ``statusSet: true`` (services/usecases/change_events.py);
    no change writes none."""
    if not 1 <= record_id <= MAX_ID:
        return False
    with uow:
        changed = uow.records.fail_generating(record_id)
        if changed and event_data is not None:
            log_change(
                uow,
                event_type,
                [record_id],
                at=datetime.now(UTC),
                actor=actor,
                data={**event_data, "statusSet": True},
            )
        uow.commit()
    return changed
