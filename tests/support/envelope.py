"""The API's JSON envelope ({code, message, data}) read in tests, from Flask's test client."""

from __future__ import annotations

from typing import Any


def data(response: Any, status: int = 200) -> Any:
    """The data of a success: HTTP 200 (202 for a call that only queues work), code 0, message "success"."""
    body = response.json
    assert response.status_code == status, body
    assert (body["code"], body["message"]) == (0, "success"), body
    return body["data"]


def error(response: Any, status: int, code: int) -> str:
    """The message of an error with this HTTP status and code (and no data)."""
    body = response.json
    assert (response.status_code, body["code"], body["data"]) == (status, code, None), body
    return str(body["message"])


def json_body(response: Any) -> Any:
    """The whole JSON envelope, whatever the status; fails the test when the body is not JSON."""
    body = response.json
    assert body is not None, response.data
    return body
