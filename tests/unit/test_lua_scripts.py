"""Every Lua script of the application is a `.lua` file, loaded one way (redis_adapters/lua_scripts.py)."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from redis_adapters.lua_scripts import lua_source
from tests.support.source_files import grep, python_files

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
    files = python_files(exclude=("broker", "tests"))
    assert files, "no Python files found: the check would pass for nothing"
    found = grep(re.escape("redis.call("), files)
    assert found == [], "move the script to a .lua file:\n" + "\n".join(found)
