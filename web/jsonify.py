"""Turning service views into JSON: camelCase keys, ISO-8601 datetimes.

The services return frozen dataclasses with snake_case fields; the mini-program and the
admin front end speak the original .NET API's camelCase (`recordId`, `statusText`,
`successCount`, ...). Converting generically keeps the JSON in step with the views; the
OpenAPI document is checked against the same rule (tests/unit/test_web_openapi.py).
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from datetime import date, datetime
from enum import Enum
from typing import Any

from flask.json.provider import DefaultJSONProvider


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def to_json(value: object) -> Any:
    """A JSON-ready copy of `value` (dataclasses, lists, dicts, datetimes, scalars)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {camel_case(f.name): to_json(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return to_json(value.value)
    # datetime is a date: test it first so the time of day is kept.
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {str(key): to_json(item) for key, item in value.items()}
    return value


class JSONProvider(DefaultJSONProvider):
    """Chinese texts readable as they are; keys in the order the views define them."""

    ensure_ascii = False
    sort_keys = False
