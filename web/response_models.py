"""What the endpoints answer: the envelope and the objects in its `data`, one model each.

The services return frozen dataclasses with snake_case fields; these models read them by
attribute and write the original .NET API's camelCase names, in the same order, with every
time in ISO-8601 with its offset (web/fields.py `Time`). A field is on the wire because it is
declared here: a new field of a service view stays internal until a model states it.
"""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Any, Generic, Literal, TypeVar, Union, get_args, get_origin

from pydantic import ConfigDict, Field

from services.domain.events import EventType
from services.domain.questionnaire import LEVELS, MAX_SUGGESTIONS, MAX_VALUE, MIN_SUGGESTIONS, MIN_VALUE
from services.usecases.admin import MAX_PAGE_SIZE
from services.usecases.assessment import MAX_RECORDS_PAGE_SIZE
from services.usecases.operations import MAX_PAGE_SIZE as OPS_PAGE_SIZE
from services.usecases.regeneration_tasks import PAGE_SIZE as TASK_PAGE_SIZE
from services.usecases.regeneration_tasks import TASK_STATUSES, TaskState
from web.fields import Out, Status, Time

T = TypeVar("T")

#: An id of a row (record, user), as the API writes it.
Id = Annotated[int, Field(ge=1, json_schema_extra={"format": "int64"})]
Count = Annotated[int, Field(ge=0)]
Score = Annotated[float, Field(ge=0, le=100)]
Level = Annotated[str, Field(json_schema_extra={"enum": list(LEVELS)}, description="highest first")]


def _name(kind: Any) -> str:
    """A component name for a parametrised model: letters only, as OpenAPI wants them."""
    if kind is type(None) or kind is None:
        return "Nothing"
    if get_origin(kind) is list:
        return f"{_name(get_args(kind)[0])}List"
    if get_origin(kind) in (Union, UnionType):
        return "Or".join(_name(arg) for arg in get_args(kind))
    return str(kind.__name__)


#: The config of a generic model: its parametrisations (`Ok[Record]`, one per endpoint, made as
#: the views are declared) are classes made outside any source, where pydantic's search for
#: attribute docstrings (on Python < 3.13: each frame of the stack up to the import machinery,
#: each a scan of sys.modules) found nothing and cost about half of the web's import. Their
#: fields' descriptions are given by `Field`.
GENERIC = ConfigDict(use_attribute_docstrings=False)


# -- the envelope -----------------------------------------------------------------------


class Ok(Out, Generic[T]):
    """A success: code 0, message "success", the result in `data`."""

    model_config = GENERIC

    code: Literal[0] = 0
    message: Literal["success"] = "success"
    data: T

    @classmethod
    def model_parametrized_name(cls, params: tuple[Any, ...]) -> str:
        return f"{_name(params[0])}Response"


class Error(Out):
    """A refusal or a failure: a non-zero code and a message for the user, no data."""

    code: int
    """1001 bad input (HTTP 400), 2005 invalid operation for the record's status (409), 3241 record
    not found (404), 5003 a server the call needs (PostgreSQL, or Redis for the queue and the
    autosave store) is unreachable (503, with Retry-After), 5000 internal error (500); HTTP errors
    without a domain code use the HTTP status (401, 403, 404, 405, 413, 415, and 414 / 431 for a
    request line / headers over the server's limits)."""
    message: str
    data: None = None


class Envelope(Out, Generic[T]):
    """Any answer, e.g. a probe's 503: its code, a message, its data."""

    model_config = GENERIC

    code: int = Field(description="0 on success, else the error code.")
    message: str = Field(description='"success" on success, else a message for the user.')
    data: T

    @classmethod
    def model_parametrized_name(cls, params: tuple[Any, ...]) -> str:
        return f"{_name(params[0])}Envelope"


# -- the user API -----------------------------------------------------------------------


class Record(Out):
    id: Id
    user_id: Id
    status: Status
    status_text: str
    created_at: Time
    started_at: Time | None
    submitted_at: Time | None
    completed_at: Time | None
    report_ready: bool
    """Status 4: GET /report answers with the report."""


class RecordPage(Out):
    items: list[Record]
    """Newest first."""
    total: Count
    """The caller's live records in all."""
    size: Annotated[int, Field(ge=1, le=MAX_RECORDS_PAGE_SIZE)]
    next_cursor: Id | None
    """Pass as `cursor` for the next page; null on the last page. Records created meanwhile never
    shift a later page."""


class SavedAnswer(Out):
    question_id: int
    value: Annotated[int, Field(ge=MIN_VALUE, le=MAX_VALUE)]
    answered_at: Time


class RecordDetail(Record):
    answers: list[SavedAnswer]
    """The stored answers overlaid by the autosaved ones (what a submission would take), in
    question order."""
    answered_count: Count
    total_questions: Count
    """Active questions."""
    current_question_id: int | None
    """The question answered last (autosave progress, else the database's)."""
    next_question_id: int | None
    """The first unanswered question in questionnaire order: where to go on; null when every
    question is answered."""
    autosave_available: bool
    """False when the autosave store (Redis) could not be read: the answers are the database's and
    the last seconds of saves may be missing."""


class ScaleOption(Out):
    value: Annotated[int, Field(ge=MIN_VALUE, le=MAX_VALUE)]
    label: str
    """The questionnaire's label, e.g. 1 非常不符合 … 5 非常符合."""


class Question(Out):
    id: int
    dimension_code: str
    dimension_name: str
    text: str
    sort_order: int
    options: list[ScaleOption]
    """The scale, 1 first."""


class SubmitResult(Out):
    record_id: Id
    status: Status
    enqueued: bool
    """False when the job could not be queued: the record stays in status 3 and an admin can
    regenerate it."""


class SaveAnswersResult(Out):
    record_id: Id
    saved: Annotated[int, Field(ge=1)]
    """Answers taken from this request."""
    answered_count: Count
    """Distinct questions saved so far in this record."""
    saved_at: Time
    """The save time, also the answers' answered time."""


class ResultStatus(Out):
    record_id: Id
    status: Status
    status_text: str
    description: str
    """For status 5: "报告生成失败，请联系客服"."""


class DimensionScore(Out):
    code: str
    name: str
    raw_score: int
    score: Score
    rank: Annotated[int, Field(ge=1)]
    """1 = strongest."""
    level: Level
    description: str
    """What the dimension measures."""
    interpretation: str
    """What this level of this dimension means (the questionnaire data's text)."""
    suggestions: Annotated[list[str], Field(min_length=MIN_SUGGESTIONS, max_length=MAX_SUGGESTIONS)]
    """Concrete things to do (empty only for a dimension no longer in the data)."""


class DimensionRef(Out):
    code: str
    name: str
    score: Score
    level: Level


class Report(Out):
    record_id: Id
    user_id: Id
    completed_at: Time | None
    dimensions: list[DimensionScore]
    """By rank, 1 first."""
    top_dimensions: list[str]
    """Dimension codes, strongest first."""
    summary: str
    strengths: list[DimensionRef]
    """Levels 优势/较强, strongest first, at most 3 (else the first-ranked one)."""
    areas_to_develop: list[DimensionRef]
    """The other dimensions below those levels, weakest first, at most 3."""
    questionnaire_version: int
    """Version of the data the texts come from."""
    page_url: str | None
    """The report as an HTML page (GET /reports/{record_id}): a signed link relative to the API's
    host, valid for a week."""


# -- the admin API ----------------------------------------------------------------------


class AdminRecord(Out):
    id: Id
    user_id: Id
    status: Status
    status_name: str
    created_at: Time
    submitted_at: Time | None
    completed_at: Time | None
    is_deleted: bool


class _NumberedPage(Out, Generic[T]):
    model_config = GENERIC

    items: list[T]
    total: Count
    page: Annotated[int, Field(ge=1)]
    page_size: Annotated[int, Field(ge=1, le=MAX_PAGE_SIZE)]


class AdminRecordPage(_NumberedPage[AdminRecord]):
    """A page of records, newest first."""


class ItemOutcome(Out):
    id: int | str
    """A record id, or a dead letter's, delayed retry's or payload's handle."""
    outcome: Literal["regenerated", "requeued", "retried", "deleted", "skipped"]
    code: int | None
    """When skipped: 3241 not found (record, dead letter or payload), 2005 the record's status does
    not allow it, 1001 a repeated id or a dead letter without a RecordId, 5003 the queue (Redis)
    refused the step."""
    reason: str | None
    """When skipped: why, in Chinese."""


class ItemOutcomes(Out):
    items: list[ItemOutcome]


class BatchRegenerateResult(Out):
    success_count: Count
    """Records reset to 3 and queued."""
    skipped_count: Count
    """Missing, soft-deleted, not in status 3/5, or not queued (Redis down)."""
    items: list[ItemOutcome]
    """One outcome per requested id, in request order."""


class _OffsetPage(Out, Generic[T]):
    model_config = GENERIC

    items: list[T]
    total: Count
    offset: Count
    limit: Annotated[int, Field(ge=1, le=OPS_PAGE_SIZE)]


class DeadLetter(Out):
    message_id: str
    """Handle for requeue/delete (digest of the entry)."""
    record_id: Id | None
    attempts: Count
    """Attempts made before it died."""
    last_error: str | None
    """Exception type and message (<= 500 chars)."""
    dead_at: Time | None
    raw: str
    """The entry of report:queue:dead verbatim."""


class DeadLetterPage(_OffsetPage[DeadLetter]):
    """Dead letters, newest first."""


class DelayedRetry(Out):
    message_id: str | None
    """Handle for retryNow/delete (the entry's unique 16-hex prefix); null for an entry the broker
    did not write."""
    record_id: Id | None
    attempts: Count | None
    """Attempts made so far, all failed (the job's RetryCount)."""
    due_at: Time | None
    """When it runs again; null when the entry's score is no time."""
    enqueued_at: Time | None
    raw: str
    """The job as it will be queued again, verbatim."""
    last_error: str | None
    """The record's last failed attempt's error."""


class DelayedRetryPage(_OffsetPage[DelayedRetry]):
    """Delayed retries, soonest due first."""


class DrilledRecord(Out):
    record_id: Id
    until: Time


class DrilledRecords(Out):
    items: list[DrilledRecord]


class DrillStopped(Out):
    stopped: list[Id]
    """Records that were drilled."""


class InvalidPayload(Out):
    key: str
    """Handle for delete (digest of the entry)."""
    raw: str
    """The entry verbatim; bytes that are not UTF-8 as \\xNN."""
    reason: str | None
    """Why the worker could not read it, as it said when it quarantined it; null for an entry
    quarantined before this was recorded (or pushed there by hand)."""
    quarantined_at: Time | None
    """When the worker quarantined it (the Redis server's clock); null as reason."""


class InvalidPayloadPage(_OffsetPage[InvalidPayload]):
    """Quarantined payloads, newest first."""


class Purged(Out):
    purged: Count
    """Payloads dropped."""


class AuditEntry(Out):
    at: Time
    actor: str
    """"admin:<fingerprint>", "cli:<os user>", "console:<name>"."""
    credential: str
    """The credential's label or fingerprint, never the secret."""
    action: str
    """regenerate, batch_regenerate, regenerate_matching, delete_record, requeue, delete_dead,
    retry_now, delete_delayed, delete_invalid, purge_invalid, drill_start, drill_stop."""
    ids: list[int | str]
    outcome: str
    """ok, partial or failed."""
    detail: str | None


class AuditPage(_OffsetPage[AuditEntry]):
    """Audit entries, newest first."""


class TaskStarted(Out):
    task_id: Annotated[str, Field(pattern="^[0-9a-f]{32}$")]
    """GET /api/admin/tasks/{task_id}."""
    matched: Count
    """Records matching now (one COUNT)."""


class MatchFilter(Out):
    status: Annotated[int, Field(json_schema_extra={"enum": list(TASK_STATUSES)})]
    submitted_from: Time | None
    submitted_to: Time | None
    user_id: Id | None


class Task(Out):
    task_id: str
    state: TaskState
    filter: MatchFilter
    matched: Count
    """Records matching when the task was made."""
    max_id: Count
    """Scope: records with id <= maxId only."""
    cursor: Count
    """Last id of the last page done."""
    pages: Annotated[int, Field(ge=0, description=f"Pages of up to {TASK_PAGE_SIZE} ids done.")]
    regenerated: Count
    """Records reset to 3 and queued."""
    skipped: Count
    """Ids of a page whose record changed meanwhile."""
    actor: str
    """Who started it."""
    created_at: Time | None
    started_at: Time | None
    finished_at: Time | None
    error: str | None


class QueueFigures(Out):
    queued: int
    """LLEN <queue>:queue."""
    dead: int
    """LLEN <queue>:queue:dead."""
    delayed: int
    """Retries waiting for their due time."""
    in_flight: int
    """Taken by a worker, not yet acknowledged."""
    invalid: int
    """Undecodable messages kept aside."""


class Queues(Out):
    report: QueueFigures
    admin: QueueFigures
    """Admin tasks (regenerate matching)."""


class QueueStats(QueueFigures):
    """The report queue's figures (at the top, as before), and every queue's under `queues`."""

    queues: Queues


class Event(Out):
    id: Annotated[str, Field(json_schema_extra={"format": "uuid"})]
    event_type: Annotated[str, Field(description="; ".join(t.value for t in EventType))]
    occurred_at: Time
    record_id: Id | None
    user_id: Id | None
    actor: str | None
    """"user:<id>", "admin:<first 12 hex digits of the token's SHA-256>" or "worker"."""
    data: dict[str, Any]
    """Details of the event, by type."""


class EventPage(_NumberedPage[Event]):
    """A record's events, oldest first."""


# -- the probes and the home page -------------------------------------------------------


class Health(Out):
    status: Literal["ok"]


class Readiness(Out):
    database: Literal["ok", "unavailable"]
    redis: Literal["ok", "unavailable"]


class ProcessCount(Out):
    alive: int
    """Beating."""
    stopped: int
    """Exited cleanly within the last hour."""
    gone: int
    """Silent past the timeout without a clean exit (crashed, killed)."""


class Processes(Out):
    worker: ProcessCount
    hotpath: ProcessCount
    reconciler: ProcessCount
    web: ProcessCount
