"""One settings object documents every variable, and README's table is generated from it."""

from __future__ import annotations

import re

from config.settings import Settings
from config.variables import VARIABLES, configuration_table
from scripts.settings_table import README, current_table
from tests.support.packages import APPLICATION_PACKAGES
from tests.support.source_files import grep, python_files

#: The packages that must read no variable themselves (config/settings.py reads them all).
PACKAGES = tuple(p for p in APPLICATION_PACKAGES if p != "config")


def test_the_readme_table_is_the_generated_one() -> None:
    assert current_table(README.read_text(encoding="utf-8")) == configuration_table()


def test_every_field_of_the_settings_is_documented() -> None:
    documented = {v.field for v in VARIABLES if v.field}
    assert documented == set(Settings.__dataclass_fields__)


def test_no_package_reads_the_environment_itself() -> None:
    files = python_files(*PACKAGES)
    assert files, "no Python files found: the check would pass for nothing"
    found = grep(r"os\.environ|getenv\(", files)
    code = [line for line in found if not re.match(r"^[^:]+:\d+:\s*#", line)]
    assert code == [], "read it in config/settings.py:\n" + "\n".join(code)
