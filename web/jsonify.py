"""Turning service views into JSON: camelCase keys, ISO-8601 datetimes with their offset.

The services return frozen dataclasses with snake_case fields; the mini-program and the
admin front end speak the original .NET API's camelCase (`recordId`, `statusText`,
`successCount`, ...). Converting generically keeps the JSON in step with the views; the
OpenAPI document is checked against the same rule (tests/unit/test_web_openapi.py).
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from datetime import UTC, date, datetime
from enum import Enum
from typing import Any

from flask.json.provider import DefaultJSONProvider


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def iso_8601(value: date) -> str:
    """A date, or a date-time with its offset, in ISO-8601.

    Every time carries its offset (timestamptz columns and the Redis clock give aware
    ones); a naive one can only be UTC here, and must not reach a client in China as if
    it were local time.
    """
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.isoformat()


def to_json(value: object) -> Any:
    """A JSON-ready copy of `value` (dataclasses, lists, dicts, datetimes, scalars)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {camel_case(f.name): to_json(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return to_json(value.value)
    if isinstance(value, date):
        return iso_8601(value)
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {str(key): to_json(item) for key, item in value.items()}
    return value


class JSONProvider(DefaultJSONProvider):
    """Chinese texts readable as they are; keys in the order the views define them."""

    ensure_ascii = False
    sort_keys = False
