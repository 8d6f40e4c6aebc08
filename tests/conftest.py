"""Shared fixtures: the real PostgreSQL and Redis of the integration tests.

The servers come from TEST_DATABASE_URL / TEST_REDIS_URL (`make test` sets them, see
scripts/with_test_services.py). Without them the local defaults are tried; when a
server is unreachable the integration tests are skipped locally and fail under
`make test` (MI_REQUIRE_SERVICES=1), like Dramatiq's own broker tests.

The Redis db index must be empty or marked as ours: tests delete every key in it
before and after each test, so they never run against someone else's data.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from config.settings import Settings
from scripts import lifeline
from services.persistence.db import make_engine, make_session_factory
from services.persistence.uow import UnitOfWork
from tests.support.fakes import FailingQueue, RecordingQueue
from tests.support.records import RecordSpec, clear_records, insert_records
from tests.support.redis_keys import REDIS_OWNER_KEY, clean_redis

TEST_DATABASE_URL = os.environ.get(
    "TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/mi_assessment_test"
)
TEST_REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
REQUIRE_SERVICES = os.environ.get("MI_REQUIRE_SERVICES") == "1"

# Code that reads the environment when it runs (the report actor's unit of work and
# event sink, the processes the tests start) must see the test servers, never a
# developer's own. Nothing reads it at import: importing builds no broker.
os.environ["DATABASE_URL"] = TEST_DATABASE_URL
os.environ["REDIS_URL"] = TEST_REDIS_URL

# Every process a test starts (workers, stacks, servers, CLIs) ends when this pytest ends,
# however it ends, SIGKILL included (an orphaned worker would run on unattended).
lifeline.attach()

ROOT = Path(__file__).resolve().parent.parent

pytest_plugins = ("tests.support.broker_fixtures", "tests.support.browser", "pytester")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "/integration/" in str(item.path) or "/e2e/" in str(item.path):
            item.add_marker(pytest.mark.integration)


def _unavailable(what: str, exc: BaseException) -> None:
    message = f"{what} unavailable: {exc}"
    if REQUIRE_SERVICES:
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings(
        database_url=Settings.from_env({"DATABASE_URL": TEST_DATABASE_URL}).database_url,
        redis_url=TEST_REDIS_URL,
        secret_key="test-secret-key",
        admin_tokens=("test-admin-token",),
    )


def migrate(database_url: str) -> None:
    """Drop our own test schema and build it again from the migrations."""
    from alembic import command
    from alembic.config import Config

    engine = make_engine(database_url, pool_size=1)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.attributes["database_url"] = database_url
    command.upgrade(cfg, "head")


@pytest.fixture(scope="session")
def engine(settings: Settings) -> Iterator[Engine]:
    try:
        probe = make_engine(settings.database_url, pool_size=1)
        with probe.connect() as conn:
            conn.execute(text("SELECT 1"))
        probe.dispose()
    except Exception as exc:  # any driver error means the same: no database
        _unavailable("PostgreSQL", exc)
    migrate(settings.database_url)
    eng = make_engine(settings.database_url, pool_size=10)
    from services.persistence.questionnaire_seed import seed_questionnaire

    with UnitOfWork(make_session_factory(eng)) as uow:
        seed_questionnaire(uow)
    yield eng
    eng.dispose()


@pytest.fixture
def session_factory(engine: Engine) -> Iterator[sessionmaker[Session]]:
    clear_records(engine)
    yield make_session_factory(engine)
    clear_records(engine)


@pytest.fixture
def uow(session_factory: sessionmaker[Session]) -> UnitOfWork:
    return UnitOfWork(session_factory)


@pytest.fixture(scope="session")
def redis_url() -> str:
    try:
        client = redis.Redis.from_url(TEST_REDIS_URL, socket_timeout=2)
        client.ping()
    except redis.RedisError as exc:
        _unavailable("Redis", exc)
    if not client.exists(REDIS_OWNER_KEY):
        if client.dbsize() > 0:
            pytest.fail(
                f"{TEST_REDIS_URL} holds keys that are not ours; set TEST_REDIS_URL to an empty db index",
                pytrace=False,
            )
        client.set(REDIS_OWNER_KEY, "1")
    return TEST_REDIS_URL


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    clean_redis(client)
    yield client
    clean_redis(client)
    client.close()


# -- service-layer helpers (fake report queues, records in a given state) -----------------


@pytest.fixture
def recording_queue() -> RecordingQueue:
    return RecordingQueue()


@pytest.fixture
def failing_queue() -> FailingQueue:
    return FailingQueue()


@pytest.fixture
def make_record(engine: Engine, session_factory: sessionmaker[Session]) -> Callable[..., int]:
    """Insert a record directly (no service rules), as the product leaves it in its status
    (tests/support/records.py), and return its id.

    ``make_record(status=1, user_id=1, answers=None, deleted=False)``: `answers` is the
    {question id: value} sheet instead of the default one (`default_answer` to every active
    question) of a record in status >= 3; ``{}`` plants one whose answers were lost. Given for a
    record in 1 or 2, they are the answers it saved while in progress.
    """
    from sqlalchemy import insert

    from services.persistence.models import Answer

    def make(
        status: int = 1,
        user_id: int = 1,
        *,
        answers: Mapping[int, int] | None = None,
        deleted: bool = False,
    ) -> int:
        lost = answers is not None and not answers
        spec = RecordSpec(status, user_id, deleted=deleted, answers=not lost)
        (record_id,) = insert_records(engine, [spec], answers=answers or None)
        if answers and not spec.has_answers:
            with session_factory() as session:
                session.execute(
                    insert(Answer),
                    [{"record_id": record_id, "question_id": q, "value": v} for q, v in answers.items()],
                )
                session.commit()
        return record_id

    return make
