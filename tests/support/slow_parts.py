"""A pytest plugin: run one part of the selected tests, their files split into N parts of about
equal time. `make test` runs the slow tests as two such parts beside the rest
(scripts/test_shards.py): they mostly wait (the real retry schedule, outages, restarts), so
two parts at once take about half the time of one, while the CPU-bound rest runs beside them.

    pytest -p tests.support.slow_parts --slow-part 1/2 -m slow

Whole files go to a part (a module's fixtures, e.g. a stack started once per module, are not
paid twice), longest first, each to the part with the least time so far (LPT), by the seconds
in FILE_SECONDS; a file not listed counts DEFAULT_FILE_SECONDS. Both parts compute the same
split from the same collection, so every test runs exactly once. Refresh the table from
`make pytest PYTEST_ARGS="-m slow --durations=0"` (setup + call + teardown summed per file)
when a slow file is added or changes much.
"""

from __future__ import annotations

import pytest

#: Seconds per slow test file (setup, call and teardown of its tests), measured on a loaded
#: 2-core machine (`-m slow --durations=0`, 2026-12-01).
FILE_SECONDS: dict[str, float] = {
    # 3 min of faults, start-up, settling: 280-315 s alone (make soak, 2026-12-01).
    "tests/e2e/test_soak.py": 330.0,
    "tests/integration/test_report_worker.py": 100.3,
    "tests/system/test_topology.py": 96.7,
    "tests/system/test_deploy_install.py": 120.0,
    "tests/e2e/test_quiet_faults.py": 74.7,
    # Warm: the images found in podman's store (a cold build, ~10 min, falls to the first of them).
    "tests/containers/test_compose.py": 105.0,
    "tests/containers/test_kube.py": 75.0,
    "tests/containers/test_image.py": 42.0,
    "tests/e2e/test_operator.py": 44.8,
    "tests/integration/test_worker_processes.py": 30.7,
    "tests/integration/test_sentinel_failover.py": 28.5,
    "tests/integration/test_quiet_loops.py": 27.2,
    "tests/e2e/test_console.py": 23.4,
    "tests/system/test_fresh_machine.py": 22.7,
    "tests/e2e/test_supervise.py": 20.5,
    "tests/integration/test_redis_cluster.py": 17.3,
    "tests/e2e/test_stack.py": 16.2,
    "tests/e2e/test_run_safe.py": 15.1,
    "tests/integration/test_pgbouncer.py": 14.0,
    "tests/integration/test_lifeline.py": 8.9,
    "tests/integration/test_hotpath_lease.py": 6.7,
    "tests/integration/test_server_ownership.py": 5.7,
    "tests/integration/test_migrations_package.py": 4.4,
    "tests/integration/test_hotpath_processes.py": 4.0,
}
#: What a slow file missing from the table counts.
DEFAULT_FILE_SECONDS = 30.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow-part",
        default=None,
        metavar="K/N",
        help="run part K of N of the selected tests, whole files split by their time",
    )


def parse_part(text: str) -> tuple[int, int]:
    """`K/N` as (K, N), 1 <= K <= N."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--slow-part wants K/N, e.g. 1/2, not {text!r}") from None
    if not 1 <= k <= n:
        raise pytest.UsageError(f"--slow-part {text}: K must be between 1 and N")
    return k, n


def split_files(files: set[str], parts: int) -> list[set[str]]:
    """The files in `parts` sets of about equal time: longest first, each to the lightest set."""
    bins: list[tuple[float, set[str]]] = [(0.0, set()) for _ in range(parts)]
    for name in sorted(files, key=lambda f: (-FILE_SECONDS.get(f, DEFAULT_FILE_SECONDS), f)):
        index = min(range(parts), key=lambda i: (bins[i][0], i))
        total, members = bins[index]
        members.add(name)
        bins[index] = (total + FILE_SECONDS.get(name, DEFAULT_FILE_SECONDS), members)
    return [members for _, members in bins]


@pytest.hookimpl(trylast=True)  # after `-m` and `-k` have deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    option = config.getoption("--slow-part")
    if not option:
        return
    k, n = parse_part(str(option))
    files = {item.nodeid.split("::", 1)[0] for item in items}
    mine = split_files(files, n)[k - 1]
    kept = [item for item in items if item.nodeid.split("::", 1)[0] in mine]
    dropped = [item for item in items if item.nodeid.split("::", 1)[0] not in mine]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
