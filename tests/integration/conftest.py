"""Fixtures of the web tier's integration tests (tests/integration/test_web_*.py).

`app` is the real app on the test PostgreSQL and Redis with the real producer
(`RedisReportQueue`), so a submitted or regenerated record lands in `report:queue`.
`records` inserts rows directly (fast set-up for the property tests) and reads them back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from tests.support.records import clear_event_log
from tests.support.urls import CLOSED_REDIS_URL
from tests.support.web_app import ADMIN_TOKEN, Records
from web import create_app, issue_user_token


@pytest.fixture
def app(settings: Settings, session_factory: sessionmaker[Session], redis_client: redis.Redis) -> Flask:
    # session_factory and redis_client: clean tables and Redis keys around each test.
    assert ADMIN_TOKEN in settings.admin_tokens
    return create_app(settings, redis_client=redis_client)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def user_headers(settings: Settings) -> Callable[[int], dict[str, str]]:
    def headers(user_id: int) -> dict[str, str]:
        return {"Authorization": f"Bearer {issue_user_token(settings.secret_key, user_id)}"}

    return headers


@pytest.fixture
def redis_down_app(settings: Settings, session_factory: sessionmaker[Session]) -> Flask:
    """The app with a working database and an unreachable Redis."""
    return create_app(settings.with_overrides(redis_url=CLOSED_REDIS_URL))


@pytest.fixture
def records(engine: Engine, session_factory: sessionmaker[Session]) -> Records:
    return Records(engine)


@pytest.fixture
def event_log(engine: Engine) -> Iterator[Engine]:
    """An empty event_log table before and after the test (records do not cascade to it)."""
    clear_event_log(engine)
    yield engine
    clear_event_log(engine)
