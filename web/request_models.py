"""What the endpoints read: the JSON bodies and the query strings, one model each.

The views receive them validated (web/spec.py); a refusal is 1001 naming the parameter
(web/fields.py says how each field is checked).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from services.domain.errors import MSG_EMPTY_ID_LIST
from services.domain.events import MAX_ACTOR_LENGTH
from services.domain.limits import MAX_ID, is_strict_int
from services.domain.questionnaire import MAX_VALUE, MIN_VALUE
from services.domain.status import MAX_STATUS, MIN_STATUS
from services.usecases.admin import MAX_PAGE_SIZE
from services.usecases.assessment import DEFAULT_RECORDS_PAGE_SIZE, MAX_RECORDS_PAGE_SIZE
from services.usecases.drill import DEFAULT_DRILL_MINUTES, MAX_DRILL_MINUTES
from services.usecases.operations import MAX_PAGE_SIZE as OPS_PAGE_SIZE
from services.usecases.regeneration_tasks import TASK_STATUSES
from web.fields import (
    MAX_BATCH_IDS,
    Body,
    BodyInt,
    BodyTime,
    Handles,
    Id,
    IdItem,
    IdList,
    Label,
    Object,
    OptionalId,
    Query,
    QueryBool,
    QueryId,
    QueryInt,
    QueryTime,
    Status,
    refuse,
)

#: Largest question id: the questions.id column is an int4.
MAX_QUESTION_ID = 2**31 - 1
#: Most answers in one submission (far above any questionnaire, far below the body cap).
MAX_ANSWERS = 1_000
#: Paging bounds (MAX_PAGE_SIZE is the services'); (page - 1) * page_size stays far within a bigint OFFSET.
MAX_PAGE = 2**31 - 1
DEFAULT_PAGE_SIZE = 20
#: Page size of the operations' lists (offset/limit paging).
DEFAULT_LIMIT = 50
#: The refusal of a body with both or neither of "ids" and "all".
_IDS_OR_ALL = '请求体为 {"ids": [...]} 或 {"all": true}，二者只能给出一个'


# -- bodies -----------------------------------------------------------------------------


class RecordIdRequest(Body):
    record_id: Id


class IdRequest(Body):
    id: Id


class IdsRequest(Body):
    null_when_absent = ("ids",)

    ids: Annotated[
        list[IdItem],
        IdList(MSG_EMPTY_ID_LIST),
        Field(
            description=f'Non-empty ("{MSG_EMPTY_ID_LIST}", 1001), at most {MAX_BATCH_IDS} ids, no '
            "duplicates (a duplicate is rejected with 1001)"
        ),
    ]


class Answer(Object):
    # A field missing here reads as "not an integer" (web/fields.py `error_message`).
    question_id: Annotated[int, BodyInt(1, MAX_QUESTION_ID)]
    value: Annotated[int, BodyInt(MIN_VALUE, MAX_VALUE)]


def _answer_list(allow_empty: bool) -> BeforeValidator:
    """``[{"questionId": q, "value": v}, ...]``; with `allow_empty` (a submission completed by
    autosaved answers) a missing, null or empty list is an empty list, the service then
    decides whether that is enough."""

    def check(value: Any) -> Any:
        if value is None:
            if allow_empty:
                return []
            raise refuse("缺少参数 {name}")
        if not isinstance(value, list):
            raise refuse("参数 {name} 必须是数组")
        if not value and not allow_empty:
            raise refuse("参数 {name} 不能为空")
        if len(value) > MAX_ANSWERS:
            raise refuse(f"参数 {{name}} 最多包含 {MAX_ANSWERS} 项")
        return value

    return BeforeValidator(check)


def _distinct_questions(answers: list[Answer]) -> list[Answer]:
    if len({a.question_id for a in answers}) != len(answers):
        raise refuse("参数 {name} 中同一题目只能作答一次")
    return answers


class SaveAnswersRequest(Body):
    record_id: Id
    answers: Annotated[
        list[Answer],
        Field(min_length=1, max_length=MAX_ANSWERS),
        AfterValidator(_distinct_questions),
        _answer_list(allow_empty=False),
    ]
    """Some answers, each question at most once; a later save of a question wins."""


class SubmitAnswersRequest(Body):
    record_id: Id
    answers: Annotated[
        list[Answer],
        Field(max_length=MAX_ANSWERS),
        AfterValidator(_distinct_questions),
        _answer_list(allow_empty=True),
    ] = Field(default_factory=list)
    """Each question at most once; together with the answers already saved (saveAnswers) every
    active question must be answered. May be empty or left out when everything was saved before."""


def _task_status(value: object) -> int:
    if value is None:
        raise refuse("缺少参数 {name}")
    if not is_strict_int(value) or value not in TASK_STATUSES:
        raise refuse("参数 status 只能是 3（生成中）或 5（生成失败）")
    return value


class RegenerateMatchingRequest(Body):
    status: Annotated[
        int, Field(json_schema_extra={"enum": list(TASK_STATUSES)}), BeforeValidator(_task_status)
    ]
    """3 生成中 or 5 生成失败"""
    submitted_from: BodyTime = None
    """Submitted at or after (no offset = ADMIN_TIMEZONE)."""
    submitted_to: BodyTime = None
    """Submitted before (no offset = ADMIN_TIMEZONE)."""
    user_id: OptionalId = None


class HandlesRequest(Body):
    null_when_absent = ("ids",)

    ids: Handles
    """Dead letters' messageId."""


class KeysRequest(Body):
    null_when_absent = ("keys",)

    keys: Handles
    """Invalid payloads' key."""


class _IdsOrAll(Body):
    """Either ``{"ids": [...]}`` or ``{"all": true}``; with neither, `ids` is refused as empty
    (each subclass declares `ids`, then `all`)."""

    @model_validator(mode="before")
    @classmethod
    def _ids_or_all(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "all" in data:
            if data["all"] is not True or data.get("ids") is not None:
                raise refuse(_IDS_OR_ALL)
            return data
        return {**data, "ids": [] if data.get("ids") is None else data["ids"]}


class RequeueRequest(_IdsOrAll):
    """{"ids": [...]} for some dead letters (or delayed retries), or {"all": true} for all of them."""

    ids: Handles | None = None
    all: Literal[True] | None = None


class DrillStartRequest(Body):
    null_when_absent = ("ids",)

    ids: Annotated[list[IdItem], IdList(MSG_EMPTY_ID_LIST)]
    minutes: Annotated[int, BodyInt(1, MAX_DRILL_MINUTES)] = DEFAULT_DRILL_MINUTES


class DrillStopRequest(_IdsOrAll):
    """{"ids": [...]} for some records, or {"all": true} for every drilled record."""

    ids: Annotated[list[IdItem], IdList(MSG_EMPTY_ID_LIST)] | None = None
    all: Literal[True] | None = None


class EmptyRequest(Body):
    """Any JSON object (e.g. {})."""


# -- query strings ----------------------------------------------------------------------


class RecordIdQuery(Query):
    record_id: QueryId
    """Id of one of the caller's records."""


class RecordsQuery(Query):
    cursor: QueryId | None = None
    """The previous page's nextCursor; absent for the first page."""
    size: Annotated[int, QueryInt(1, MAX_RECORDS_PAGE_SIZE)] = DEFAULT_RECORDS_PAGE_SIZE
    """Records per page."""


class RecordListQuery(Query):
    status: Annotated[Status, QueryInt(MIN_STATUS, MAX_STATUS)] | None = None
    """Only records in this status."""
    user_id: QueryId | None = None
    """Only this user's records."""
    include_deleted: QueryBool = False
    """Include soft-deleted records."""
    created_from: QueryTime | None = None
    """Created at or after (ISO-8601; no offset = ADMIN_TIMEZONE)."""
    created_to: QueryTime | None = None
    """Created before (ISO-8601; no offset = ADMIN_TIMEZONE)."""
    page: Annotated[int, QueryInt(1, MAX_PAGE)] = 1
    page_size: Annotated[int, QueryInt(1, MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE
    """Records per page."""


class EventsQuery(Query):
    id: QueryId
    """The record."""
    page: Annotated[int, QueryInt(1, MAX_PAGE)] = 1
    page_size: Annotated[int, QueryInt(1, MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE
    """Events per page."""


class OffsetLimit(Query):
    offset: Annotated[int, QueryInt(0, MAX_ID)] = 0
    """Entries to skip."""
    limit: Annotated[int, QueryInt(1, OPS_PAGE_SIZE)] = DEFAULT_LIMIT
    """Entries."""


class AuditQuery(OffsetLimit):
    actor: Annotated[str, Label(MAX_ACTOR_LENGTH)] | None = None
    """Only this actor, e.g. "admin:1a2b3c4d5e6f"."""
    action: Annotated[str, Label(MAX_ACTOR_LENGTH)] | None = None
    """Only this action, e.g. requeue."""
    since: QueryTime | None = None
    """At or after (ISO-8601; no offset = ADMIN_TIMEZONE)."""
    until: QueryTime | None = None
    """Before (ISO-8601; no offset = ADMIN_TIMEZONE)."""
