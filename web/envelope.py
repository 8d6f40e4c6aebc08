"""The response envelope of every endpoint: ``{"code": int, "message": str, "data": ...}``.

Code 0 and message "success" mean success (the original .NET API's convention); any
other code is an error, with the HTTP status chosen by web/errors.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from flask import Response, jsonify

from web.jsonify import to_json

SUCCESS_CODE = 0
SUCCESS_MESSAGE = "success"


def envelope(
    code: int,
    message: str,
    data: object = None,
    *,
    status: int = 200,
    headers: Mapping[str, str] | None = None,
) -> Response:
    response = jsonify({"code": code, "message": message, "data": to_json(data)})
    response.status_code = status
    if headers:
        response.headers.update(headers)
    return response


def ok(data: object = None) -> Response:
    return envelope(SUCCESS_CODE, SUCCESS_MESSAGE, data)
