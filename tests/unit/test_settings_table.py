"""One settings object documents every variable, and README's table is generated from it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from config.settings import Settings
from config.variables import VARIABLES, configuration_table, undocumented_fields
from scripts.settings_table import README, current_table
from tests.support.packages import APPLICATION_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
#: The packages that must read no variable themselves (config/settings.py reads them all).
PACKAGES = tuple(p for p in APPLICATION_PACKAGES if p != "config")


def test_the_readme_table_is_the_generated_one() -> None:
    assert current_table(README.read_text(encoding="utf-8")) == configuration_table()


def test_every_field_of_the_settings_is_documented() -> None:
    assert undocumented_fields() == []
    assert {v.field for v in VARIABLES if v.field} <= {f for f in Settings.__dataclass_fields__}


def test_no_package_reads_the_environment_itself() -> None:
    found = subprocess.run(
        ["git", "grep", "-nE", r"os\.environ|getenv\(", "--", *(f"{p}/*.py" for p in PACKAGES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    code = [line for line in found if not re.match(r"^[^:]+:\d+:\s*#", line)]
    assert code == [], "read it in config/settings.py:\n" + "\n".join(code)
