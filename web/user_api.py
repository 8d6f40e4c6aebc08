"""The mini-program's API under /api/assessment/ (user token required).

Every record id is resolved among the caller's own live records: another user's
record answers 3241 like a missing one (the services guarantee it).
"""

from __future__ import annotations

from flask import Blueprint, Response, request

from services import assessment
from web.auth import current_user_id, require_user
from web.deps import new_uow, report_queue
from web.envelope import ok
from web.validation import answer_list, body_id, json_object, query_id

bp = Blueprint("user_api", __name__, url_prefix="/api/assessment")
bp.before_request(require_user)


@bp.post("/createRecord")
def create_record() -> Response:
    """A new record in status 1 (待测评); the body, if any, is ignored."""
    return ok(assessment.create_record(new_uow(), current_user_id()))


@bp.post("/startAssessment")
def start_assessment() -> Response:
    record_id = body_id(json_object(request), "recordId")
    return ok(assessment.start_record(new_uow(), current_user_id(), record_id))


@bp.get("/questions")
def questions() -> Response:
    return ok(assessment.list_questions(new_uow()))


@bp.post("/submitAnswers")
def submit_answers() -> Response:
    """Saves the answers and queues the report; returns before the report exists."""
    body = json_object(request)
    record_id = body_id(body, "recordId")
    answers = answer_list(body)
    return ok(assessment.submit_answers(new_uow(), report_queue(), current_user_id(), record_id, answers))


@bp.get("/resultStatus")
def result_status() -> Response:
    record_id = query_id(request.args, "recordId")
    return ok(assessment.get_result_status(new_uow(), current_user_id(), record_id))


@bp.get("/report")
def report() -> Response:
    record_id = query_id(request.args, "recordId")
    return ok(assessment.get_report(new_uow(), current_user_id(), record_id))


@bp.get("/record")
def record() -> Response:
    record_id = query_id(request.args, "recordId")
    return ok(assessment.get_record(new_uow(), current_user_id(), record_id))


@bp.get("/records")
def records() -> Response:
    """The caller's live records, newest first."""
    return ok(assessment.list_user_records(new_uow(), current_user_id()))
