"""The lock files hold what setup.cfg and broker/pyproject.toml require, at one version each.

A dependency added or a range changed without `make lock` fails here with the name to lock,
before an install on a new machine fails (or, worse, installs something unlocked).
"""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from scripts.lock_drift import OWN, locked

ROOT = Path(__file__).resolve().parents[2]
#: Each lock, with the requirements it must satisfy: (setup.cfg extras, broker extras, the deploy's).
SUPERSET = ROOT / "requirements" / "test.txt"
SUBSETS = {
    ROOT / "requirements.txt": ((), ()),
    ROOT / "requirements" / "run.txt": (("embedded",), ()),
    ROOT / "requirements" / "broker-test.txt": (None, ("test",)),
    SUPERSET: (("test", "dev", "embedded", "bench"), ("test",)),
}


def application_requirements(extras: tuple[str, ...]) -> list[Requirement]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    keys = [("options", "install_requires")] + [("options.extras_require", extra) for extra in extras]
    lines = (raw.split("#")[0].strip() for section, key in keys for raw in config[section][key].splitlines())
    return [Requirement(line) for line in lines if line]


def broker_requirements(extras: tuple[str, ...]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "broker" / "pyproject.toml").read_text())["project"]
    lines = project["dependencies"] + [
        line for extra in extras for line in project["optional-dependencies"][extra]
    ]
    return [Requirement(line) for line in lines]


def required(app_extras: tuple[str, ...] | None, broker_extras: tuple[str, ...]) -> list[Requirement]:
    app = [] if app_extras is None else application_requirements(app_extras)
    return [r for r in app + broker_requirements(broker_extras) if canonicalize_name(r.name) not in OWN]


@pytest.mark.parametrize("lock", sorted(SUBSETS), ids=lambda path: str(path.relative_to(ROOT)))
def test_a_lock_pins_every_requirement_within_its_range(lock: Path) -> None:
    pins = locked(lock)
    for requirement in required(*SUBSETS[lock]):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{lock.name} does not lock {name}: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{lock.name} locks {name}=={pins[name]}, outside {requirement}: run `make lock`"
        )


@pytest.mark.parametrize("lock", sorted(set(SUBSETS) - {SUPERSET}), ids=lambda path: path.name)
def test_every_lock_takes_the_versions_of_the_superset(lock: Path) -> None:
    superset = locked(SUPERSET)
    assert {name: superset.get(name) for name in locked(lock)} == locked(lock)


@pytest.mark.parametrize("lock", sorted(SUBSETS), ids=lambda path: path.name)
def test_every_pin_carries_hashes_and_the_file_says_how_it_is_made(lock: Path) -> None:
    text = lock.read_text()
    assert text.startswith("# A lock: ")
    assert "make lock" in text.splitlines()[1]
    pins = re.findall(r"^[A-Za-z0-9][\w.-]*==\S+.*$", text, re.MULTILINE)
    hashed = re.findall(r"^[A-Za-z0-9][\w.-]*==\S+.*\\\n\s+--hash=sha256:[0-9a-f]{64}", text, re.MULTILINE)
    assert pins
    assert len(hashed) == len(pins)
