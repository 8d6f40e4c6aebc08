"""The migrations run through PgBouncer in transaction-pooling mode, as a deploy whose only
DATABASE_URL points at the pooler would run them: `mi-assessment-migrate` builds the whole
schema of an empty schema there (Alembic runs every revision in one transaction, which
transaction pooling keeps on one server connection), and a second run finds it at head.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from config.settings import Settings
from tests.support.binaries import needs
from tests.support.pgbouncer import PgBouncer, pgbouncer_binary

pytestmark = [pytest.mark.slow, needs(pgbouncer_binary(), "pgbouncer")]

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "mi_migrate_pgbouncer"


@pytest.fixture
def bouncer(settings: Settings, engine: Engine) -> Iterator[PgBouncer]:
    """PgBouncer whose server connections all work in an empty schema of the test database."""
    with engine.begin() as conn:
        conn.execute(text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        conn.execute(text(f"CREATE SCHEMA {SCHEMA}"))
    server = PgBouncer(settings.database_url, connect_query=f"SET search_path TO {SCHEMA}")
    try:
        yield server.start()
    finally:
        server.stop()
        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))


def migrate(url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.persistence.migrate", "--database-url", url, "--wait", "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_migrations_run_through_pgbouncer_in_transaction_mode(bouncer: PgBouncer, engine: Engine) -> None:
    done = migrate(bouncer.url)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Running upgrade" in done.stderr
    with engine.connect() as conn:
        tables = set(
            conn.scalars(text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": SCHEMA})
        )
        version = conn.scalar(text(f"SELECT version_num FROM {SCHEMA}.alembic_version"))
    assert {"assessment_records", "answers", "questions", "dimensions", "event_log"} <= tables
    assert version
    again = migrate(bouncer.url)  # at head: nothing to do, nothing refused
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Running upgrade" not in again.stderr
