"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis


@pytest.fixture(scope="module")
def redis_conn(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the test db index for the whole module (the stack fixtures are per module)."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()
