"""The vocabulary of the HTTP contract: field types, the models' base classes, and the
message of a validation error.

Each type is declared once: the pydantic constraints give its JSON schema (the OpenAPI
document, web/spec.py); its validator, which runs first, makes the checks of the original
.NET API, strict (`services.domain.limits.is_strict_int`: booleans, floats and numeric strings are
no integers) and with their messages, so a refusal reads as it always did. A validator
raises `PydanticCustomError` of type ``param`` whose message names the parameter as
``{name}``; `error_message` fills it in from the error's location (``ids[1]``,
``answers[0].questionId``) and turns pydantic's own errors (a field missing, an item that is
not an object) into the same sentences.

Rules shared by all endpoints:

* ids are JSON integers in 1..MAX_ID (PostgreSQL bigint, .NET long);
* id lists hold at most `MAX_BATCH_IDS` ids and no duplicates (a duplicate would make
  `successCount + skippedCount` ambiguous);
* unknown body fields and query parameters are ignored; a query parameter appears at most
  once, and an empty one counts as absent;
* a time without an offset is read in the zone the validation context names (the admin
  API's ADMIN_TIMEZONE), and comes out in UTC.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, tzinfo
from typing import Annotated, Any, ClassVar, Final

from annotated_types import GroupedMetadata
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    Strict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict
from pydantic.json_schema import DEFAULT_REF_TEMPLATE, GenerateJsonSchema, JsonSchemaMode
from pydantic_core import PydanticCustomError
from werkzeug.datastructures import MultiDict

from services.domain.limits import MAX_ID, is_strict_int
from services.domain.status import MAX_STATUS, MIN_STATUS, STATUS_TEXT

#: Most ids (or handles) in one batch request.
MAX_BATCH_IDS = 1_000
#: Longest handle of a dead letter or quarantined payload accepted in a body.
MAX_HANDLE_LENGTH = 64
#: Body size cap, in bytes (Flask's MAX_CONTENT_LENGTH).
MAX_CONTENT_LENGTH = 64 * 1024
#: The document's format of an id.
_INT64: Final[JsonDict] = {"format": "int64"}
#: Key of the validation context naming the zone of a time given without an offset.
ZONE: Final = "zone"

#: The error type of every refusal written here; its message holds ``{name}``.
PARAM_ERROR = "param"
#: Messages of pydantic's own error types.
_BUILTIN_MESSAGES = {
    "missing": "缺少参数 {name}",
    "model_type": "参数 {name} 必须是对象",
    "model_attributes_type": "参数 {name} 必须是对象",
    "dict_type": "参数 {name} 必须是对象",
}
_INVALID = "参数 {name} 不合法"
_NOT_AN_INTEGER = "参数 {name} 必须是整数"

#: A plain decimal integer: int() alone would also take "1_000", " 7 " and non-ASCII digits.
_INTEGER = re.compile(r"-?[0-9]{1,25}")
#: A handle of a dead letter or quarantined payload (hex digest, ".2" for a repeat).
_HANDLE = re.compile(rf"[0-9A-Za-z._-]{{1,{MAX_HANDLE_LENGTH}}}")
#: What an ISO-8601 date or date-time may look like here: ASCII only, nothing after it (a
#: trailing NUL, a space or a newline is refused, not trimmed or passed to the database).
_ISO_DATETIME = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:[.,][0-9]{1,9})?)?(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)?)?"
)
_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})


def refuse(message: str) -> PydanticCustomError:
    return PydanticCustomError(PARAM_ERROR, message)


def error_message(error: ValidationError) -> str:
    """The first error, in the API's words, naming the parameter where it is."""
    first = error.errors(include_url=False, include_context=False, include_input=False)[0]
    loc = first["loc"]
    name = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    if first["type"] == PARAM_ERROR:
        template = first["msg"]
    elif first["type"] == "missing" and any(isinstance(part, int) for part in loc):
        # A field missing from an item of a list (an answer's questionId or value): the
        # original API read it as null, which is no integer.
        template = _NOT_AN_INTEGER
    else:
        template = _BUILTIN_MESSAGES.get(first["type"], _INVALID)
    return template.replace("{name}", name.removeprefix("."))


# -- the models' base classes -----------------------------------------------------------


class _NoTitles(GenerateJsonSchema):
    """Schemas without pydantic's "title" on every property: the names say it already."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


class Wire(BaseModel):
    """A JSON object of the API: camelCase names, each field's docstring its description."""

    model_config = ConfigDict(alias_generator=to_camel, use_attribute_docstrings=True, frozen=True)

    @classmethod
    def model_json_schema(
        cls,
        by_alias: bool | None = True,
        ref_template: str = DEFAULT_REF_TEMPLATE,
        schema_generator: type[GenerateJsonSchema] = _NoTitles,
        mode: JsonSchemaMode = "validation",
        **kwargs: Any,
    ) -> dict[str, Any]:
        return super().model_json_schema(by_alias, ref_template, schema_generator, mode, **kwargs)


class Object(Wire):
    """A JSON object of a request: only the camelCase names count, unknown fields are ignored."""

    model_config = ConfigDict(strict=True, validate_by_name=False)


class Body(Object):
    """A request body. `null_when_absent` names the fields an absent key reads as null
    (``body.get(name)``): their validators then say what is wrong with the value, rather
    than that it is missing.
    """

    null_when_absent: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _absent_is_null(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(name not in data for name in cls.null_when_absent):
            return {**dict.fromkeys(cls.null_when_absent), **data}
        return data


class Query(Wire):
    """Query parameters: web/spec.py passes each as a string (a list when it is repeated)."""

    model_config = ConfigDict(strict=True, validate_by_name=False)


class Out(Wire):
    """A response object, read from the attributes of what the services return (their
    snake_case dataclasses), written with the camelCase names."""

    model_config = ConfigDict(
        from_attributes=True,
        validate_by_name=True,
        serialize_by_alias=True,
        json_schema_serialization_defaults_required=True,
    )


# -- body fields ------------------------------------------------------------------------


def _int_in_range(minimum: int, maximum: int) -> Callable[[object], int]:
    def check(value: object) -> int:
        if not is_strict_int(value):
            raise refuse("参数 {name} 必须是整数")
        if not minimum <= value <= maximum:
            raise refuse(f"参数 {{name}} 必须在 {minimum} 到 {maximum} 之间")
        return value

    return check


@dataclass(frozen=True)
class BodyInt(GroupedMetadata):
    """An integer of a body in minimum..maximum. A null (or, with `null_when_absent`, an
    absent) one is "not an integer"; with `required`, a null one is missing."""

    minimum: int
    maximum: int
    required: bool = False
    #: Stated as int64 in the document (the ids: PostgreSQL bigint).
    int64: bool = False

    def __iter__(self) -> Iterator[object]:
        minimum, maximum, required = self.minimum, self.maximum, self.required
        out_of_range = f"参数 {{name}} 必须在 {minimum} 到 {maximum} 之间"

        def check(value: object) -> int:
            if not is_strict_int(value):
                raise refuse("缺少参数 {name}" if value is None and required else _NOT_AN_INTEGER)
            if not minimum <= value <= maximum:
                raise refuse(out_of_range)
            return value

        # The bounds are `check`'s: stated for the document only, not checked twice.
        bounds: JsonDict = {"minimum": minimum, "maximum": maximum}
        yield Strict()
        yield Field(json_schema_extra={**bounds, **_INT64} if self.int64 else bounds)
        yield BeforeValidator(check)


#: A record or user id where it is required (a null one is missing).
Id = Annotated[int, BodyInt(1, MAX_ID, required=True, int64=True)]
#: One id of a list.
IdItem = Annotated[int, BodyInt(1, MAX_ID, int64=True)]


def _optional_id(value: object) -> int | None:
    return None if value is None else _int_in_range(1, MAX_ID)(value)


#: An id where null means "none".
OptionalId = Annotated[
    int | None, Field(ge=1, le=MAX_ID, json_schema_extra=_INT64), BeforeValidator(_optional_id)
]


@dataclass(frozen=True)
class IdList(GroupedMetadata):
    """A non-empty list of at most MAX_BATCH_IDS distinct ids (a null list is an empty one);
    `empty_message` says what an empty one lacks."""

    empty_message: str

    def __iter__(self) -> Iterator[object]:
        def check(value: object) -> object:
            if value is None:
                value = []
            if not isinstance(value, list):
                raise refuse("参数 {name} 必须是整数数组")
            if not value:
                raise refuse(self.empty_message)
            if len(value) > MAX_BATCH_IDS:
                raise refuse(f"参数 {{name}} 最多包含 {MAX_BATCH_IDS} 个 ID")
            return value

        def no_duplicates(ids: list[int]) -> list[int]:
            if len(set(ids)) != len(ids):
                raise refuse("参数 {name} 不能包含重复的 ID")
            return ids

        yield Field(min_length=1, max_length=MAX_BATCH_IDS, json_schema_extra={"uniqueItems": True})
        yield AfterValidator(no_duplicates)
        yield BeforeValidator(check)


def _check_handles(value: object) -> object:
    """The checks of a list of handles, in the order the API always made them."""
    if not isinstance(value, list) or not value:
        raise refuse("{name} 必须是非空的字符串列表")
    if len(value) > MAX_BATCH_IDS:
        raise refuse(f"{{name}} 最多 {MAX_BATCH_IDS} 项")
    if any(not isinstance(v, str) or not _HANDLE.fullmatch(v) for v in value):
        raise refuse(f"{{name}} 的每一项必须是 1 到 {MAX_HANDLE_LENGTH} 个字母、数字、点、下划线或连字符")
    if len(set(value)) != len(value):
        raise refuse("{name} 不能有重复项")
    return value


#: A non-empty list of distinct handles (dead letters' message ids, payloads' keys).
Handles = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=MAX_HANDLE_LENGTH, pattern=f"^{_HANDLE.pattern}$")]],
    Field(min_length=1, max_length=MAX_BATCH_IDS, json_schema_extra={"uniqueItems": True}),
    BeforeValidator(_check_handles),
]


def _to_utc(raw: str, zone: tzinfo) -> datetime:
    """Normalised to UTC here so no later step can overflow on the edges of the calendar
    (year 1 with a positive offset, year 9999 with a negative one)."""
    try:
        if not _ISO_DATETIME.fullmatch(raw):
            raise ValueError(raw)
        value = datetime.fromisoformat(raw)
        if value.tzinfo is None:
            value = value.replace(tzinfo=zone)
        return value.astimezone(UTC)
    except (ValueError, OverflowError):
        raise refuse("参数 {name} 必须是 ISO-8601 时间，例如 2025-01-15T10:30:00+08:00") from None


def _zone(info: ValidationInfo) -> tzinfo:
    context = info.context
    zone = context.get(ZONE) if isinstance(context, dict) else None
    return zone if isinstance(zone, tzinfo) else UTC


def _body_time(value: object, info: ValidationInfo) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise refuse("参数 {name} 必须是 ISO-8601 时间字符串")
    return _to_utc(value, _zone(info))


_TIME_SCHEMA = WithJsonSchema({"type": "string", "format": "date-time"})
#: An optional ISO-8601 date or date-time of a body; one without an offset is in the
#: context's zone (ADMIN_TIMEZONE); in UTC once read.
BodyTime = Annotated[
    datetime | None,
    WithJsonSchema({"type": ["string", "null"], "format": "date-time"}),
    BeforeValidator(_body_time),
]


# -- query parameters -------------------------------------------------------------------


def _single(value: object) -> str:
    if isinstance(value, list):
        raise refuse("参数 {name} 只能出现一次")
    if not isinstance(value, str):
        raise refuse(_INVALID)
    return value


@dataclass(frozen=True)
class QueryInt(GroupedMetadata):
    """A plain decimal integer parameter in minimum..maximum (the document states the maximum
    unless `state_maximum` is false)."""

    minimum: int
    maximum: int
    int64: bool = False
    state_maximum: bool = True

    def __iter__(self) -> Iterator[object]:
        in_range = _int_in_range(self.minimum, self.maximum)

        def check(value: object) -> int:
            raw = _single(value)
            if not _INTEGER.fullmatch(raw):
                raise refuse("参数 {name} 必须是整数")
            return in_range(int(raw))

        maximum = self.maximum if self.state_maximum else None
        yield Field(ge=self.minimum, le=maximum, json_schema_extra=_INT64 if self.int64 else None)
        yield BeforeValidator(check)


#: An id parameter (recordId, id, cursor, userId).
QueryId = Annotated[int, QueryInt(1, MAX_ID, int64=True)]


def _query_bool(value: object) -> bool:
    raw = _single(value).lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise refuse("参数 {name} 必须是 true 或 false")


#: true/1 or false/0, any case.
QueryBool = Annotated[bool, BeforeValidator(_query_bool)]


def _query_time(value: object, info: ValidationInfo) -> datetime:
    return _to_utc(_single(value), _zone(info))


#: An ISO-8601 date or date-time; one without an offset is in the context's zone; UTC once read.
QueryTime = Annotated[datetime, _TIME_SCHEMA, BeforeValidator(_query_time)]


@dataclass(frozen=True)
class Label(GroupedMetadata):
    """A filter text (an actor, an action): printable, at most `max_length` characters."""

    max_length: int

    def __iter__(self) -> Iterator[object]:
        def check(value: object) -> str:
            raw = _single(value)
            if len(raw) > self.max_length or not raw.isprintable():
                raise refuse(f"参数 {{name}} 必须是不超过 {self.max_length} 个可打印字符")
            return raw

        yield Field(max_length=self.max_length)
        yield BeforeValidator(check)


def query_values(args: MultiDict[str, str], names: Iterable[str]) -> dict[str, object]:
    """The query parameters `names` of `args`: a string each, a list when repeated, left
    out when absent or empty."""
    values: dict[str, object] = {}
    for name in names:
        found = args.getlist(name)
        if len(found) > 1:
            values[name] = found
        elif found and found[0] != "":
            values[name] = found[0]
    return values


# -- in responses -----------------------------------------------------------------------


def iso_8601(value: date) -> str:
    """A date, or a date-time with its offset, in ISO-8601.

    Every time carries its offset (timestamptz columns and the Redis clock give aware
    ones); a naive one can only be UTC here, and must not reach a client in China as if
    it were local time.
    """
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.isoformat()


#: A time in a response: ISO-8601 with its offset (+00:00 for UTC, as Python writes it).
Time = Annotated[datetime, PlainSerializer(iso_8601, return_type=str), _TIME_SCHEMA]
#: A record status, 1..5, with its meaning.
Status = Annotated[
    int,
    Field(
        ge=MIN_STATUS,
        le=MAX_STATUS,
        description="; ".join(f"{int(s)} {text}" for s, text in STATUS_TEXT.items()),
    ),
]
#: The JSON schemas of an id and a status, as the document states them.
ID: dict[str, Any] = TypeAdapter(Id).json_schema()
STATUS: dict[str, Any] = TypeAdapter(Status).json_schema()
