"""The application's top-level packages, as setup.cfg ships them (one list for every test that walks them)."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def application_packages() -> tuple[str, ...]:
    """`config`, `services`, ... in setup.cfg's order (its `[options.packages.find] include`)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    names = (line.strip() for line in config["options.packages.find"]["include"].splitlines())
    return tuple(name for name in names if name and "." not in name)


APPLICATION_PACKAGES = application_packages()
