"""Signing in to the admin console and reading its forms' CSRF token (Flask's test client)."""

from __future__ import annotations

import re

from flask.testing import FlaskClient

from web.deps import EXTENSION_KEY, Dependencies

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_token(client: FlaskClient, path: str = "/admin/login") -> str:
    html = client.get(path).get_data(as_text=True)
    match = CSRF.search(html)
    assert match, html[:500]
    return match.group(1)


def sign_in(client: FlaskClient, token: str | None = None, name: str = "张三") -> int:
    """Sign in with `token`, by default the app's first admin token; the response's status."""
    if token is None:
        token = app_admin_token(client)
    data = {"token": token, "name": name, "csrf_token": csrf_token(client, "/admin/login")}
    return client.post("/admin/login", data=data).status_code


def app_admin_token(client: FlaskClient) -> str:
    """The first of the admin tokens the app under test was built with."""
    dependencies = client.application.extensions[EXTENSION_KEY]
    assert isinstance(dependencies, Dependencies)
    return dependencies.settings.admin_tokens[0]
