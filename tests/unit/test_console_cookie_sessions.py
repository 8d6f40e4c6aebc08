"""The console's session cookie is opened only under its path (/admin): elsewhere Flask's null
session, never saved, so an API call neither reads nor writes a session cookie."""

from __future__ import annotations

import pytest
from flask import request
from flask.sessions import NullSession

from tests.support.web_unit import make_app
from web.console import ConsoleCookieSessions

APP = make_app()


@pytest.mark.parametrize(
    ("path", "opened"),
    [
        ("/admin", True),
        ("/admin/", True),
        ("/admin/records", True),
        ("/administrator", False),
        ("/api/assessment/createRecord", False),
        ("/api/admin/records", False),
        ("/healthz", False),
        ("/", False),
    ],
)
def test_a_session_is_opened_under_the_console_path_only(path: str, opened: bool) -> None:
    assert isinstance(APP.session_interface, ConsoleCookieSessions)
    with APP.test_request_context(path):
        session = APP.session_interface.open_session(APP, request)
    assert session is not None
    assert isinstance(session, NullSession) is not opened


def test_an_api_call_with_a_console_cookie_sets_no_cookie() -> None:
    client = APP.test_client()
    client.set_cookie("mi_admin_session", "anything", path="/")
    response = client.post("/api/assessment/createRecord", json={})  # no token: 401 before any I/O
    assert response.status_code == 401
    assert "Set-Cookie" not in response.headers
