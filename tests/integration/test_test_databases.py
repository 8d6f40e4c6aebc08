"""scripts/servers.ensure_database: runs that start at the same moment create a database once.

The bug this guards against: on a new machine, `make test`'s two shards both found no
`mi_assessment_test` and both ran CREATE DATABASE; the loser died at start with
UniqueViolation on pg_database's index and `make test` failed.
"""

from __future__ import annotations

import secrets
import threading

import psycopg
import pytest

from config.settings import Settings
from scripts import servers


def _admin_url(settings: Settings) -> str:
    return settings.database_url.replace("+psycopg", "").rsplit("/", 1)[0] + "/postgres"


@pytest.mark.timeout(300)
def test_concurrent_runs_create_a_missing_database_once_and_all_succeed(settings: Settings) -> None:
    admin = _admin_url(settings)
    name = f"mi_race_{secrets.token_hex(4)}"
    errors: list[BaseException] = []
    start = threading.Barrier(6, timeout=60)

    def create() -> None:
        try:
            start.wait()
            servers.ensure_database(admin, name)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=create, daemon=True) for _ in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(thread.is_alive() for thread in threads), "a creation never returned"
        assert errors == []
        with psycopg.connect(admin, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,)).fetchone()
        assert row == (1,)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
