"""DB_POOL_SIZE, DB_MAX_OVERFLOW and DB_TRANSACTION_POOLING: read, checked, given to the engine."""

from __future__ import annotations

import pytest

from config import ConfigError
from config.settings import Settings
from services.persistence.db import make_engine


def test_defaults_keep_one_overflow_per_pooled_connection() -> None:
    settings = Settings.from_env({})
    assert (settings.db_pool_size, settings.db_max_overflow, settings.db_transaction_pooling) == (
        5,
        None,
        False,
    )
    engine = make_engine(settings.database_url, pool_size=settings.db_pool_size)
    assert (engine.pool.size(), engine.pool._max_overflow) == (5, 5)  # type: ignore[attr-defined]


def test_sizes_and_pooling_mode_from_the_environment() -> None:
    settings = Settings.from_env(
        {"DB_POOL_SIZE": "3", "DB_MAX_OVERFLOW": "0", "DB_TRANSACTION_POOLING": "yes"}
    )
    assert (settings.db_pool_size, settings.db_max_overflow, settings.db_transaction_pooling) == (3, 0, True)
    engine = make_engine(settings.database_url, pool_size=3, max_overflow=0)
    assert (engine.pool.size(), engine.pool._max_overflow) == (3, 0)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"DB_MAX_OVERFLOW": "-1"}, "DB_MAX_OVERFLOW must be >= 0"),
        ({"DB_MAX_OVERFLOW": "many"}, "DB_MAX_OVERFLOW must be an integer"),
        ({"DB_TRANSACTION_POOLING": "pgbouncer"}, "DB_TRANSACTION_POOLING must be"),
        ({"DB_POOL_SIZE": "0"}, "DB_POOL_SIZE must be >= 1"),
    ],
)
def test_bad_values_are_refused_at_start_up(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        Settings.from_env(env)
