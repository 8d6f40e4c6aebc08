"""Every Lua script of the application is a `.lua` file, loaded one way (redis_adapters/lua_scripts.py)."""

from __future__ import annotations

import subprocess
from importlib import resources
from pathlib import Path

import pytest

from redis_adapters.lua_scripts import lua_source

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("redis_adapters", "hotpath", "web.console")


def scripts() -> list[tuple[str, str]]:
    return sorted(
        (package, entry.name.removesuffix(".lua"))
        for package in PACKAGES
        for entry in resources.files(package).joinpath("lua").iterdir()
        if entry.name.endswith(".lua") and not entry.name.startswith("_")
    )


@pytest.mark.parametrize(("package", "name"), scripts())
def test_each_script_loads_with_its_prologues(package: str, name: str) -> None:
    text = lua_source(package, name)
    body = resources.files(package).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")
    assert "redis.call" in text
    assert text.endswith(body)
    # A script naming prologues gets them in front of it.
    assert (len(text) > len(body)) == body.startswith("-- uses:")


def test_no_python_module_holds_lua() -> None:
    found = subprocess.run(
        ["git", "grep", "-n", "redis.call(", "--", "*.py", ":!broker", ":!tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert found == "", "move the script to a .lua file:\n" + found
