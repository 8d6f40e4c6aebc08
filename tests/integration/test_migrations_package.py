"""The migrations ship in the wheel, and its console command builds the schema of an empty
database, waiting for one that does not answer yet.

The wheel is built from a copy of the package's sources (the checkout stays clean) and
installed into a folder of its own; the command then runs from there, in another
working directory, with no alembic.ini anywhere near: what a deploy from PyPI does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from config.settings import Settings
from scripts.faults import FaultProxy
from tests.support.packages import APPLICATION_PACKAGES
from tests.support.processes import wait_until
from tests.support.urls import CLOSED_DATABASE_URL

ROOT = Path(__file__).resolve().parents[2]
#: What setup.cfg needs to build the wheel.
SOURCES = ("setup.cfg", "pyproject.toml", "README.md", *APPLICATION_PACKAGES)
#: The schema of an empty database is built in a schema of its own, so the session's
#: test schema (public) is left as the other tests expect it.
SCHEMA = "mi_migrate_check"

pytestmark = pytest.mark.slow  # builds a wheel (pip, setuptools)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(source)],
        check=True,
        timeout=240,
    )
    (built,) = out.glob("mi_assessment-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target), str(wheel)],
        check=True,
        timeout=120,
    )
    return target


def test_the_wheel_holds_the_migrations_and_the_command(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    expected = {
        "services/persistence/migrate.py",
        "services/persistence/migrations/__init__.py",
        "services/persistence/migrations/env.py",
        "services/persistence/migrations/script.py.mako",
    }
    assert expected <= names
    revisions = sorted(
        p.name for p in (ROOT / "services" / "persistence" / "migrations" / "versions").glob("*.py")
    )
    assert revisions, "no revisions in the checkout"
    assert {f"services/persistence/migrations/versions/{name}" for name in revisions} <= names
    assert "mi-assessment-migrate = services.persistence.migrate:main" in scripts


@pytest.fixture
def empty_schema(engine: Engine) -> Iterator[str]:
    """An empty schema of the test database, dropped afterwards; yields a URL whose search_path is it."""
    with engine.begin() as conn:
        conn.execute(text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        conn.execute(text(f"CREATE SCHEMA {SCHEMA}"))
    url = engine.url.set(query={**engine.url.query, "options": f"-csearch_path={SCHEMA}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))


def test_the_installed_command_upgrades_an_empty_database(
    installed: Path, empty_schema: str, engine: Engine, settings: Settings, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(installed), "DATABASE_URL": empty_schema}
    where = subprocess.run(
        [sys.executable, "-c", "import services.persistence.migrate as m; print(m.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(installed), "not the installed copy"

    done = subprocess.run(
        [sys.executable, str(installed / "bin" / "mi-assessment-migrate")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Running upgrade" in done.stderr

    # The newest file's `revision = "..."` (ids are "0003", "0004_ops_audit", ...; files sort by number).
    newest = sorted((ROOT / "services" / "persistence" / "migrations" / "versions").glob("*.py"))[
        -1
    ].read_text()
    heads = re.findall(r'^revision = "([^"]+)"$', newest, flags=re.MULTILINE)
    with engine.connect() as conn:
        tables = set(
            conn.scalars(text("SELECT tablename FROM pg_tables WHERE schemaname = :s"), {"s": SCHEMA})
        )
        version = conn.scalar(text(f"SELECT version_num FROM {SCHEMA}.alembic_version"))
    assert {"assessment_records", "answers", "questions", "dimensions", "event_log"} <= tables
    assert version == heads[-1]

    again = subprocess.run(
        [sys.executable, "-m", "services.persistence.migrate"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        check=False,
    )
    assert again.returncode == 0, again.stderr  # at head already: a no-op


def test_a_malformed_database_url_is_a_configuration_error(installed: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(installed), "DATABASE_URL": "mysql://nowhere/db"}
    done = subprocess.run(
        [sys.executable, "-m", "services.persistence.migrate"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "DATABASE_URL" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_wheel_holds_the_console_pages(wheel: Path) -> None:
    """The admin console's templates and style sheet are package data (web/console/)."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    pages = {
        f"web/console/templates/console/{p.name}"
        for p in (ROOT / "web/console/templates/console").glob("*.html")
    }
    assert "web/console/templates/console/base.html" in pages
    assert pages | {"web/console/static/console.css", "web/console/__init__.py"} <= names


def test_the_release_step_waits_for_a_database_that_answers_late(
    empty_schema: str, engine: Engine, tmp_path: Path
) -> None:
    """PostgreSQL not answering yet when the release step starts (a boot, a restart): it waits
    and migrates once it answers. Found by the soak: `make run` started again while
    PostgreSQL restarted failed its release step and started nothing."""
    proxy = FaultProxy(empty_schema)
    proxy.down()
    log = tmp_path / "migrate.log"
    try:
        with log.open("wb") as out:
            migrate = subprocess.Popen(
                [sys.executable, "-m", "services.persistence.migrate", "--wait", "120"],
                cwd=ROOT,
                env={**os.environ, "DATABASE_URL": proxy.url},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            wait_until(lambda: "cannot be reached" in log.read_text(), timeout=60, what="the step waiting")
            assert migrate.poll() is None
            proxy.up()
            assert migrate.wait(timeout=120) == 0, log.read_text()
    finally:
        proxy.close()
    output = log.read_text()
    assert "Running upgrade" in output
    assert "the database answered after" in output
    with engine.connect() as conn:
        assert conn.scalar(text(f"SELECT count(*) FROM {SCHEMA}.alembic_version")) == 1


def test_the_release_step_gives_up_on_a_database_that_never_answers() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "services.persistence.migrate", "--wait", "1"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": CLOSED_DATABASE_URL},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert "the database could not be reached in 1 s" in done.stderr
    assert "Traceback" not in done.stderr
