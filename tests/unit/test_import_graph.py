"""The import graph: no side effects at import, no circle.

The layer contracts themselves are import-linter's, in pyproject.toml, run by `make test`
and `make lint`; that the broker library stands alone is its own suite's (broker/tests).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.support.packages import APPLICATION_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = APPLICATION_PACKAGES
#: Modules whose import is meant to act: the worker's entry and `python -m` mains.
ENTRY_MODULES = {"actors.worker", "hotpath.__main__", "reconciler.__main__"}
#: Alembic's scripts (env.py, the revisions) run inside `alembic`'s context, never imported.
ALEMBIC_SCRIPTS = "services.persistence.migrations."


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


NO_BROKER = (
    "import dramatiq.broker\nassert dramatiq.broker.global_broker is None, dramatiq.broker.global_broker\n"
)


@pytest.mark.parametrize("module", ["web", "listbroker"])
def test_importing_sets_no_global_broker(module: str) -> None:
    result = _python(f"import {module}\n{NO_BROKER}")
    assert result.returncode == 0, result.stderr


def test_no_project_module_but_the_worker_entry_builds_a_broker() -> None:
    graph = grimp.build_graph(*PACKAGES)
    modules = sorted(m for m in graph.modules if m not in ENTRY_MODULES and not m.startswith(ALEMBIC_SCRIPTS))
    result = _python("".join(f"import {m}\n" for m in modules) + NO_BROKER)
    assert result.returncode == 0, result.stderr


def test_the_worker_entry_installs_the_broker_with_the_report_actor() -> None:
    result = _python(
        "import actors.worker, dramatiq\n"
        "from listbroker import RedisListBroker\n"
        "from redis_adapters.queues import REPORT_ACTOR_NAME\n"
        "broker = dramatiq.get_broker()\n"
        "assert isinstance(broker, RedisListBroker), broker\n"
        "assert broker.get_actor(REPORT_ACTOR_NAME).fn.__module__ == 'actors.report'\n"
    )
    assert result.returncode == 0, result.stderr


def test_no_import_circle_type_only_imports_included() -> None:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False, exclude_type_checking_imports=False)
    circles = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back:
                circles.append(" -> ".join((importer, *back)))
    assert not circles, "import circles:\n" + "\n".join(circles)
