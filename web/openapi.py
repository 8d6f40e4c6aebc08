"""The OpenAPI 3.1 document of the HTTP API, served at ``GET /openapi.json``.

Written out by hand, endpoint by endpoint, so it reads as the API's reference;
tests/unit/test_web_openapi.py keeps it in step with the app's URL map and with the
service views (every schema property is a camelCased view field).
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from services.domain.errors import MSG_EMPTY_ID_LIST
from services.domain.events import EventType
from services.domain.limits import MAX_ID
from services.domain.questionnaire import LEVELS, MAX_SUGGESTIONS, MAX_VALUE, MIN_SUGGESTIONS, MIN_VALUE
from services.domain.status import MAX_STATUS, MIN_STATUS, STATUS_TEXT
from services.usecases.admin import MAX_PAGE_SIZE
from services.usecases.assessment import DEFAULT_RECORDS_PAGE_SIZE, MAX_RECORDS_PAGE_SIZE
from services.usecases.drill import MAX_DRILL_MINUTES
from services.usecases.operations import MAX_PAGE_SIZE as OPS_PAGE_SIZE
from services.usecases.regeneration_tasks import PAGE_SIZE as TASK_PAGE_SIZE
from services.usecases.regeneration_tasks import TASK_STATUSES, TaskState
from web.errors import RETRY_AFTER_S
from web.report_page import LINK_MAX_AGE_S
from web.validation import (
    DEFAULT_PAGE_SIZE,
    MAX_ANSWERS,
    MAX_BATCH_IDS,
    MAX_CONTENT_LENGTH,
    MAX_HANDLE_LENGTH,
    MAX_PAGE,
    MAX_QUESTION_ID,
)

Schema = dict[str, Any]

bp = Blueprint("openapi", __name__)


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(required: list[str], **properties: Schema) -> Schema:
    return {"type": "object", "required": required, "properties": properties}


def _all(**properties: Schema) -> Schema:
    """An object whose every property is always present (the views' dataclasses)."""
    return _obj(list(properties), **properties)


INTEGER: Schema = {"type": "integer"}
STRING: Schema = {"type": "string"}
BOOLEAN: Schema = {"type": "boolean"}
DATETIME: Schema = {"type": "string", "format": "date-time"}
NULLABLE_DATETIME: Schema = {"type": ["string", "null"], "format": "date-time"}
ID: Schema = {"type": "integer", "minimum": 1, "maximum": MAX_ID, "format": "int64"}
NULLABLE_ID: Schema = {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_ID, "format": "int64"}
RECORD_IDS: Schema = {
    "type": "array",
    "items": ID,
    "minItems": 1,
    "maxItems": MAX_BATCH_IDS,
    "uniqueItems": True,
}
SCORE: Schema = {"type": "number", "minimum": 0, "maximum": 100}
LEVEL: Schema = {"type": "string", "enum": list(LEVELS), "description": "highest first"}
STATUS: Schema = {
    "type": "integer",
    "minimum": MIN_STATUS,
    "maximum": MAX_STATUS,
    "description": "; ".join(f"{int(s)} {text}" for s, text in STATUS_TEXT.items()),
}

SCHEMAS: dict[str, Schema] = {
    "Envelope": _obj(
        ["code", "message", "data"],
        code={"type": "integer", "description": "0 on success, else the error code"},
        message={"type": "string", "description": '"success" on success, else a message for the user'},
        data={"description": "the result; null on errors (readiness: the checks)"},
    ),
    "Error": {
        "type": "object",
        "required": ["code", "message", "data"],
        "properties": {
            "code": {
                "type": "integer",
                "description": (
                    "1001 bad input (HTTP 400), 2005 invalid operation for the record's status (409), "
                    "3241 record not found (404), 5003 a server the call needs (PostgreSQL, or Redis for "
                    "the queue and the autosave store) is unreachable (503, with Retry-After), "
                    "5000 internal error (500); HTTP errors without a domain code use the HTTP status "
                    "(401, 403, 404, 405, 413, 415, and 414 / 431 for a request line / headers over "
                    "the server's limits)"
                ),
            },
            "message": STRING,
            "data": {"type": "null"},
        },
    },
    "Record": _all(
        id=ID,
        userId=ID,
        status=STATUS,
        statusText=STRING,
        createdAt=DATETIME,
        startedAt=NULLABLE_DATETIME,
        submittedAt=NULLABLE_DATETIME,
        completedAt=NULLABLE_DATETIME,
        reportReady={"type": "boolean", "description": "status 4: GET /report answers with the report"},
    ),
    "RecordPage": _all(
        items={"type": "array", "items": _ref("Record"), "description": "newest first"},
        total={"type": "integer", "minimum": 0, "description": "the caller's live records in all"},
        size={"type": "integer", "minimum": 1, "maximum": MAX_RECORDS_PAGE_SIZE},
        nextCursor={
            **NULLABLE_ID,
            "description": "pass as `cursor` for the next page; null on the last page. Records created "
            "meanwhile never shift a later page",
        },
    ),
    "SavedAnswer": _all(
        questionId=INTEGER,
        value={"type": "integer", "minimum": MIN_VALUE, "maximum": MAX_VALUE},
        answeredAt=DATETIME,
    ),
    "RecordDetail": _all(
        id=ID,
        userId=ID,
        status=STATUS,
        statusText=STRING,
        createdAt=DATETIME,
        startedAt=NULLABLE_DATETIME,
        submittedAt=NULLABLE_DATETIME,
        completedAt=NULLABLE_DATETIME,
        reportReady={"type": "boolean", "description": "status 4: GET /report answers with the report"},
        answers={
            "type": "array",
            "items": _ref("SavedAnswer"),
            "description": "the stored answers overlaid by the autosaved ones (what a submission would "
            "take), in question order",
        },
        answeredCount={"type": "integer", "minimum": 0},
        totalQuestions={"type": "integer", "minimum": 0, "description": "active questions"},
        currentQuestionId={
            "type": ["integer", "null"],
            "description": "the question answered last (autosave progress, else the database's)",
        },
        nextQuestionId={
            "type": ["integer", "null"],
            "description": "the first unanswered question in questionnaire order: where to go on; "
            "null when every question is answered",
        },
        autosaveAvailable={
            "type": "boolean",
            "description": "false when the autosave store (Redis) could not be read: the answers are "
            "the database's and the last seconds of saves may be missing",
        },
    ),
    "ScaleOption": _all(
        value={"type": "integer", "minimum": MIN_VALUE, "maximum": MAX_VALUE},
        label={"type": "string", "description": "the questionnaire's label, e.g. 1 非常不符合 … 5 非常符合"},
    ),
    "Question": _all(
        id=INTEGER,
        dimensionCode=STRING,
        dimensionName=STRING,
        text=STRING,
        sortOrder=INTEGER,
        options={"type": "array", "items": _ref("ScaleOption"), "description": "the scale, 1 first"},
    ),
    "SubmitResult": _all(
        recordId=ID,
        status=STATUS,
        enqueued={
            "type": "boolean",
            "description": "false when the job could not be queued: the record stays in status 3 "
            "and an admin can regenerate it",
        },
    ),
    "ResultStatus": _all(
        recordId=ID,
        status=STATUS,
        statusText=STRING,
        description={"type": "string", "description": 'for status 5: "报告生成失败，请联系客服"'},
    ),
    "DimensionScore": _all(
        code=STRING,
        name=STRING,
        rawScore=INTEGER,
        score=SCORE,
        rank={"type": "integer", "minimum": 1, "description": "1 = strongest"},
        level=LEVEL,
        description={"type": "string", "description": "what the dimension measures"},
        interpretation={
            "type": "string",
            "description": "what this level of this dimension means (the questionnaire data's text)",
        },
        suggestions={
            "type": "array",
            "items": STRING,
            "minItems": MIN_SUGGESTIONS,
            "maxItems": MAX_SUGGESTIONS,
            "description": "concrete things to do (empty only for a dimension no longer in the data)",
        },
    ),
    "DimensionRef": _all(code=STRING, name=STRING, score=SCORE, level=LEVEL),
    "Report": _all(
        recordId=ID,
        userId=ID,
        completedAt=NULLABLE_DATETIME,
        dimensions={"type": "array", "items": _ref("DimensionScore"), "description": "by rank, 1 first"},
        topDimensions={"type": "array", "items": STRING, "description": "dimension codes, strongest first"},
        summary=STRING,
        strengths={
            "type": "array",
            "items": _ref("DimensionRef"),
            "description": "levels 优势/较强, strongest first, at most 3 (else the first-ranked one)",
        },
        areasToDevelop={
            "type": "array",
            "items": _ref("DimensionRef"),
            "description": "the other dimensions below those levels, weakest first, at most 3",
        },
        questionnaireVersion={"type": "integer", "description": "version of the data the texts come from"},
        pageUrl={
            "type": ["string", "null"],
            "description": f"the report as an HTML page: a signed link relative to the API's host, valid "
            f"{LINK_MAX_AGE_S // 86400} days",
        },
    ),
    "AdminRecord": _all(
        id=ID,
        userId=ID,
        status=STATUS,
        statusName=STRING,
        createdAt=DATETIME,
        submittedAt=NULLABLE_DATETIME,
        completedAt=NULLABLE_DATETIME,
        isDeleted=BOOLEAN,
    ),
    "AdminRecordPage": _all(
        items={"type": "array", "items": _ref("AdminRecord")},
        total={"type": "integer", "minimum": 0},
        page={"type": "integer", "minimum": 1},
        pageSize={"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE},
    ),
    "BatchRegenerateResult": _all(
        successCount={"type": "integer", "minimum": 0, "description": "records reset to 3 and queued"},
        skippedCount={
            "type": "integer",
            "minimum": 0,
            "description": "missing, soft-deleted, not in status 3/5, or not queued (Redis down)",
        },
        items={
            "type": "array",
            "items": _ref("ItemOutcome"),
            "description": "one outcome per requested id, in request order",
        },
    ),
    "ItemOutcome": _all(
        id={
            "type": ["integer", "string"],
            "description": "a record id, or a dead letter's, delayed retry's or payload's handle",
        },
        outcome={"type": "string", "enum": ["regenerated", "requeued", "retried", "deleted", "skipped"]},
        code={
            "type": ["integer", "null"],
            "description": "when skipped: 3241 not found (record, dead letter or payload), 2005 the record's "
            "status does not allow it, 1001 a repeated id or a dead letter without a RecordId, 5003 the "
            "queue (Redis) refused the step",
        },
        reason={"type": ["string", "null"], "description": "when skipped: why, in Chinese"},
    ),
    "ItemOutcomes": _all(items={"type": "array", "items": _ref("ItemOutcome")}),
    "DeadLetter": _all(
        messageId={"type": "string", "description": "handle for requeue/delete (digest of the entry)"},
        recordId={**ID, "type": ["integer", "null"]},
        attempts={"type": "integer", "minimum": 0, "description": "attempts made before it died"},
        lastError={
            "type": ["string", "null"],
            "description": "exception type and message (<= 500 chars)",
        },
        deadAt=NULLABLE_DATETIME,
        raw={"type": "string", "description": "the entry of report:queue:dead verbatim"},
    ),
    "DeadLetterPage": _all(
        items={"type": "array", "items": _ref("DeadLetter")},
        total={"type": "integer", "minimum": 0},
        offset={"type": "integer", "minimum": 0},
        limit={"type": "integer", "minimum": 1, "maximum": OPS_PAGE_SIZE},
    ),
    "DelayedRetry": _all(
        messageId={
            "type": ["string", "null"],
            "description": "handle for retryNow/delete (the entry's unique 16-hex prefix); null for an "
            "entry the broker did not write",
        },
        recordId={**ID, "type": ["integer", "null"]},
        attempts={
            "type": ["integer", "null"],
            "minimum": 0,
            "description": "attempts made so far, all failed (the job's RetryCount)",
        },
        dueAt=DATETIME,
        enqueuedAt=NULLABLE_DATETIME,
        raw={"type": "string", "description": "the job as it will be queued again, verbatim"},
        lastError={"type": ["string", "null"], "description": "the record's last failed attempt's error"},
    ),
    "DelayedRetryPage": _all(
        items={"type": "array", "items": _ref("DelayedRetry")},
        total={"type": "integer", "minimum": 0},
        offset={"type": "integer", "minimum": 0},
        limit={"type": "integer", "minimum": 1, "maximum": OPS_PAGE_SIZE},
    ),
    "DrilledRecord": _all(recordId=ID, until=DATETIME),
    "DrilledRecords": _all(items={"type": "array", "items": _ref("DrilledRecord")}),
    "DrillStopped": _all(stopped={"type": "array", "items": ID, "description": "records that were drilled"}),
    "DrillStartRequest": _obj(
        ["ids"],
        ids=RECORD_IDS,
        minutes={"type": "integer", "minimum": 1, "maximum": MAX_DRILL_MINUTES, "default": 60},
    ),
    "DrillStopRequest": {
        "type": "object",
        "description": '{"ids": [...]} for some records, or {"all": true} for every drilled record',
        "properties": {
            "ids": {
                "type": "array",
                "items": ID,
                "minItems": 1,
                "maxItems": MAX_BATCH_IDS,
                "uniqueItems": True,
            },
            "all": {"type": "boolean", "const": True},
        },
    },
    "InvalidPayload": _all(
        key={"type": "string", "description": "handle for delete (digest of the entry)"},
        raw={"type": "string", "description": "the entry verbatim; bytes that are not UTF-8 as \\xNN"},
    ),
    "InvalidPayloadPage": _all(
        items={"type": "array", "items": _ref("InvalidPayload")},
        total={"type": "integer", "minimum": 0},
        offset={"type": "integer", "minimum": 0},
        limit={"type": "integer", "minimum": 1, "maximum": OPS_PAGE_SIZE},
    ),
    "AuditEntry": _all(
        at=DATETIME,
        actor={
            "type": "string",
            "description": '"admin:<fingerprint>", "cli:<os user>", "console:<name>"',
        },
        credential={
            "type": "string",
            "description": "the credential's label or fingerprint, never the secret",
        },
        action={
            "type": "string",
            "description": "regenerate, batch_regenerate, regenerate_matching, delete_record, requeue, "
            "delete_dead, retry_now, delete_delayed, delete_invalid, purge_invalid, drill_start, drill_stop",
        },
        ids={"type": "array", "items": {"type": ["integer", "string"]}},
        outcome={"type": "string", "description": "ok, partial or failed"},
        detail={"type": ["string", "null"]},
    ),
    "AuditPage": _all(
        items={"type": "array", "items": _ref("AuditEntry")},
        total={"type": "integer", "minimum": 0},
        offset={"type": "integer", "minimum": 0},
        limit={"type": "integer", "minimum": 1, "maximum": OPS_PAGE_SIZE},
    ),
    "TaskStarted": _all(
        taskId={
            "type": "string",
            "pattern": "^[0-9a-f]{32}$",
            "description": "GET /api/admin/tasks/{task_id}",
        },
        matched={"type": "integer", "minimum": 0, "description": "records matching now (one COUNT)"},
    ),
    "MatchFilter": _all(
        status={"type": "integer", "enum": list(TASK_STATUSES)},
        submittedFrom=NULLABLE_DATETIME,
        submittedTo=NULLABLE_DATETIME,
        userId=NULLABLE_ID,
    ),
    "Task": _all(
        taskId={"type": "string"},
        state={"type": "string", "enum": [str(s) for s in TaskState]},
        filter=_ref("MatchFilter"),
        matched={"type": "integer", "minimum": 0, "description": "records matching when the task was made"},
        maxId={"type": "integer", "minimum": 0, "description": "scope: records with id <= maxId only"},
        cursor={"type": "integer", "minimum": 0, "description": "last id of the last page done"},
        pages={"type": "integer", "minimum": 0, "description": f"pages of up to {TASK_PAGE_SIZE} ids done"},
        regenerated={"type": "integer", "minimum": 0, "description": "records reset to 3 and queued"},
        skipped={
            "type": "integer",
            "minimum": 0,
            "description": "ids of a page whose record changed meanwhile",
        },
        actor={"type": "string", "description": "who started it"},
        createdAt=NULLABLE_DATETIME,
        startedAt=NULLABLE_DATETIME,
        finishedAt=NULLABLE_DATETIME,
        error={"type": ["string", "null"]},
    ),
    "Purged": _all(purged={"type": "integer", "minimum": 0, "description": "payloads dropped"}),
    "HandlesRequest": _obj(
        ["ids"],
        ids={
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": MAX_HANDLE_LENGTH},
            "minItems": 1,
            "maxItems": MAX_BATCH_IDS,
            "uniqueItems": True,
            "description": "dead letters' messageId",
        },
    ),
    "RequeueRequest": {
        "type": "object",
        "description": '{"ids": [...]} for some dead letters, or {"all": true} for all of them',
        "properties": {
            "ids": {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": MAX_HANDLE_LENGTH},
                "minItems": 1,
                "maxItems": MAX_BATCH_IDS,
                "uniqueItems": True,
            },
            "all": {"type": "boolean", "const": True},
        },
    },
    "KeysRequest": _obj(
        ["keys"],
        keys={
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": MAX_HANDLE_LENGTH},
            "minItems": 1,
            "maxItems": MAX_BATCH_IDS,
            "uniqueItems": True,
            "description": "invalid payloads' key",
        },
    ),
    "EmptyRequest": {"type": "object", "description": "any JSON object (e.g. {})"},
    "QueueFigures": _all(
        queued={"type": "integer", "description": "LLEN <queue>:queue"},
        dead={"type": "integer", "description": "LLEN <queue>:queue:dead"},
        delayed={"type": "integer", "description": "retries waiting for their due time"},
        inFlight={"type": "integer", "description": "taken by a worker, not yet acknowledged"},
        invalid={"type": "integer", "description": "undecodable messages kept aside"},
    ),
    "QueueStats": _all(
        queued={"type": "integer", "description": "LLEN report:queue"},
        dead={"type": "integer", "description": "LLEN report:queue:dead"},
        delayed={"type": "integer", "description": "retries waiting for their due time"},
        inFlight={"type": "integer", "description": "taken by a worker, not yet acknowledged"},
        invalid={"type": "integer", "description": "undecodable messages kept aside"},
        queues=_all(
            report=_ref("QueueFigures"),
            admin={**_ref("QueueFigures"), "description": "admin tasks (regenerate matching)"},
        ),
    ),
    "Health": _all(status={"type": "string", "const": "ok"}),
    "ProcessCount": _all(
        alive={**INTEGER, "description": "beating"},
        gone={**INTEGER, "description": "silent past the timeout without a clean exit (crashed, killed)"},
        stopped={**INTEGER, "description": "exited cleanly within the last hour"},
    ),
    "Processes": _all(
        worker=_ref("ProcessCount"),
        hotpath=_ref("ProcessCount"),
        reconciler=_ref("ProcessCount"),
        web=_ref("ProcessCount"),
    ),
    "Readiness": _all(
        database={"type": "string", "enum": ["ok", "unavailable"]},
        redis={"type": "string", "enum": ["ok", "unavailable"]},
    ),
    "RecordIdRequest": _obj(["recordId"], recordId=ID),
    "IdRequest": _obj(["id"], id=ID),
    "RegenerateMatchingRequest": _obj(
        ["status"],
        status={"type": "integer", "enum": list(TASK_STATUSES), "description": "3 生成中 or 5 生成失败"},
        submittedFrom={**DATETIME, "description": "submitted at or after (no offset = ADMIN_TIMEZONE)"},
        submittedTo={**DATETIME, "description": "submitted before (no offset = ADMIN_TIMEZONE)"},
        userId=ID,
    ),
    "IdsRequest": _obj(
        ["ids"],
        ids={
            "type": "array",
            "items": ID,
            "minItems": 1,
            "maxItems": MAX_BATCH_IDS,
            "uniqueItems": True,
            "description": f'non-empty ("{MSG_EMPTY_ID_LIST}", 1001), at most {MAX_BATCH_IDS} ids, '
            "no duplicates (a duplicate is rejected with 1001)",
        },
    ),
    "Answer": _obj(
        ["questionId", "value"],
        questionId={"type": "integer", "minimum": 1, "maximum": MAX_QUESTION_ID},
        value={"type": "integer", "minimum": MIN_VALUE, "maximum": MAX_VALUE},
    ),
    "SubmitAnswersRequest": _obj(
        ["recordId"],
        recordId=ID,
        answers={
            "type": ["array", "null"],
            "items": _ref("Answer"),
            "maxItems": MAX_ANSWERS,
            "description": "each question at most once; together with the answers already saved "
            "(saveAnswers) every active question must be answered. May be empty or left out when "
            "everything was saved before",
        },
    ),
    "SaveAnswersRequest": _obj(
        ["recordId", "answers"],
        recordId=ID,
        answers={
            "type": "array",
            "items": _ref("Answer"),
            "minItems": 1,
            "maxItems": MAX_ANSWERS,
            "description": "some answers, each question at most once; a later save of a question wins",
        },
    ),
    "SaveAnswersResult": _all(
        recordId=ID,
        saved={"type": "integer", "minimum": 1, "description": "answers taken from this request"},
        answeredCount={
            "type": "integer",
            "minimum": 0,
            "description": "distinct questions saved so far in this record",
        },
        savedAt={**DATETIME, "description": "the save time, also the answers' answered time"},
    ),
    "Event": _all(
        id={"type": "string", "format": "uuid"},
        eventType={
            "type": "string",
            "description": "; ".join(t.value for t in EventType),
        },
        occurredAt=DATETIME,
        recordId={**ID, "type": ["integer", "null"]},
        userId={**ID, "type": ["integer", "null"]},
        actor={
            "type": ["string", "null"],
            "description": '"user:<id>", "admin:<first 12 hex digits of the token\'s SHA-256>" or "worker"',
        },
        data={"type": "object", "description": "details of the event, by type"},
    ),
    "EventPage": _all(
        items={"type": "array", "items": _ref("Event")},
        total={"type": "integer", "minimum": 0},
        page={"type": "integer", "minimum": 1},
        pageSize={"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE},
    ),
}


def _error(description: str, headers: Schema | None = None) -> Schema:
    response: Schema = {
        "description": description,
        "content": {"application/json": {"schema": _ref("Error")}},
    }
    if headers:
        response["headers"] = headers
    return response


RETRY_AFTER_HEADER: Schema = {
    "Retry-After": {
        "description": f"seconds to wait before trying again ({RETRY_AFTER_S})",
        "schema": {"type": "integer", "minimum": 1},
    }
}


RESPONSES: dict[str, Schema] = {
    "BadRequest": _error("1001: bad input (wrong type, out of range, malformed JSON, duplicate ids, ...)"),
    "Unauthorized": _error("missing or invalid credential (code 401)"),
    "Forbidden": _error("a valid credential of the other kind (code 403)"),
    "NotFound": _error("3241: the record does not exist, is soft-deleted or is another user's"),
    "Conflict": _error("2005: the record's status does not allow the operation"),
    "PayloadTooLarge": _error(
        f"body over {MAX_CONTENT_LENGTH} bytes, with or without Content-Length (code 413)"
    ),
    "UnsupportedMediaType": _error("body not sent as application/json (code 415)"),
    "ServiceUnavailable": _error(
        "5003: a server the call needs is unreachable: PostgreSQL, or Redis for the report queue "
        "and the autosave store",
        RETRY_AFTER_HEADER,
    ),
}

ERROR_RESPONSE_NAMES = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    413: "PayloadTooLarge",
    415: "UnsupportedMediaType",
    503: "ServiceUnavailable",
}

Security = list[dict[str, list[str]]]
USER: Security = [{"userToken": []}]
ADMIN: Security = [{"adminToken": []}]
AUTH_ERRORS = (401, 403)
BODY_ERRORS = (400, 413, 415)


def _success(data: Schema | None, description: str = "success") -> Schema:
    schema: Schema = {
        "allOf": [
            _ref("Envelope"),
            {
                "type": "object",
                "properties": {
                    "code": {"const": 0},
                    "message": {"const": "success"},
                    "data": data if data is not None else {"type": "null"},
                },
            },
        ]
    }
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _operation(
    summary: str,
    *,
    tag: str,
    data: Schema | None,
    errors: tuple[int, ...] = (),
    security: Security | None = None,
    body: str | None = None,
    parameters: list[Schema] | None = None,
    description: str | None = None,
    success_status: int = 200,
) -> Schema:
    op: Schema = {"summary": summary, "tags": [tag]}
    if description:
        op["description"] = description
    if security is not None:
        op["security"] = security
    if parameters:
        op["parameters"] = parameters
    if body:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    responses: Schema = {str(success_status): _success(data)}
    for status in sorted(set(errors)):
        responses[str(status)] = {"$ref": f"#/components/responses/{ERROR_RESPONSE_NAMES[status]}"}
    op["responses"] = responses
    return op


def _query(name: str, schema: Schema, description: str, *, required: bool = False) -> Schema:
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


OFFSET_LIMIT = [
    _query("offset", {"type": "integer", "minimum": 0, "default": 0}, "entries to skip"),
    _query("limit", {"type": "integer", "minimum": 1, "maximum": OPS_PAGE_SIZE, "default": 50}, "entries"),
]

RECORD_ID_QUERY = _query("recordId", ID, "id of one of the caller's records", required=True)


def _user(summary: str, **kwargs: Any) -> Schema:
    # Every endpoint of the API reads the database: 503 when it is unreachable.
    kwargs["errors"] = AUTH_ERRORS + kwargs.get("errors", ()) + (503,)
    return _operation(summary, tag="assessment", security=USER, **kwargs)


def _admin(summary: str, **kwargs: Any) -> Schema:
    kwargs["errors"] = AUTH_ERRORS + kwargs.get("errors", ()) + (503,)
    return _operation(summary, tag="admin", security=ADMIN, **kwargs)


PATHS: dict[str, dict[str, Schema]] = {
    "/api/assessment/createRecord": {
        "post": _user("Create a record (status 1, 待测评); any body is ignored", data=_ref("Record")),
    },
    "/api/assessment/startAssessment": {
        "post": _user(
            "Start a record: 1 → 2 (测评中); a record already in 2 is returned unchanged",
            data=_ref("Record"),
            body="RecordIdRequest",
            errors=(*BODY_ERRORS, 404, 409),
        ),
    },
    "/api/assessment/questions": {
        "get": _user(
            "The active questions, in dimension order then question order, each with the scale's labels",
            data={"type": "array", "items": _ref("Question")},
        ),
    },
    "/api/assessment/saveAnswers": {
        "post": _user(
            "Autosave some answers of a record in status 2 (测评中)",
            description=(
                "Stores the answers in Redis and returns without touching the database; a background "
                "process persists them within about a second. Validated like a submission except that "
                "questions may be left out. 3241 if the record is not the caller's, 2005 unless it is "
                "in status 2, 5003 if the autosave store (Redis) is down."
            ),
            data=_ref("SaveAnswersResult"),
            body="SaveAnswersRequest",
            errors=(*BODY_ERRORS, 404, 409, 503),
        ),
    },
    "/api/assessment/submitAnswers": {
        "post": _user(
            "Submit the answers of a record in status 1 or 2",
            description=(
                "The answers stored are the record's saved answers (saveAnswers) overlaid by the body, "
                "which may therefore be partial or empty; every active question must end up answered. "
                "Saves the answers, sets the record to 3 (生成中) and queues the report job; returns "
                "as soon as both are done, before the report exists. If the queue (Redis) is down the "
                "call still succeeds with enqueued=false and the record stays in 3, provided the body "
                "answers every question (otherwise 5003: the saved answers cannot be read)."
            ),
            data=_ref("SubmitResult"),
            body="SubmitAnswersRequest",
            errors=(*BODY_ERRORS, 404, 409, 503),
        ),
    },
    "/api/assessment/resultStatus": {
        "get": _user(
            "The status of a record's result",
            data=_ref("ResultStatus"),
            parameters=[RECORD_ID_QUERY],
            errors=(400, 404),
        ),
    },
    "/api/assessment/report": {
        "get": _user(
            "The report of a completed record (status 4), with interpretations and suggestions",
            description=(
                "Per dimension its score, level, what the level means and 2-3 suggestions; the strengths "
                "and areas to develop; a signed link to the report as a page. Other statuses answer 2005: "
                '"报告生成中，请稍后查看" in 3, "报告生成失败，请联系客服" in 5, "报告尚未生成" before '
                "submission."
            ),
            data=_ref("Report"),
            parameters=[RECORD_ID_QUERY],
            errors=(400, 404, 409),
        ),
    },
    "/api/assessment/record": {
        "get": _user(
            "One of the caller's records, with its answers so far and where to go on (resume)",
            data=_ref("RecordDetail"),
            parameters=[RECORD_ID_QUERY],
            errors=(400, 404),
        ),
    },
    "/api/assessment/records": {
        "get": _user(
            "A page of the caller's records, newest first",
            data=_ref("RecordPage"),
            parameters=[
                _query("cursor", ID, "the previous page's nextCursor; absent for the first page"),
                _query(
                    "size",
                    {"type": "integer", "minimum": 1, "maximum": MAX_RECORDS_PAGE_SIZE},
                    f"records per page (default {DEFAULT_RECORDS_PAGE_SIZE})",
                ),
            ],
            errors=(400,),
        ),
    },
    "/reports/{record_id}": {
        "get": {
            "summary": "The report as an HTML page (radar chart, levels, interpretations, suggestions)",
            "description": (
                "For the record's owner: with the signed link of the report's pageUrl (`s`), or with the "
                "user token. Readable on a phone, printable on A4; times in DISPLAY_TIMEZONE. Errors are "
                "the JSON envelope, except a record without a report: an HTML page saying why (409)."
            ),
            "tags": ["report"],
            "parameters": [
                {"name": "record_id", "in": "path", "required": True, "schema": ID},
                {
                    "name": "s",
                    "in": "query",
                    "required": False,
                    "schema": STRING,
                    "description": "the signed link's parameter; without it, the user token is required",
                },
            ],
            "responses": {
                "200": {"description": "the report page", "content": {"text/html": {}}},
                "401": {"$ref": "#/components/responses/Unauthorized"},
                "404": {"$ref": "#/components/responses/NotFound"},
                "409": {
                    "description": "no report: generating (3), failed (5) or not submitted",
                    "content": {"text/html": {}},
                },
                "503": {"$ref": "#/components/responses/ServiceUnavailable"},
            },
        },
    },
    "/api/admin/assessmentRecord/regenerateReport": {
        "post": _admin(
            "Regenerate the report of a record in status 3 or 5",
            description=(
                "Resets the record to 3, clears its results and summary, and queues a job with "
                "RetryCount 0. 3241 if the record is missing or soft-deleted, 2005 "
                "(当前状态不允许重新生成) for another status, 5003 if the job could not be queued."
            ),
            data=None,
            body="IdRequest",
            errors=(*BODY_ERRORS, 404, 409, 503),
        ),
    },
    "/api/admin/assessmentRecord/batchRegenerateReport": {
        "post": _admin(
            "Regenerate the reports of the records in status 3 or 5 among `ids`",
            description=(
                "Every other id (missing, soft-deleted, wrong status) is skipped; "
                "successCount + skippedCount == len(ids). An empty list is 1001 "
                f"({MSG_EMPTY_ID_LIST}); so are duplicate ids and more than {MAX_BATCH_IDS} ids."
            ),
            data=_ref("BatchRegenerateResult"),
            body="IdsRequest",
            errors=BODY_ERRORS,
        ),
    },
    "/api/admin/assessmentRecord/regenerateMatching": {
        "post": _admin(
            "Regenerate every record matching a filter, in the background (202)",
            description=(
                "Counts the matching live records (status 3 or 5, optionally submitted in "
                "[submittedFrom, submittedTo) and of one user), fixes the scope to those with an id up to "
                "the largest id now, queues one task for the worker and answers 202 {taskId, matched} "
                "without touching the records, in a time independent of their number. The worker resets "
                f"and queues them {TASK_PAGE_SIZE} at a time, as batchRegenerateReport does; progress at "
                "GET /api/admin/tasks/{task_id}. Audited; refused (503) if the audit cannot be written "
                "or the task cannot be queued."
            ),
            data=_ref("TaskStarted"),
            body="RegenerateMatchingRequest",
            errors=BODY_ERRORS,
            success_status=202,
        ),
    },
    "/api/admin/tasks/{task_id}": {
        "get": _admin(
            "An admin task's progress (kept 7 days after its last change)",
            data=_ref("Task"),
            parameters=[
                {
                    "name": "task_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                    "description": "the taskId of regenerateMatching",
                }
            ],
            errors=(404,),
        ),
    },
    "/api/admin/assessmentRecord/list": {
        "get": _admin(
            "A page of records, newest first",
            data=_ref("AdminRecordPage"),
            parameters=[
                _query("status", STATUS, "only records in this status"),
                _query("userId", ID, "only this user's records"),
                _query("includeDeleted", BOOLEAN, "include soft-deleted records (default false)"),
                _query("createdFrom", DATETIME, "created at or after (ISO-8601; no offset = ADMIN_TIMEZONE)"),
                _query("createdTo", DATETIME, "created before (ISO-8601; no offset = ADMIN_TIMEZONE)"),
                _query("page", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 1}, "page"),
                _query(
                    "pageSize",
                    {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE, "default": DEFAULT_PAGE_SIZE},
                    "records per page",
                ),
            ],
            errors=(400,),
        ),
    },
    "/api/admin/assessmentRecord/delete": {
        "post": _admin(
            "Soft-delete a record (3241 if missing or already deleted)",
            data=None,
            body="IdRequest",
            errors=(*BODY_ERRORS, 404),
        ),
    },
    "/api/admin/assessmentRecord/events": {
        "get": _admin(
            "The event log of a record, oldest first",
            description=(
                "User, admin and worker actions on the record (created, started, answers saved, "
                "submitted, report generated, a failed attempt, dead-lettered, regenerated, deleted). "
                "Events reach the log through Redis and appear within about a second. 3241 if no such "
                "record was ever created and no event names it."
            ),
            data=_ref("EventPage"),
            parameters=[
                _query("id", ID, "the record", required=True),
                _query("page", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 1}, "page"),
                _query(
                    "pageSize",
                    {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE, "default": DEFAULT_PAGE_SIZE},
                    "events per page",
                ),
            ],
            errors=(400, 404),
        ),
    },
    "/api/admin/queue/stats": {
        "get": _admin(
            "Figures of the report queue (and of every queue, under `queues`)",
            data=_ref("QueueStats"),
            errors=(503,),
        ),
    },
    "/api/admin/queue/dead": {
        "get": _admin(
            "Dead letters of report:queue:dead, newest first",
            description="Each with its RecordId, attempts, last error and time (older ones may lack them).",
            data=_ref("DeadLetterPage"),
            parameters=OFFSET_LIMIT,
            errors=(400,),
        ),
    },
    "/api/admin/queue/dead/requeue": {
        "post": _admin(
            "Requeue dead letters: RetryCount 0, record back to 3",
            description=(
                "Per dead letter: its record (status 3 or 5) is reset to 3 (生成中), then the entry is "
                "removed and a fresh job queued in one atomic step. Skipped with a code: 3241 the letter "
                "is gone or its record missing, 2005 the record's status (e.g. 4: delete the letter), "
                "1001 no RecordId, 5003 Redis down. Audited; refused (503) if the audit cannot be written."
            ),
            data=_ref("ItemOutcomes"),
            body="RequeueRequest",
            errors=BODY_ERRORS,
        ),
    },
    "/api/admin/queue/dead/delete": {
        "post": _admin(
            "Delete dead letters (their records keep their status); audited",
            data=_ref("ItemOutcomes"),
            body="HandlesRequest",
            errors=BODY_ERRORS,
        ),
    },
    "/api/admin/queue/delayed": {
        "get": _admin(
            "Delayed retries of the report queue, soonest due first",
            description="Each with its RecordId, attempts made, due time and the record's last error.",
            data=_ref("DelayedRetryPage"),
            parameters=OFFSET_LIMIT,
            errors=(400,),
        ),
    },
    "/api/admin/queue/delayed/retryNow": {
        "post": _admin(
            "Queue delayed retries now (the job and its RetryCount unchanged); audited",
            description=(
                "Skipped with a code: 3241 the retry is no longer delayed (it ran, or was deleted), "
                '5003 Redis down. {"all": true}: the next 1,000 due.'
            ),
            data=_ref("ItemOutcomes"),
            body="RequeueRequest",
            errors=BODY_ERRORS,
        ),
    },
    "/api/admin/queue/delayed/delete": {
        "post": _admin(
            "Delete delayed retries: no further attempt; their records set to 5 (生成失败); audited",
            data=_ref("ItemOutcomes"),
            body="HandlesRequest",
            errors=BODY_ERRORS,
        ),
    },
    "/api/admin/drill": {
        "get": _admin(
            "The fault drill: records whose generation is made to fail now",
            data=_ref("DrilledRecords"),
            errors=(503,),
        ),
    },
    "/api/admin/drill/start": {
        "post": _admin(
            "Make these records' report generation fail (for `minutes`, default 60, at most a day); audited",
            description=(
                "For rehearsing failures: each attempt of a drilled record fails with a fault-drill error "
                "and takes the product's own path (retries at 10/30/60 s, then the dead letter and status 5)."
            ),
            data=_ref("DrilledRecords"),
            body="DrillStartRequest",
            errors=BODY_ERRORS,
        ),
    },
    "/api/admin/drill/stop": {
        "post": _admin(
            "End the fault drill of these records (or of all); audited",
            data=_ref("DrillStopped"),
            body="DrillStopRequest",
            errors=BODY_ERRORS,
        ),
    },
    "/api/admin/queue/invalid": {
        "get": _admin(
            "Quarantined payloads of report:queue:invalid, verbatim, newest first",
            data=_ref("InvalidPayloadPage"),
            parameters=OFFSET_LIMIT,
            errors=(400,),
        ),
    },
    "/api/admin/queue/invalid/delete": {
        "post": _admin(
            "Delete quarantined payloads; audited",
            data=_ref("ItemOutcomes"),
            body="KeysRequest",
            errors=BODY_ERRORS,
        ),
    },
    "/api/admin/queue/invalid/purge": {
        "post": _admin(
            "Drop every quarantined payload; audited",
            data=_ref("Purged"),
            body="EmptyRequest",
            errors=BODY_ERRORS,
        ),
    },
    "/api/admin/audit": {
        "get": _admin(
            "The audit trail of admin actions, newest first",
            description=(
                "Every admin action (API, CLI, console): who, which credential, what, which ids, "
                "outcome, when. Kept in PostgreSQL (the event log, types admin.<action>)."
            ),
            data=_ref("AuditPage"),
            parameters=[
                _query("actor", STRING, 'only this actor, e.g. "admin:1a2b3c4d5e6f"'),
                _query("action", STRING, "only this action, e.g. requeue"),
                _query("since", DATETIME, "at or after (ISO-8601; no offset = ADMIN_TIMEZONE)"),
                _query("until", DATETIME, "before (ISO-8601; no offset = ADMIN_TIMEZONE)"),
                *OFFSET_LIMIT,
            ],
            errors=(400,),
        ),
    },
    "/healthz": {
        "get": _operation("Liveness: the process answers (no I/O)", tag="health", data=_ref("Health")),
    },
    "/readyz": {
        "get": {
            **_operation(
                "Readiness: PostgreSQL SELECT 1 and Redis PING", tag="health", data=_ref("Readiness")
            ),
            "responses": {
                "200": _success(_ref("Readiness")),
                "503": {
                    "description": "5003: a dependency is unavailable; data names which",
                    "content": {"application/json": {"schema": _ref("Envelope")}},
                    "headers": RETRY_AFTER_HEADER,
                },
            },
        },
    },
    "/healthz/workers": {
        "get": {
            **_operation(
                "Processes in the registry, per kind (alive, gone, stopped); counts only",
                tag="health",
                data=_ref("Processes"),
            ),
            "responses": {
                "200": _success(_ref("Processes")),
                "503": {
                    "description": "5003: no live worker or hotpath process (data: the counts) or Redis down",
                    "content": {"application/json": {"schema": _ref("Envelope")}},
                    "headers": RETRY_AFTER_HEADER,
                },
            },
        },
    },
    "/metrics": {
        "get": {
            "summary": "Prometheus metrics (text format); an admin token or a METRICS_TOKENS token",
            "tags": ["health"],
            "security": ADMIN,
            "responses": {
                "200": {"description": "the metrics", "content": {"text/plain": {}}},
                **{
                    str(status): {"$ref": f"#/components/responses/{ERROR_RESPONSE_NAMES[status]}"}
                    for status in AUTH_ERRORS
                },
            },
        },
    },
    "/": {
        "get": {
            "summary": "What this server is, and links to the console, this document and the probes",
            "description": "An HTML page for a browser; the envelope (data: service, links) for JSON.",
            "tags": ["meta"],
            "responses": {
                "200": {
                    "description": "the page, or the links as JSON",
                    "content": {"text/html": {}, "application/json": {"schema": _ref("Envelope")}},
                }
            },
        },
    },
    "/favicon.ico": {
        "get": {
            "summary": "The site's icon (SVG)",
            "tags": ["meta"],
            "responses": {"200": {"description": "the icon", "content": {"image/svg+xml": {}}}},
        },
    },
    "/openapi.json": {
        "get": {
            "summary": "This document",
            "tags": ["meta"],
            "responses": {
                "200": {"description": "the OpenAPI document", "content": {"application/json": {}}}
            },
        },
    },
}


def document() -> Schema:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "mi-assessment API",
            "version": "1.0.0",
            "description": (
                'Every response is the envelope {"code", "message", "data"}: code 0 and message "success" '
                "on success. JSON fields are camelCase; datetimes ISO-8601 with their offset. Bodies are "
                f"JSON objects sent as application/json, at most {MAX_CONTENT_LENGTH} bytes; unknown "
                "fields are ignored; ids are integers in 1..2^63-1 (booleans, floats and strings are "
                "rejected)."
            ),
        },
        "tags": [
            {"name": "assessment", "description": "the mini-program's user API (user token)"},
            {"name": "admin", "description": "the admin API (admin token)"},
            {"name": "health", "description": "probes, no authentication"},
            {"name": "meta", "description": "this document"},
            {"name": "report", "description": "the report as a page"},
        ],
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "responses": RESPONSES,
            "securitySchemes": {
                "userToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a user token, from `flask --app web issue-user-token USER_ID`",
                },
                "adminToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "one of the server's ADMIN_TOKENS",
                },
            },
        },
    }


@bp.get("/openapi.json")
def openapi_json() -> Response:
    return jsonify(document())
