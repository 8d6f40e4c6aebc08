"""Schemathesis drives the app from its OpenAPI document: no generated request gets a 5xx.

Positive and negative data for every documented operation, sent with a valid credential
of the right kind, so the requests get past auth into validation and the services, and
the documented success and error bodies are checked against their schemas.
Optional: skipped where schemathesis is not installed (it is not in the `test` extra).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from flask import Flask
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.support.records import RecordSpec
from tests.support.web_app import ADMIN_PATH, Records
from tests.support.web_unit import make_app
from web.spec import document

OWNER = 1
#: Examples per operation; raise it for a deeper hunt (MI_SCHEMATHESIS_EXAMPLES=500).
EXAMPLES = int(os.environ.get("MI_SCHEMATHESIS_EXAMPLES", "25"))
#: Probes that answer 503 by design when what they watch is absent.
PROBES_ANSWERING_503 = frozenset({"/healthz/workers"})

# The document is what GET /openapi.json serves (tests/unit/test_web_spec.py checks it);
# the app under test is the per-test fixture, passed to each call.
schema = schemathesis.openapi.from_dict(document(make_app()))


@pytest.fixture
def live(app: Flask, records: Records) -> Flask:
    # Small ids exist and belong to the caller, so generated ids sometimes hit live records.
    records.insert(*[RecordSpec(status=s, user_id=OWNER, results=s == 4) for s in (1, 2, 3, 4, 5)])
    return app


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_never_answers_5xx(
    case: Any, live: Flask, admin_headers: dict[str, str], user_headers: Callable[[int], dict[str, str]]
) -> None:
    headers = admin_headers if case.path.startswith(ADMIN_PATH) else user_headers(OWNER)
    # A probe's 503 is its documented answer here (no worker or hotpath process runs in this
    # test); its body must still match the document.
    checks = [response_schema_conformance]
    if case.path not in PROBES_ANSWERING_503:
        checks.insert(0, not_a_server_error)
    case.call_and_validate(app=live, headers=headers, checks=checks)
