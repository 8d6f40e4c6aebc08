"""Helpers of the web tier's unit tests: an app that needs no server.

Its database and Redis URLs point at a closed port, so a test that reached either by
mistake would fail loudly rather than touch a shared server. Auth, validation, error
mapping and the OpenAPI document all answer before any I/O.
"""

from __future__ import annotations

from flask import Flask

from config.settings import Settings
from tests.support.urls import CLOSED_DATABASE_URL, CLOSED_REDIS_URL
from web import create_app, issue_user_token

SECRET_KEY = "unit-secret-key"
ADMIN_TOKEN = "unit-admin-token"
UNIT_SETTINGS = Settings(
    database_url=CLOSED_DATABASE_URL,
    redis_url=CLOSED_REDIS_URL,
    secret_key=SECRET_KEY,
    admin_tokens=(ADMIN_TOKEN, "second-admin-token"),
)
#: Methods Flask adds to every rule by itself.
IMPLICIT_METHODS = {"HEAD", "OPTIONS"}


def make_app(**overrides: object) -> Flask:
    return create_app(UNIT_SETTINGS.with_overrides(**overrides) if overrides else UNIT_SETTINGS)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def user_auth(user_id: int = 7, secret_key: str = SECRET_KEY) -> dict[str, str]:
    return bearer(issue_user_token(secret_key, user_id))


ADMIN_AUTH = bearer(ADMIN_TOKEN)


def routes(app: Flask, blueprint: str | None = None) -> list[tuple[str, str]]:
    """(path, method) of every rule of the app (of one blueprint), implicit methods left out."""
    found: list[tuple[str, str]] = []
    for rule in app.url_map.iter_rules():
        if blueprint is not None and not rule.endpoint.startswith(blueprint + "."):
            continue
        found.extend((rule.rule, method) for method in sorted((rule.methods or set()) - IMPLICIT_METHODS))
    return sorted(found)
