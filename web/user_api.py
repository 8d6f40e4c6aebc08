"""The mini-program's API under /api/assessment/ (user token required).

Every record id is resolved among the caller's own live records: another user's
record answers 3241 like a missing one (the services guarantee it). Successful actions
are logged to the event log (web/event_logging.py).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from flask import Blueprint, Response, request

from services.domain.events import EventType
from services.domain.limits import MAX_ID
from services.domain.status import RecordStatus
from services.usecases import assessment, autosave, resume
from web.auth import current_user_id, require_user
from web.deps import active_questions, autosave_store, new_uow, report_queue
from web.envelope import ok
from web.event_logging import log_event
from web.report_page import report_page_url
from web.validation import answer_list, body_id, json_object, optional_query_int, query_id, query_int

bp = Blueprint("user_api", __name__, url_prefix="/api/assessment")
bp.before_request(require_user)

log = logging.getLogger(__name__)


@bp.post("/createRecord")
def create_record() -> Response:
    """A new record in status 1 (待测评); the body, if any, is ignored."""
    user_id = current_user_id()
    record = assessment.create_record(new_uow(), user_id)
    log_event(EventType.RECORD_CREATED, record_id=record.id, user_id=user_id)
    return ok(record)


@bp.post("/startAssessment")
def start_assessment() -> Response:
    record_id = body_id(json_object(request), "recordId")
    user_id = current_user_id()
    record = assessment.start_record(new_uow(), user_id, record_id)
    try:
        # Saves of this record will not need the database to check owner and status.
        autosave_store().prime(record.id, user_id, RecordStatus.IN_PROGRESS)
    except Exception:
        log.warning("could not cache record %s for autosave; its first save will look it up", record.id)
    log_event(EventType.RECORD_STARTED, record_id=record.id, user_id=user_id)
    return ok(record)


@bp.get("/questions")
def questions() -> Response:
    return ok(assessment.list_questions(new_uow()))


@bp.post("/saveAnswers")
def save_answers() -> Response:
    """Autosave some answers of a record in status 2: Redis only, flushed in the background."""
    body = json_object(request)
    record_id = body_id(body, "recordId")
    answers = answer_list(body)
    user_id = current_user_id()
    result = autosave.save_answers(
        new_uow(), autosave_store(), active_questions(), user_id=user_id, record_id=record_id, answers=answers
    )
    log_event(
        EventType.ANSWERS_SAVED,
        record_id=record_id,
        user_id=user_id,
        questionIds=[q for q, _ in answers],
        answeredCount=result.answered_count,
    )
    return ok(result)


@bp.post("/submitAnswers")
def submit_answers() -> Response:
    """Saves the answers (with the autosaved ones) and queues the report; returns before it exists."""
    body = json_object(request)
    record_id = body_id(body, "recordId")
    answers = answer_list(body, allow_empty=True)
    user_id = current_user_id()
    result = assessment.submit_answers(
        new_uow(), report_queue(), user_id, record_id, answers, autosave=autosave_store()
    )
    log_event(EventType.ANSWERS_SUBMITTED, record_id=record_id, user_id=user_id, enqueued=result.enqueued)
    return ok(result)


@bp.get("/resultStatus")
def result_status() -> Response:
    record_id = query_id(request.args, "recordId")
    return ok(assessment.get_result_status(new_uow(), current_user_id(), record_id))


@bp.get("/report")
def report() -> Response:
    """The report with its interpretations, and a signed link to it as a page (`pageUrl`)."""
    record_id = query_id(request.args, "recordId")
    user_id = current_user_id()
    view = assessment.get_report(new_uow(), user_id, record_id)
    return ok(replace(view, page_url=report_page_url(user_id, record_id)))


@bp.get("/record")
def record() -> Response:
    """The record with its answers so far and where to go on (resuming an assessment)."""
    record_id = query_id(request.args, "recordId")
    return ok(resume.get_record_detail(new_uow(), autosave_store(), current_user_id(), record_id))


@bp.get("/records")
def records() -> Response:
    """A page of the caller's live records, newest first; `cursor` is the previous page's `nextCursor`."""
    cursor = optional_query_int(request.args, "cursor", 1, MAX_ID)
    size = query_int(
        request.args, "size", assessment.DEFAULT_RECORDS_PAGE_SIZE, 1, assessment.MAX_RECORDS_PAGE_SIZE
    )
    return ok(assessment.list_user_records(new_uow(), current_user_id(), cursor=cursor, size=size))
