"""The library stands alone: it imports only the standard library, dramatiq and redis, and
importing it builds no broker."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib import resources
from pathlib import Path

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


def listbroker_imports(*, type_only: bool) -> dict[str, set[str]]:
    """Each module of the package: the modules of the package it imports, at run time only or
    also those imported for type checking (under `if TYPE_CHECKING:`)."""
    found: dict[str, set[str]] = {}
    for entry in resources.files(listbroker).iterdir():
        if not entry.name.endswith(".py"):
            continue
        tree = ast.parse(entry.read_text(encoding="utf-8"))
        skipped: set[int] = set()
        if not type_only:
            for node in ast.walk(tree):
                if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                    skipped |= {id(inner) for inner in ast.walk(node)}
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                if parts[0] == "listbroker" and len(parts) > 1:
                    targets.add(parts[1])
        found[entry.name.removesuffix(".py")] = targets - {"__init__"}
    found.pop("__init__", None)
    return found


def cycle_in(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph (its modules in order), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def test_the_modules_import_each_other_one_way_at_run_time() -> None:
    graph = listbroker_imports(type_only=False)
    assert graph["consumer"] >= {"batches"}
    assert cycle_in(graph) is None, cycle_in(graph)


def test_only_the_broker_is_imported_back_for_type_checking() -> None:
    """A module the broker builds (its consumers, its housekeeping thread) names the broker's
    class in annotations; every other import goes one way, type-only imports included (the
    batches' options know nothing of the consumer that hands batches out)."""
    imports = listbroker_imports(type_only=True)
    graph = {module: targets - {"broker"} for module, targets in imports.items()}
    assert cycle_in(graph) is None, cycle_in(graph)
    assert {"consumer", "maintenance"} <= {
        module for module, targets in imports.items() if "broker" in targets
    }


#: Dramatiq's own attributes of a message proxy (its `_message`, `_exception`): the library reads
#: a message through the proxy and a failure through its own `ListMessageProxy.failure`.
DRAMATIQ_PRIVATE = {"_message", "_exception"}


def test_the_library_reads_no_private_attribute_of_dramatiq() -> None:
    found = set()
    for entry in resources.files(listbroker).iterdir():
        if not entry.name.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(entry.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in DRAMATIQ_PRIVATE:
                found.add(f"{entry.name}:{node.lineno} .{node.attr}")
            elif isinstance(node, ast.Constant) and node.value in DRAMATIQ_PRIVATE:
                found.add(f"{entry.name}:{node.lineno} {node.value!r}")
    assert not found, sorted(found)


def test_every_public_name_is_named_in_the_readme() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Public names", 1)[1].split("\n## ", 1)[0]
    assert not [name for name in listbroker.__all__ if f"`{name}`" not in section]
    assert all(hasattr(listbroker, name) for name in listbroker.__all__)


def test_the_library_internals_are_not_public() -> None:
    for name in ("RedisListConsumer", "DirectConnections", "run_on", "DELAYED_PREFIX_LEN", "HEARTBEATS_KEY"):
        assert name not in listbroker.__all__
        assert not hasattr(listbroker, name), name
