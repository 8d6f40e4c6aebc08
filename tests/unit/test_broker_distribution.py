"""The broker is a distribution of its own (broker/), which the application requires like any library."""

from __future__ import annotations

import configparser
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def broker_project() -> dict[str, object]:
    with (ROOT / "broker" / "pyproject.toml").open("rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def application_requirements() -> list[Requirement]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["options"]["install_requires"].splitlines()
    return [Requirement(line) for line in (raw.split("#")[0].strip() for raw in lines) if line]


def test_the_application_requires_the_broker_at_its_version() -> None:
    project = broker_project()
    (requirement,) = [r for r in application_requirements() if r.name == project["name"]]
    assert requirement.specifier.contains(str(project["version"]))
    # The installed one is the folder's (scripts/bootstrap.sh installs it first).
    assert metadata.version(str(project["name"])) == project["version"]


def test_the_broker_depends_only_on_dramatiq_and_redis() -> None:
    dependencies = broker_project()["dependencies"]
    assert isinstance(dependencies, list)
    assert sorted(Requirement(d).name for d in dependencies) == ["dramatiq", "redis"]
