"""Input validation for every endpoint: the body and query-string readers the views use.

Each helper either returns a value of the promised type and range or raises
`ParamError` (1001, HTTP 400) naming the parameter, so a bad request changes nothing.
Rules shared by all endpoints:

* ids are JSON integers in 1..2^63-1 (PostgreSQL bigint, .NET long); booleans, floats
  and numeric strings are rejected, never coerced;
* id lists hold at most `MAX_BATCH_IDS` ids and no duplicates (a duplicate would make
  `successCount + skippedCount` ambiguous);
* bodies are JSON objects sent as ``application/json`` (else 415); unknown fields are
  ignored; size is capped by MAX_CONTENT_LENGTH (413, set by the app factory);
* a query parameter appears at most once.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, tzinfo
from typing import Any

from flask import Request
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import RequestEntityTooLarge, UnsupportedMediaType

from services.domain.errors import ParamError
from services.domain.limits import MAX_ID, is_strict_int
from services.domain.questionnaire import MAX_VALUE, MIN_VALUE
from services.usecases.admin import MAX_PAGE_SIZE

#: Largest question id: the questions.id column is an int4.
MAX_QUESTION_ID = 2**31 - 1
#: Most ids in one batch request.
MAX_BATCH_IDS = 1_000
#: Longest handle of a dead letter or quarantined payload accepted in a body.
MAX_HANDLE_LENGTH = 64
#: Most answers in one submission (far above any questionnaire, far below the body cap).
MAX_ANSWERS = 1_000
#: Body size cap, in bytes (Flask's MAX_CONTENT_LENGTH).
MAX_CONTENT_LENGTH = 64 * 1024
#: Paging bounds (MAX_PAGE_SIZE is the services'); (page - 1) * page_size stays far within a bigint OFFSET.
MAX_PAGE = 2**31 - 1
DEFAULT_PAGE_SIZE = 20

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


# -- bodies -----------------------------------------------------------------------------


def json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object (415 for another content type, 1001 if malformed)."""
    if not request.is_json:
        raise UnsupportedMediaType()
    raw = request.get_data(cache=True)  # raises 413 when Content-Length is beyond MAX_CONTENT_LENGTH
    if request.content_length is None and len(raw) >= MAX_CONTENT_LENGTH and _more_body(request):
        # A chunked body has no Content-Length: Werkzeug stops reading at the cap and
        # hands over the truncated part without a word (it would fail as bad JSON, 400).
        raise RequestEntityTooLarge()
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: "[[[[...", deeper than the stack
        raise ParamError("请求体不是合法的 JSON") from None
    if not isinstance(data, dict):
        raise ParamError("请求体必须是 JSON 对象")
    return data


def _more_body(request: Request) -> bool:
    """Whether the server's input stream holds a byte beyond what was read."""
    stream = request.environ.get("wsgi.input")
    return stream is not None and bool(stream.read(1))


def int_in_range(value: object, name: str, minimum: int, maximum: int) -> int:
    if not is_strict_int(value):
        raise ParamError(f"参数 {name} 必须是整数")
    if not minimum <= value <= maximum:
        raise ParamError(f"参数 {name} 必须在 {minimum} 到 {maximum} 之间")
    return value


def an_id(value: object, name: str) -> int:
    return int_in_range(value, name, 1, MAX_ID)


def required(body: dict[str, Any], name: str) -> Any:
    value = body.get(name)
    if value is None:
        raise ParamError(f"缺少参数 {name}")
    return value


def body_id(body: dict[str, Any], name: str) -> int:
    return an_id(required(body, name), name)


def body_id_list(
    body: dict[str, Any], name: str, *, empty_message: str, max_items: int = MAX_BATCH_IDS
) -> list[int]:
    """A non-empty list of distinct ids; a missing or null list counts as empty."""
    value = body.get(name)
    if value is None:
        value = []
    if not isinstance(value, list):
        raise ParamError(f"参数 {name} 必须是整数数组")
    if not value:
        raise ParamError(empty_message)
    if len(value) > max_items:
        raise ParamError(f"参数 {name} 最多包含 {max_items} 个 ID")
    ids = [an_id(item, f"{name}[{i}]") for i, item in enumerate(value)]
    if len(set(ids)) != len(ids):
        raise ParamError(f"参数 {name} 不能包含重复的 ID")
    return ids


def body_handle_list(body: dict[str, Any], name: str, *, max_items: int = MAX_BATCH_IDS) -> list[str]:
    """A non-empty list of distinct handles (short non-empty strings, e.g. dead letters' ids)."""
    value = body.get(name)
    if not isinstance(value, list) or not value:
        raise ParamError(f"{name} 必须是非空的字符串列表")
    if len(value) > max_items:
        raise ParamError(f"{name} 最多 {max_items} 项")
    if any(not isinstance(v, str) or not _HANDLE.fullmatch(v) for v in value):
        raise ParamError(f"{name} 的每一项必须是 1 到 {MAX_HANDLE_LENGTH} 个字母、数字、点、下划线或连字符")
    if len(set(value)) != len(value):
        raise ParamError(f"{name} 不能有重复项")
    return list(value)


def answer_list(
    body: dict[str, Any], name: str = "answers", *, allow_empty: bool = False
) -> list[tuple[int, int]]:
    """``[{"questionId": q, "value": v}, ...]`` as (question id, value) pairs, distinct questions.

    With `allow_empty` (a submission completed by autosaved answers) a missing, null or
    empty list is an empty list; the service then decides whether that is enough.
    """
    if allow_empty and body.get(name) is None:
        return []
    value = required(body, name)
    if not isinstance(value, list):
        raise ParamError(f"参数 {name} 必须是数组")
    if not value and not allow_empty:
        raise ParamError(f"参数 {name} 不能为空")
    if len(value) > MAX_ANSWERS:
        raise ParamError(f"参数 {name} 最多包含 {MAX_ANSWERS} 项")
    pairs: list[tuple[int, int]] = []
    for i, item in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(item, dict):
            raise ParamError(f"参数 {where} 必须是对象")
        question_id = int_in_range(item.get("questionId"), f"{where}.questionId", 1, MAX_QUESTION_ID)
        answer = int_in_range(item.get("value"), f"{where}.value", MIN_VALUE, MAX_VALUE)
        pairs.append((question_id, answer))
    if len({q for q, _ in pairs}) != len(pairs):
        raise ParamError(f"参数 {name} 中同一题目只能作答一次")
    return pairs


# -- query strings ----------------------------------------------------------------------


def _single(args: MultiDict[str, str], name: str) -> str | None:
    values = args.getlist(name)
    if len(values) > 1:
        raise ParamError(f"参数 {name} 只能出现一次")
    if not values or values[0] == "":
        return None
    return values[0]


def _parse_int(raw: str, name: str) -> int:
    if not _INTEGER.fullmatch(raw):
        raise ParamError(f"参数 {name} 必须是整数")
    return int(raw)


def optional_query_text(args: MultiDict[str, str], name: str) -> str | None:
    """A query parameter given at most once; None when absent or empty."""
    return _single(args, name)


def query_id(args: MultiDict[str, str], name: str) -> int:
    raw = _single(args, name)
    if raw is None:
        raise ParamError(f"缺少参数 {name}")
    return an_id(_parse_int(raw, name), name)


def optional_query_int(args: MultiDict[str, str], name: str, minimum: int, maximum: int) -> int | None:
    raw = _single(args, name)
    if raw is None:
        return None
    return int_in_range(_parse_int(raw, name), name, minimum, maximum)


def query_int(args: MultiDict[str, str], name: str, default: int, minimum: int, maximum: int) -> int:
    value = optional_query_int(args, name, minimum, maximum)
    return default if value is None else value


def query_bool(args: MultiDict[str, str], name: str, default: bool = False) -> bool:
    raw = _single(args, name)
    if raw is None:
        return default
    if raw.lower() in _TRUE:
        return True
    if raw.lower() in _FALSE:
        return False
    raise ParamError(f"参数 {name} 必须是 true 或 false")


def query_datetime(args: MultiDict[str, str], name: str, zone: tzinfo = UTC) -> datetime | None:
    """An ISO-8601 date or date-time, in UTC; one without an offset is read in `zone`
    (the admin API passes ADMIN_TIMEZONE)."""
    raw = _single(args, name)
    return None if raw is None else _datetime(raw, name, zone)


def body_datetime(body: dict[str, Any], name: str, zone: tzinfo = UTC) -> datetime | None:
    """An optional ISO-8601 string field of a body, read as `query_datetime` reads a parameter."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ParamError(f"参数 {name} 必须是 ISO-8601 时间字符串")
    return _datetime(value, name, zone)


def _datetime(raw: str, name: str, zone: tzinfo) -> datetime:
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
        raise ParamError(f"参数 {name} 必须是 ISO-8601 时间，例如 2025-01-15T10:30:00+08:00") from None


def page_params(args: MultiDict[str, str]) -> tuple[int, int]:
    page = query_int(args, "page", 1, 1, MAX_PAGE)
    page_size = query_int(args, "pageSize", DEFAULT_PAGE_SIZE, 1, MAX_PAGE_SIZE)
    return page, page_size
