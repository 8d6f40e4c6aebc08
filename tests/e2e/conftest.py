"""Fixtures of the end-to-end tests: a Redis client and the stack, each once per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from sqlalchemy import Engine

from config.settings import Settings
from tests.support.stack import Stack, StackOptions, running_stack


@pytest.fixture(scope="module")
def redis_conn(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the test db index for the whole module (the stack is per module)."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture(scope="module")
def stack_options() -> StackOptions:
    """How this module's stack differs from the default one: a module overrides this fixture."""
    return StackOptions()


@pytest.fixture(scope="module")
def stack(
    stack_options: StackOptions,
    settings: Settings,
    engine: Engine,
    redis_url: str,
    redis_conn: redis.Redis,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    """`make run` (the Procfile's processes under supervisord) on the test servers, started once
    for the module with `stack_options`, on empty records, event log and Redis db index."""
    logs = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    with running_stack(settings, engine, redis_url, redis_conn, logs, stack_options) as started:
        yield started
