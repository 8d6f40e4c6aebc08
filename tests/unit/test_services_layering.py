"""`services` is the domain: it never imports the web tier, the worker tier or their frameworks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVICES = Path(__file__).resolve().parents[2] / "services"
FORBIDDEN = {"flask", "werkzeug", "dramatiq", "redis", "web", "actors"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(SERVICES.rglob("*.py")), ids=lambda p: p.name)
def test_services_do_not_import_outer_layers(path: Path) -> None:
    bad = {name for name in imported_modules(path) if name.split(".")[0] in FORBIDDEN}
    assert not bad, f"{path.name} imports {sorted(bad)}"
