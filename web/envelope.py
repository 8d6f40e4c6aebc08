"""The response envelope of every endpoint: ``{"code": int, "message": str, "data": ...}``.

Code 0 and message "success" mean success (the original .NET API's convention); any
other code is an error, with the HTTP status chosen by web/errors.py. The API's successes
are written by their operation's model (web/spec.py); `envelope` writes the rest (errors,
a probe's 503), whose data are plain JSON values.
"""

from __future__ import annotations

from collections.abc import Mapping

from flask import Response, jsonify
from flask.json.provider import DefaultJSONProvider

SUCCESS_CODE = 0
SUCCESS_MESSAGE = "success"


class JSONProvider(DefaultJSONProvider):
    """Chinese texts readable as they are; keys in the order they were written."""

    ensure_ascii = False
    sort_keys = False


def envelope(
    code: int,
    message: str,
    data: object = None,
    *,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
) -> Response:
    response = jsonify({"code": code, "message": message, "data": data})
    response.status_code = status
    if headers:
        response.headers.update(headers)
    return response


def ok(data: object = None) -> Response:
    """A success whose data are plain JSON values (the home page's links, a probe's checks)."""
    return envelope(SUCCESS_CODE, SUCCESS_MESSAGE, data)
