"""The mini-program user's side: records, questions, submission, result and report.

A record the caller may not see (missing, soft-deleted, or another user's) is always
`RecordNotFound` (3241), never a "forbidden": ids of other users' records leak nothing.
Every function runs in one unit of work and commits explicitly when it writes (a write that is a
single statement may commit as it runs: `uow.autocommit()`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from services.domain.errors import (
    InvalidOperation,
    ParamError,
    QueueUnavailable,
    RecordNotFound,
    ServiceError,
)
from services.domain.events import Event, EventType, user_actor
from services.domain.interpretation import interpret
from services.domain.limits import is_id
from services.domain.questionnaire import Questionnaire, load_questionnaire
from services.domain.saved_answers import MergedAnswers, SavedAnswer, merge_submission
from services.domain.scoring import validate_answers
from services.domain.status import SUBMITTABLE, RecordStatus, status_description, status_text
from services.domain.views import (
    QuestionView,
    RecordPage,
    RecordView,
    ReportView,
    ResultStatusView,
    ScaleOptionView,
    SubmitResult,
)
from services.persistence import driver
from services.persistence.records import RecordRow
from services.persistence.uow import UnitOfWork
from services.usecases.autosave import AutosaveStore
from services.usecases.change_events import log_change, note_not_enqueued
from services.usecases.ports import ReportQueue

logger = logging.getLogger(__name__)

MSG_SUBMIT_NOT_ALLOWED = "当前状态不允许提交答案"
MSG_START_NOT_ALLOWED = "当前状态不允许开始测评"
MSG_REPORT_NOT_READY = "报告尚未生成"
#: The user's records come in pages of at most this many.
MAX_RECORDS_PAGE_SIZE = 100
DEFAULT_RECORDS_PAGE_SIZE = 20


def _check_id(value: object, what: str) -> int:
    if not is_id(value):
        raise ParamError(f"{what}必须是正整数")
    return value


def record_view(record: RecordRow) -> RecordView:
    return RecordView(
        id=record.id,
        user_id=record.user_id,
        status=int(record.status),
        status_text=status_text(record.status),
        created_at=record.created_at,
        started_at=record.started_at,
        submitted_at=record.submitted_at,
        completed_at=record.completed_at,
        report_ready=record.status == RecordStatus.COMPLETED,
    )


def _own_record(uow: UnitOfWork, user_id: int, record_id: int, *, lock: bool = False) -> RecordRow:
    """The live record `record_id` of `user_id`, optionally row-locked; else RecordNotFound."""
    _check_id(user_id, "用户ID")
    if not is_id(record_id):
        raise RecordNotFound()
    record = uow.records.own(user_id, record_id, lock=lock)
    if record is None:
        raise RecordNotFound()
    return record


def create_record(uow: UnitOfWork, user_id: int) -> RecordView:
    """A new record of `user_id` in status 1 (待测评)."""
    _check_id(user_id, "用户ID")
    # One statement: it commits as it runs (one round trip, not three).
    with uow, uow.autocommit():
        return record_view(uow.records.add(user_id))


def start_record(uow: UnitOfWork, user_id: int, record_id: int) -> RecordView:
    """1 → 2 with started_at; a record already in 2 is returned unchanged; else InvalidOperation."""
    _check_id(user_id, "用户ID")
    if not is_id(record_id):
        raise RecordNotFound()
    # One write, a single statement that commits as it runs (from 1 only, so a refused start
    # changed nothing), then the record read back.
    with uow, uow.autocommit():
        record = uow.records.start_own(user_id, record_id)
    if record is None:
        raise RecordNotFound()
    if record.status != RecordStatus.IN_PROGRESS:
        raise InvalidOperation(MSG_START_NOT_ALLOWED)
    return record_view(record)


def get_record(uow: UnitOfWork, user_id: int, record_id: int) -> RecordView:
    with uow:
        return record_view(_own_record(uow, user_id, record_id))


def list_user_records(
    uow: UnitOfWork, user_id: int, *, cursor: int | None = None, size: int = DEFAULT_RECORDS_PAGE_SIZE
) -> RecordPage:
    """A page of the user's live records, newest first: those older than `cursor` (a record id).

    Ids grow with creation, so "id < cursor" is the next page whatever was created or
    deleted meanwhile: a record is never shown twice nor skipped by paging on.
    """
    _check_id(user_id, "用户ID")
    if cursor is not None and not is_id(cursor):
        raise ParamError("cursor 必须是正整数")
    if not 1 <= size <= MAX_RECORDS_PAGE_SIZE:
        raise ParamError(f"size 取 1 到 {MAX_RECORDS_PAGE_SIZE}")
    with uow:
        records, total = uow.records.user_page(user_id, cursor, size)
        items = [record_view(r) for r in records[:size]]
    next_cursor = items[-1].id if len(records) > size else None
    return RecordPage(items=items, total=int(total), size=size, next_cursor=next_cursor)


def scale_options(questionnaire: Questionnaire | None = None) -> list[ScaleOptionView]:
    """The Likert scale's answers with the questionnaire's labels."""
    q = questionnaire or load_questionnaire()
    return [ScaleOptionView(value=o.value, label=o.label) for o in q.scale]


def list_questions(uow: UnitOfWork, questionnaire: Questionnaire | None = None) -> list[QuestionView]:
    """The active questions, in dimension order, then question order, each with the scale's labels."""
    options = scale_options(questionnaire)
    with uow:
        rows = uow.questions.active_in_order()
    return [
        QuestionView(
            id=qid, dimension_code=code, dimension_name=name, text=text, sort_order=order, options=options
        )
        for qid, code, name, text, order in rows
    ]


def submit_answers(
    uow: UnitOfWork,
    queue: ReportQueue,
    user_id: int,
    record_id: int,
    answers: Sequence[tuple[int, int]],
    *,
    autosave: AutosaveStore | None = None,
) -> SubmitResult:
    """Save the answers of a record in status 1 or 2, set it to 3 and queue its report.

    All or nothing: any error (RecordNotFound, InvalidOperation "当前状态不允许提交答案",
    ParamError for a missing, repeated or unknown question or a value outside 1..5)
    leaves the database untouched. The record row is locked for the check-and-update,
    so of two concurrent submissions exactly one passes.

    Without `autosave`, `answers` must answer every active question and replace whatever
    was stored. With it, the answers stored are the record's stored answers, overlaid by
    its autosaved ones, overlaid by `answers` (which may then be partial or empty); the
    result must still answer every active question. The store is sealed first (saves
    racing with the submission are refused, never acknowledged and lost) and its keys
    are dropped after the commit. If the store cannot be read, `answers` alone must be
    complete (AutosaveUnavailable, 5003, otherwise).

    The `answers.submitted` event is written in the submission's transaction, with its time
    (services/usecases/change_events.py). The job is queued only after the commit (a worker
    must find the answers). If the queue fails, the failure is logged, the event is marked
    ``enqueued: false`` and the call still succeeds with ``enqueued=False``: the record stays
    in 3, which the reconciler process reads as a job owed and queues once the queue answers
    (reconciler/loop.py).

    The connection lost with the COMMIT in flight (the server may have committed and only its
    reply was lost) is told apart by reading the record again: out of 1 and 2, the submission
    committed and the call goes on as after its commit; otherwise it failed (503).
    """
    sealed = False
    committing = False
    events: list[Event] = []
    _check_id(user_id, "用户ID")
    if not is_id(record_id):
        raise RecordNotFound()
    try:
        with uow:
            # One round trip: the record locked, the questionnaire, the stored answers (nothing
            # changes them while the record is locked) and the transaction's time.
            reads = uow.records.submission_reads(user_id, record_id, stored=autosave is not None)
            if reads is None:
                raise RecordNotFound()
            record = reads.record
            if record.status not in SUBMITTABLE:
                raise InvalidOperation(MSG_SUBMIT_NOT_ALLOWED)
            if autosave is None:
                values = validate_answers(reads.active_ids, answers)
                merged = MergedAnswers(values, {}, 0, None)
            else:
                autosaved = _seal(autosave, record.id, user_id)
                sealed = autosaved is not None
                merged = merge_submission(reads.active_ids, reads.stored or {}, autosaved, answers)
            # The writes, the event and the commit in one round trip; submitted_at is the
            # transaction's time.
            committing = True
            with uow.batch(commit=True):
                uow.records.store_submission(record.id, merged)
                events = log_change(
                    uow,
                    EventType.ANSWERS_SUBMITTED,
                    [record.id],
                    at=reads.now,
                    actor=user_actor(user_id),
                    user_id=user_id,
                )
    except BaseException as exc:
        if not (committing and _committed_after_all(uow, user_id, record_id, exc)):
            if sealed and autosave is not None:
                _release(autosave, record_id, submitted=False)
            raise

    # The autosave released, then the job queued: one round trip where both stores share a
    # server (the store's `release_and_enqueue`), each step's failure its own.
    if sealed and autosave is not None:
        not_released, not_queued = autosave.release_and_enqueue(record_id, queue)
        if not_released is not None:
            _store_failed(
                logging.WARNING, "could not release the autosave of record %s", record_id, not_released
            )
    else:
        not_queued = _enqueue(queue, record_id)
    if not_queued is not None:
        _store_failed(
            logging.ERROR,
            "answers of record %s saved, but its report job could not be queued",
            record_id,
            not_queued,
        )
        note_not_enqueued(uow, events)
    return SubmitResult(record_id=record_id, status=int(RecordStatus.GENERATING), enqueued=not_queued is None)


def _committed_after_all(uow: UnitOfWork, user_id: int, record_id: int, failure: BaseException) -> bool:
    """Did the submission commit although its call failed? Only a lost connection leaves that
    open (its COMMIT may have landed, its reply lost: report_groups.py reads the record again
    for the same reason). The record, read on a new connection, tells: it was locked in 1 or 2
    until the transaction ended, so a record out of them was submitted. False when the read
    fails too (the outcome stays unknown: the caller's 503, and a repeat is refused with 2005
    if it had committed)."""
    if not driver.connection_lost(failure):
        return False
    try:
        with uow:
            record = uow.records.own(user_id, record_id)
    except Exception as again:
        logger.warning(
            "submission of record %s: connection lost with its commit in flight (%s), and the "
            "record could not be read again (%s); answered as failed",
            record_id,
            failure,
            again,
        )
        return False
    committed = record is not None and record.status not in SUBMITTABLE
    logger.warning(
        "submission of record %s: connection lost with its commit in flight (%s); the record "
        "read again is in status %s: %s",
        record_id,
        failure,
        None if record is None else int(record.status),
        "committed, reply lost" if committed else "not committed",
    )
    return committed


def _enqueue(queue: ReportQueue, record_id: int) -> Exception | None:
    """Queue the record's job; None, or the error the queue raised."""
    try:
        queue.enqueue(record_id)
    except Exception as exc:
        return exc
    return None


def _seal(store: AutosaveStore, record_id: int, user_id: int) -> dict[int, SavedAnswer] | None:
    """Close the record to saves; its autosaved answers, or None (logged) when the store is down."""
    try:
        return store.seal(record_id, user_id)
    except Exception as exc:
        _store_failed(
            logging.WARNING, "autosave store unavailable while submitting record %s", record_id, exc
        )
        return None


def _release(store: AutosaveStore, record_id: int, *, submitted: bool) -> None:
    """Best effort (a failed submission's; a submitted one's goes with its job): a key
    left behind expires, and the flusher skips submitted records."""
    try:
        store.release(record_id, submitted=submitted)
    except Exception as exc:
        _store_failed(logging.WARNING, "could not release the autosave of record %s", record_id, exc)


def _store_failed(level: int, message: str, record_id: int, exc: Exception) -> None:
    """Log a failure of the queue or autosave store during a submission: one line when the
    store is unavailable (an outage: every submission meanwhile says so, a traceback each
    would flood the log), with its traceback when it is anything else."""
    logger.log(level, message + ": %s", record_id, exc, exc_info=not isinstance(exc, QueueUnavailable))


def get_result_status(uow: UnitOfWork, user_id: int, record_id: int) -> ResultStatusView:
    with uow:
        record = _own_record(uow, user_id, record_id)
        return ResultStatusView(
            record_id=record.id,
            status=record.status,
            status_text=status_text(record.status),
            description=status_description(record.status),
        )


def report_unavailable_message(status: int) -> str:
    """Why a record has no report: generating (3) and failed (5) say so, as the result status does."""
    if status in (RecordStatus.GENERATING, RecordStatus.FAILED):
        return status_description(status)
    return MSG_REPORT_NOT_READY


def get_report(
    uow: UnitOfWork, user_id: int, record_id: int, questionnaire: Questionnaire | None = None
) -> ReportView:
    """The report of a completed record (status 4), explained with the questionnaire's texts.

    Any other status → InvalidOperation (2005): "报告生成中，请稍后查看" in status 3,
    "报告生成失败，请联系客服" in status 5, "报告尚未生成" before submission.
    """
    q = questionnaire or load_questionnaire()
    with uow:
        record = _own_record(uow, user_id, record_id)
        if record.status != RecordStatus.COMPLETED:
            raise InvalidOperation(report_unavailable_message(record.status))
        rows = uow.reports.scores(record.id)
        summary = uow.reports.summary(record.id)
        if summary is None or not rows:
            # Generation writes results, summary and status 4 in one transaction: this is damage.
            logger.error("record %s is completed but its report rows are missing", record.id)
            raise ServiceError("报告数据缺失，请联系客服")
        reading = interpret(rows, q)
        return ReportView(
            record_id=record.id,
            user_id=record.user_id,
            completed_at=record.completed_at,
            dimensions=reading.dimensions,
            top_dimensions=list(summary.top_dimensions),
            summary=summary.summary,
            strengths=reading.strengths,
            areas_to_develop=reading.areas_to_develop,
            questionnaire_version=q.version,
        )
