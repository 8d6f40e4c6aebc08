"""web/spec.py: the generated document describes exactly the app's endpoints, each with its
security and its errors, and is a valid OpenAPI 3.1 document."""

from __future__ import annotations

import re
from typing import Any

import openapi_spec_validator
import pytest

from tests.support.web_unit import make_app, routes
from web.spec import document

APP = make_app()
DOC = document(APP)

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def operations() -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, op)
        for path, item in DOC["paths"].items()
        for method, op in item.items()
        if method in HTTP_METHODS
    ]


def openapi_path(rule: str) -> str:
    """A Flask rule as an OpenAPI path template: /reports/<int:record_id> → /reports/{record_id}."""
    return re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", r"{\1}", rule)


def test_document_lists_exactly_the_url_map() -> None:
    documented = sorted((path, method.upper()) for path, method, _ in operations())
    # The admin console's HTML pages (/admin/, web/console/) are not part of the JSON API.
    api_routes = [
        route
        for route in sorted((openapi_path(rule), method) for rule, method in routes(APP))
        if not route[0].startswith("/admin")
    ]
    assert documented == api_routes


def test_served_document_is_the_document() -> None:
    response = APP.test_client().get("/openapi.json")
    assert response.status_code == 200
    assert response.json == DOC
    assert DOC["openapi"] == "3.1.0"


def refs(node: object) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in refs(value)]
    return []


def test_every_reference_resolves() -> None:
    for ref in refs(DOC):
        assert ref.startswith("#/")
        node: Any = DOC
        for part in ref[2:].split("/"):
            node = node[part]


@pytest.mark.parametrize(("path", "method", "op"), operations(), ids=[f"{m} {p}" for p, m, _ in operations()])
def test_operations_state_security_and_errors(path: str, method: str, op: dict[str, Any]) -> None:
    assert op["summary"]
    # 202 for a call that only queues work (regenerateMatching), 200 for every other.
    assert len({"200", "202"} & set(op["responses"])) == 1
    if path.startswith("/api/admin/") or path == "/metrics":
        assert op["security"] == [{"adminToken": []}]
    elif path.startswith("/api/assessment/"):
        assert op["security"] == [{"userToken": []}]
    else:
        assert "security" not in op
    if path.startswith("/api/"):
        assert {"401", "403"} <= set(op["responses"])
    if "requestBody" in op:
        assert {"400", "413", "415"} <= set(op["responses"])
    if path.startswith("/api/"):
        # Every call reads the database: 503 (with Retry-After) when it is unreachable.
        assert op["responses"]["503"] == {"$ref": "#/components/responses/ServiceUnavailable"}
    for parameter in op.get("parameters", []):
        if parameter["in"] == "path":
            # Flask's converter refuses a malformed path parameter: 404, not 400.
            assert f"{{{parameter['name']}}}" in path
            assert "404" in op["responses"]
            continue
        assert parameter["in"] == "query"
        if parameter["required"] or path.startswith("/api/"):
            assert "400" in op["responses"]


def test_document_is_valid_openapi_31() -> None:
    openapi_spec_validator.validate(DOC)


def test_every_503_says_when_to_retry() -> None:
    from web.errors import RETRY_AFTER_S

    unavailable = DOC["components"]["responses"]["ServiceUnavailable"]
    assert "Retry-After" in unavailable["headers"]
    assert str(RETRY_AFTER_S) in unavailable["headers"]["Retry-After"]["description"]
    assert "Retry-After" in DOC["paths"]["/readyz"]["get"]["responses"]["503"]["headers"]
