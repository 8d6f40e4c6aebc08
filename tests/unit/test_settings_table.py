"""One settings object documents every variable, and docs/configuration.md is generated from it."""

from __future__ import annotations

import re

from config.settings import HOTPATH_RUNTIME_FIELDS, SETTINGS_FIELDS, Settings, documented
from scripts.settings_table import PAGE, page
from tests.support.packages import APPLICATION_PACKAGES
from tests.support.source_files import grep, python_files

#: The packages that must read no variable themselves (config/settings.py reads them all).
PACKAGES = tuple(p for p in APPLICATION_PACKAGES if p != "config")


def test_the_configuration_page_is_the_generated_one() -> None:
    assert PAGE.read_text(encoding="utf-8") == page(), "rewrite it: python -m scripts.settings_table"


def test_every_field_of_the_settings_is_documented() -> None:
    undocumented = [name for name in SETTINGS_FIELDS if not documented(name)]
    assert undocumented == [], "declare each with setting(default, Variable(...))"
    assert set(SETTINGS_FIELDS) == set(Settings.__dataclass_fields__)


def test_each_documented_variable_is_read_by_the_settings() -> None:
    """A name the table gives for a field is one config/ reads (outside the documentation
    itself): renaming a variable in the code without its documentation fails here."""
    config = PAGE.parents[1] / "config"
    settings = (config / "settings.py").read_text(encoding="utf-8")
    declarations = settings[settings.index("class Settings:") : settings.index("def from_env")]
    code = settings.replace(declarations, "") + (config / "retries.py").read_text(encoding="utf-8")
    for name in SETTINGS_FIELDS:
        for variable in documented(name):
            for each in variable.names.split(","):
                env = each.strip().split("=")[0]
                if name == "hotpath_overrides":
                    assert env.removeprefix("HOTPATH_").lower() in HOTPATH_RUNTIME_FIELDS, env
                    continue  # read by prefix: HOTPATH_ENV_PREFIX + the field's name
                assert f'"{env}"' in code, f"{env} (field {name}) is read nowhere in config/"


def test_no_package_reads_the_environment_itself() -> None:
    files = python_files(*PACKAGES)
    assert files, "no Python files found: the check would pass for nothing"
    found = grep(r"os\.environ|getenv\(", files)
    code = [line for line in found if not re.match(r"^[^:]+:\d+:\s*#", line)]
    assert code == [], "read it in config/settings.py:\n" + "\n".join(code)
