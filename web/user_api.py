"""The mini-program's API under /api/assessment/ (user token required).

Every record id is resolved among the caller's own live records: another user's
record answers 3241 like a missing one (the services guarantee it). Successful actions
are logged to the event log: by the change they make (creation, start, submission), or,
for a save, which changes no row, through web/event_logging.py. What each endpoint reads and answers is its
models' (web/request_models.py, web/response_models.py); its docstring is its description
in the OpenAPI document (web/spec.py).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from flask import Blueprint

from services.domain.errors import AutosaveUnavailable
from services.domain.events import EventType
from services.domain.status import RecordStatus
from services.usecases import assessment, autosave, resume
from web.auth import current_user_id, require_user
from web.deps import active_questions, autosave_store, new_uow, report_queue
from web.event_logging import log_event
from web.report_page import report_page_url
from web.request_models import (
    RecordIdQuery,
    RecordIdRequest,
    RecordsQuery,
    SaveAnswersRequest,
    SubmitAnswersRequest,
)
from web.response_models import (
    Question,
    Record,
    RecordDetail,
    RecordPage,
    Report,
    ResultStatus,
    SaveAnswersResult,
    SubmitResult,
)
from web.spec import Reply, success, user_operation

bp = Blueprint("user_api", __name__, url_prefix="/api/assessment")
bp.before_request(require_user)

log = logging.getLogger(__name__)


@bp.post("/createRecord")
@user_operation(Record)
def create_record() -> Reply:
    """Create a record (status 1, 待测评); any body is ignored"""
    user_id = current_user_id()
    # Its `record.created` event was written with it.
    return success(assessment.create_record(new_uow(), user_id))


@bp.post("/startAssessment")
@user_operation(Record, 404, 409)
def start_assessment(json: RecordIdRequest) -> Reply:
    """Start a record: 1 → 2 (测评中); a record already in 2 is returned unchanged"""
    user_id = current_user_id()
    record = assessment.start_record(new_uow(), user_id, json.record_id)
    # Its `record.started` event was written with it. Saves of the record will not need the
    # database to check owner and status.
    try:
        autosave_store().prime(record.id, user_id, RecordStatus.IN_PROGRESS)
    except AutosaveUnavailable:
        log.warning("could not cache record %s for autosave; its first save will look it up", record.id)
    return success(record)


@bp.get("/questions")
@user_operation(list[Question])
def questions() -> Reply:
    """The active questions, in dimension order then question order, each with the scale's labels"""
    return success(assessment.list_questions(new_uow()))


@bp.post("/saveAnswers")
@user_operation(SaveAnswersResult, 404, 409)
def save_answers(json: SaveAnswersRequest) -> Reply:
    """Autosave some answers of a record in status 2 (测评中)

    Stores the answers in Redis and returns without touching the database; a background
    process persists them within about a second. Validated like a submission except that
    questions may be left out. 3241 if the record is not the caller's, 2005 unless it is
    in status 2, 5003 if the autosave store (Redis) is down.
    """
    answers = [(a.question_id, a.value) for a in json.answers]
    user_id = current_user_id()
    result = autosave.save_answers(
        new_uow(),
        autosave_store(),
        active_questions(),
        user_id=user_id,
        record_id=json.record_id,
        answers=answers,
    )
    log_event(
        EventType.ANSWERS_SAVED,
        record_id=json.record_id,
        user_id=user_id,
        questionIds=[q for q, _ in answers],
        answeredCount=result.answered_count,
    )
    return success(result)


@bp.post("/submitAnswers")
@user_operation(SubmitResult, 404, 409)
def submit_answers(json: SubmitAnswersRequest) -> Reply:
    """Submit the answers of a record in status 1 or 2

    The answers stored are the record's saved answers (saveAnswers) overlaid by the body,
    which may therefore be partial or empty; every active question must end up answered.
    Saves the answers, sets the record to 3 (生成中) and queues the report job; returns as
    soon as both are done, before the report exists. If the queue (Redis) is down the call
    still succeeds with enqueued=false and the record stays in 3, provided the body answers
    every question (otherwise 5003: the saved answers cannot be read).
    """
    answers = [(a.question_id, a.value) for a in json.answers]
    user_id = current_user_id()
    result = assessment.submit_answers(
        new_uow(), report_queue(), user_id, json.record_id, answers, autosave=autosave_store()
    )
    # Its `answers.submitted` event was written with the submission (services/usecases/change_events.py).
    return success(result)


@bp.get("/resultStatus")
@user_operation(ResultStatus, 404)
def result_status(query: RecordIdQuery) -> Reply:
    """The status of a record's result"""
    return success(assessment.get_result_status(new_uow(), current_user_id(), query.record_id))


@bp.get("/report")
@user_operation(Report, 404, 409)
def report(query: RecordIdQuery) -> Reply:
    """The report of a completed record (status 4), with interpretations and suggestions

    Per dimension its score, level, what the level means and 2-3 suggestions; the strengths
    and areas to develop; a signed link to the report as a page (`pageUrl`). Other statuses
    answer 2005: "报告生成中，请稍后查看" in 3, "报告生成失败，请联系客服" in 5, "报告尚未生成"
    before submission.
    """
    user_id = current_user_id()
    view = assessment.get_report(new_uow(), user_id, query.record_id)
    return success(replace(view, page_url=report_page_url(user_id, query.record_id)))


@bp.get("/record")
@user_operation(RecordDetail, 404)
def record(query: RecordIdQuery) -> Reply:
    """One of the caller's records, with its answers so far and where to go on (resume)"""
    return success(resume.get_record_detail(new_uow(), autosave_store(), current_user_id(), query.record_id))


@bp.get("/records")
@user_operation(RecordPage)
def records(query: RecordsQuery) -> Reply:
    """A page of the caller's records, newest first

    `cursor` is the previous page's `nextCursor`.
    """
    return success(
        assessment.list_user_records(new_uow(), current_user_id(), cursor=query.cursor, size=query.size)
    )
