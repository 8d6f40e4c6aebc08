"""Any JSON string in any body, lone surrogates included, gets a 4xx envelope, never a 500.

Every operation of the OpenAPI document that takes a JSON body is sent bodies made from its
schema, with the string ``"\\ud800"`` (valid JSON text, not encodable as UTF-8) in each place
a value can be: the whole body, each property, each item of a list, each property of a
list's objects, and a key. The app runs on the real PostgreSQL and Redis, with the
credential each operation asks for.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from web.spec import document

LONE = "\ud800"
OWNER = 1001


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = spec
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, []):
            resolved = _resolve(spec, option)
            if resolved.get("type") in {"object", "array"}:
                return resolved
    return schema


def _placements(spec: dict[str, Any], schema: dict[str, Any]) -> Iterator[tuple[Any, bool]]:
    """Values of `schema`'s shape with the lone surrogate in each place in turn, and whether
    the place is read (a key no model names is ignored, as every unknown field is)."""
    schema = _resolve(spec, schema)
    yield LONE, True
    if schema.get("type") == "array":
        for inner, read in _placements(spec, schema.get("items", {})):
            yield [inner], read
        yield [1, LONE], True
    if schema.get("type") == "object" or "properties" in schema:
        for name, prop in schema.get("properties", {}).items():
            for inner, read in _placements(spec, prop):
                yield {name: inner}, read
        yield {LONE: 1}, False


def body_operations(app: Flask) -> list[tuple[str, str, str | None, dict[str, Any]]]:
    """(method, path, security scheme, body schema) of every operation that reads a JSON body."""
    spec = document(app)
    found = []
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            body = operation.get("requestBody")
            if body is None:
                continue
            schema = body["content"]["application/json"]["schema"]
            schemes = [name for requirement in operation.get("security", []) for name in requirement]
            found.append((method.upper(), path, schemes[0] if schemes else None, _resolve(spec, schema)))
    return found


def test_every_body_endpoint_is_covered(app: Flask) -> None:
    """The document lists the endpoints that take a body (the finding counted 14)."""
    operations = body_operations(app)
    assert len(operations) >= 14
    assert all("{" not in path for _, path, _, _ in operations)


def test_a_lone_surrogate_anywhere_in_any_body_is_a_4xx_envelope(
    app: Flask,
    client: FlaskClient,
    admin_headers: dict[str, str],
    user_headers: Callable[[int], dict[str, str]],
    make_record: Callable[..., int],
) -> None:
    make_record(user_id=OWNER)
    credentials = {"userToken": user_headers(OWNER), "adminToken": admin_headers}
    spec = document(app)
    failures = []
    tried = 0
    for method, path, scheme, schema in body_operations(app):
        headers = {**credentials.get(scheme or "", {}), "Content-Type": "application/json"}
        for body, read in _placements(spec, schema):
            raw = json.dumps(body)  # ensure_ascii: the surrogate travels as the escape \ud800
            assert "\\ud800" in raw
            answer = client.open(path, method=method, data=raw, headers=headers)
            tried += 1
            envelope = answer.get_json(silent=True)
            if not (
                (400 <= answer.status_code < 500 if read else answer.status_code < 500)
                and isinstance(envelope, dict)
                and ((envelope.get("code") not in (0, None) and envelope.get("data") is None) or not read)
            ):
                failures.append((method, path, raw, answer.status_code, answer.data[:120]))
    assert tried > 50
    assert failures == []


@pytest.mark.parametrize("path", ["/api/assessment/submitAnswers", "/api/assessment/saveAnswers"])
def test_the_findings_request_is_refused_as_bad_input(
    client: FlaskClient, user_headers: Callable[[int], dict[str, str]], path: str
) -> None:
    answer = client.post(
        path,
        data='{"recordId":"\\ud800"}',
        headers={**user_headers(OWNER), "Content-Type": "application/json"},
    )
    assert answer.status_code == 400
    assert answer.get_json()["code"] == 1001
