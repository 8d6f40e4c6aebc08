"""services/domain/limits.py and the status bounds: one definition each, used by every layer."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import CheckConstraint, Table

from services.domain.limits import MAX_ID, is_id, is_strict_int
from services.domain.status import MAX_STATUS, MIN_STATUS, RecordStatus
from services.persistence.models import AssessmentRecord
from tests.support.packages import APPLICATION_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
#: Modules every process imports, the wire format among them: no database, no web or worker framework.
PURE_MODULES = [
    "services.domain.limits",
    "services.domain.status",
    "services.domain.events",
    "redis_adapters.report_message",
]
#: Restatements of a limit that must come from services/domain/limits.py instead.
RESTATED = re.compile(r"2\s*\*\*\s*63|9223372036854775807|isinstance\([^)]*,\s*bool\)")


def test_max_id_is_the_largest_bigint() -> None:
    assert MAX_ID == 9_223_372_036_854_775_807


@pytest.mark.parametrize("value", [0, 1, -1, MAX_ID, MAX_ID + 1, 2**100])
def test_ints_are_strict_ints(value: int) -> None:
    assert is_strict_int(value)


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, [1], b"1"])
def test_bools_floats_and_texts_are_not(value: object) -> None:
    assert not is_strict_int(value)
    assert not is_id(value)


@pytest.mark.parametrize(
    ("value", "expected"), [(1, True), (MAX_ID, True), (0, False), (-5, False), (MAX_ID + 1, False)]
)
def test_an_id_is_in_1_to_max_id(value: int, expected: bool) -> None:
    assert is_id(value) is expected


def test_status_bounds_come_from_the_enum() -> None:
    assert (MIN_STATUS, MAX_STATUS) == (1, 5)
    assert [int(s) for s in RecordStatus] == list(range(MIN_STATUS, MAX_STATUS + 1))


def test_the_models_check_constraint_uses_the_bounds() -> None:
    table = AssessmentRecord.__table__
    assert isinstance(table, Table)
    checks = [
        c
        for c in table.constraints
        if isinstance(c, CheckConstraint) and c.name == "ck_assessment_records_status"
    ]
    assert [str(c.sqltext) for c in checks] == ["status BETWEEN 1 AND 5"]


def test_the_api_schema_and_the_wire_format_use_the_same_limits() -> None:
    from redis_adapters.report_message import MAX_RECORD_ID
    from web.fields import ID, STATUS

    assert MAX_RECORD_ID == MAX_ID
    assert ID["maximum"] == MAX_ID
    assert (STATUS["minimum"], STATUS["maximum"]) == (MIN_STATUS, MAX_STATUS)


@pytest.mark.parametrize("module", PURE_MODULES)
def test_the_pure_modules_import_no_database_or_web_framework(module: str) -> None:
    """The limits, statuses and events are imported by the wire format (actors/message.py) and
    by every process; the SQL of the event log is services/persistence/event_store.py's alone."""
    code = (
        "import importlib, sys; "
        # actors/__init__.py imports Dramatiq: an empty package stands in, so only the module counts.
        "sys.modules['actors'] = type(sys)('actors'); sys.modules['actors'].__path__ = ['actors']; "
        f"importlib.import_module({module!r}); "
        "heavy = {'flask', 'werkzeug', 'dramatiq', 'sqlalchemy'} & set(sys.modules); "
        "assert not heavy, sorted(heavy)"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_no_module_restates_a_limit() -> None:
    """The id bound and the strict-int check are written once, in services/domain/limits.py."""
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in (*APPLICATION_PACKAGES, "scripts", "bench")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != ROOT / "services" / "domain" / "limits.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if RESTATED.search(line)
    ]
    assert not found, f"use services.domain.limits instead: {found}"
