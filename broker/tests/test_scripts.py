"""The broker's Lua scripts as package data: every script loads, with its prologues, and the
constants written into the Lua agree with the Python ones."""

from __future__ import annotations

import re
from importlib import resources

import pytest
from listbroker.scripts import DEAD_MARK, DELAYED_PREFIX_LEN, Scripts, script_names, source

#: Every script file: the broker's own (`Scripts`) and those of the operators' and producers'
#: classes (dead letters, delayed messages, job index).
SCRIPTS = script_names()


def test_the_broker_registers_scripts_of_the_package() -> None:
    assert set(Scripts.__dataclass_fields__) <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_is_a_lua_file_of_the_package(name: str) -> None:
    assert resources.files("listbroker").joinpath("lua", f"{name}.lua").is_file()
    assert "redis.call" in source(name)


#: What a script may use from a prologue, and how the prologue defines it.
HELPERS = {"now": "local now =", "track": "local function track(", "untrack": "local function untrack("}


def _code(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


@pytest.mark.parametrize("name", SCRIPTS)
def test_prologues_come_first_and_define_what_the_script_uses(name: str) -> None:
    text = source(name)
    body = resources.files("listbroker").joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")
    assert text.endswith(body)
    prologues = text[: len(text) - len(body)]
    for helper, definition in HELPERS.items():
        if re.search(rf"\b{helper}\b", _code(body)):
            assert definition in prologues, f"{name} uses {helper} without its prologue"


def test_the_lua_literals_match_the_python_constants() -> None:
    assert f"'{DEAD_MARK}'" in source("clear_dead_marks")
    assert f"'{DEAD_MARK}'" in source("fetch")  # through the _index prologue
    assert f"string.sub(m, {DELAYED_PREFIX_LEN + 1})" in source("promote")
    assert f"string.sub(ARGV[i], {DELAYED_PREFIX_LEN + 1})" in source("release_delayed")
    assert f"string.sub(m, {DELAYED_PREFIX_LEN + 1})" in source("remove_delayed")
    assert f"'{DEAD_MARK}'" in source("remove_delayed")
