"""The library stands alone: it imports only the standard library, dramatiq and redis, and
importing it builds no broker."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib import resources

import listbroker

ALLOWED = set(sys.stdlib_module_names) | {"__future__", "dramatiq", "redis", "listbroker"}


def imported_roots() -> dict[str, set[str]]:
    """Each module of the package: the top-level names of what it imports (type-only imports too)."""
    found: dict[str, set[str]] = {}
    for entry in resources.files(listbroker).iterdir():
        if not entry.name.endswith(".py"):
            continue
        tree = ast.parse(entry.read_text(encoding="utf-8"))
        roots: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots.add(node.module.split(".")[0])
        found[entry.name] = roots
    return found


def test_the_library_imports_only_the_standard_library_dramatiq_and_redis() -> None:
    modules = imported_roots()
    assert "broker.py" in modules
    assert "consumer.py" in modules
    outside = {f"{name} imports {root}" for name, roots in modules.items() for root in roots - ALLOWED}
    assert not outside, sorted(outside)


def test_importing_the_library_sets_no_global_broker() -> None:
    code = (
        "import listbroker, dramatiq.broker\n"
        "assert dramatiq.broker.global_broker is None, dramatiq.broker.global_broker\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
