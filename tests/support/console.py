"""Signing in to the admin console and reading its forms' CSRF token (Flask's test client)."""

from __future__ import annotations

import re

from flask.testing import FlaskClient

from tests.support.web_app import ADMIN_TOKEN

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_token(client: FlaskClient, path: str) -> str:
    match = CSRF.search(client.get(path).get_data(as_text=True))
    assert match
    return match.group(1)


def sign_in(client: FlaskClient, token: str = ADMIN_TOKEN, name: str = "张三") -> int:
    data = {"token": token, "name": name, "csrf_token": csrf_token(client, "/admin/login")}
    return client.post("/admin/login", data=data).status_code
