"""A pytest plugin: run one part of the selected tests, their files split into N parts of about
equal time. `make test` runs the suite as N such parts at once (scripts/test_shards.py), each
under servers of its own: a part's tests that wait (the real retry schedule, outages,
restarts, the soak) leave the cores to the others' tests that compute.

    pytest -p tests.support.parts --part 1/4

Whole files go to a part (a module's fixtures, e.g. a stack started once per module, are not
paid twice), longest first, each to the part with the least time so far (LPT), by the seconds
in FILE_SECONDS; a file not listed counts DEFAULT_FILE_SECONDS. Every part finds the same test
files under the same arguments and computes the same split, so every test runs exactly once;
a part does not even import the others' files (collecting the whole suite costs about 15 CPU
seconds, some modules build their tests at collection). Refresh the table from a run's
`--durations=0` (setup + call + teardown summed per file) when a file is added that takes more
than a few seconds, or one changes much.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

#: Seconds per test file (setup, call and teardown of its tests) as `make test` runs them: its
#: parts at once on an otherwise idle 2-core machine (2026-12-06). Files under five seconds are
#: left out (94 files, 78 s in all).
FILE_SECONDS: dict[str, float] = {
    "tests/e2e/test_soak.py": 323.0,
    "tests/e2e/test_operator.py": 161.0,
    "tests/integration/test_bench_smoke.py": 138.0,
    "tests/system/test_topology.py": 114.0,
    "tests/integration/test_report_worker.py": 105.0,
    "tests/e2e/test_faults.py": 102.0,
    "tests/e2e/test_run_again.py": 96.0,
    "tests/e2e/test_quiet_faults.py": 96.0,
    "tests/e2e/test_supervise.py": 94.0,
    # Warm: the images found in podman's store (a cold build, ~10 min, falls to the first of them).
    "tests/containers/test_compose.py": 89.0,
    "tests/containers/test_kube.py": 73.0,
    "tests/e2e/test_run_safe.py": 62.0,
    "tests/e2e/test_stop_while_redis_hangs.py": 55.0,
    "tests/integration/test_worker_processes.py": 55.0,
    "tests/e2e/test_security.py": 46.0,
    "tests/system/test_fresh_machine.py": 45.0,
    "tests/integration/test_db_half_open.py": 41.0,
    "tests/integration/test_web_schemathesis.py": 41.0,
    "tests/integration/test_sentinel_failover.py": 40.0,
    "tests/integration/test_web_bad_input.py": 39.0,
    "tests/e2e/test_stack.py": 37.0,
    "tests/e2e/test_console.py": 34.0,
    "tests/integration/test_web_regenerate_properties.py": 32.0,
    "tests/system/test_deploy_install.py": 26.0,
    "tests/integration/test_quiet_loops.py": 25.0,
    "tests/containers/test_image.py": 21.0,
    "tests/integration/test_hotpath_poison.py": 21.0,
    "tests/integration/test_redis_cluster.py": 21.0,
    "tests/integration/test_hotpath_lease.py": 20.0,
    "tests/integration/test_lifeline.py": 18.0,
    "tests/integration/test_observe_processes.py": 16.0,
    "tests/integration/test_pgbouncer.py": 15.0,
    "tests/integration/test_last_job_decides.py": 12.0,
    "tests/integration/test_migrations_package.py": 12.0,
    "tests/integration/test_console_auth.py": 12.0,
    "tests/e2e/test_web_edge.py": 11.0,
    "tests/integration/test_job_index.py": 10.0,
    "tests/unit/test_import_graph.py": 10.0,
    "tests/integration/test_server_ownership.py": 9.0,
    "tests/integration/test_regenerate_matching.py": 9.0,
    "tests/integration/test_retries.py": 7.0,
    "tests/integration/test_hotpath_autosave.py": 6.0,
    "tests/integration/test_report_groups.py": 6.0,
}
#: What a file missing from the table counts.
DEFAULT_FILE_SECONDS = 1.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--part",
        default=None,
        metavar="K/N",
        help="run part K of N of the selected tests, whole files split by their time",
    )


def parse_part(text: str) -> tuple[int, int]:
    """`K/N` as (K, N), 1 <= K <= N."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise pytest.UsageError(f"--part wants K/N, e.g. 1/2, not {text!r}") from None
    if not 1 <= k <= n:
        raise pytest.UsageError(f"--part {text}: K must be between 1 and N")
    return k, n


def seconds(file: str) -> float:
    return FILE_SECONDS.get(file, DEFAULT_FILE_SECONDS)


def split_files(files: set[str], parts: int) -> list[set[str]]:
    """The files in `parts` sets of about equal time: longest first, each to the lightest set."""
    bins: list[tuple[float, set[str]]] = [(0.0, set()) for _ in range(parts)]
    for name in sorted(files, key=lambda f: (-seconds(f), f)):
        index = min(range(parts), key=lambda i: (bins[i][0], i))
        total, members = bins[index]
        members.add(name)
        bins[index] = (total + seconds(name), members)
    return [members for _, members in bins]


#: The stash key of this run's part: (every test file found, this part's files).
SPLIT = pytest.StashKey[tuple[frozenset[str], frozenset[str]]]()


def found_files(config: pytest.Config) -> set[str]:
    """The test files under the run's arguments (or testpaths), as node ids name them."""
    patterns = config.getini("python_files")
    root = config.rootpath
    found: set[str] = set()
    for arg in config.args:
        path = Path(arg.split("::", 1)[0])
        path = path if path.is_absolute() else config.invocation_params.dir / path
        candidates = path.rglob("*.py") if path.is_dir() else [path]
        for candidate in candidates:
            if any(fnmatch.fnmatch(candidate.name, pattern) for pattern in patterns):
                found.add(candidate.resolve().relative_to(root).as_posix())
    return found


def pytest_configure(config: pytest.Config) -> None:
    option = config.getoption("--part")
    if option:
        k, n = parse_part(str(option))
        files = found_files(config)
        config.stash[SPLIT] = (frozenset(files), frozenset(split_files(files, n)[k - 1]))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Another part's file is not collected (a file named on the command line always is)."""
    if SPLIT not in config.stash or not collection_path.is_file():
        return None
    files, mine = config.stash[SPLIT]
    name = collection_path.resolve().relative_to(config.rootpath).as_posix()
    return True if name in files and name not in mine else None


@pytest.hookimpl(trylast=True)  # after `-m` and `-k` have deselected theirs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if SPLIT not in config.stash:
        return
    files, mine = config.stash[SPLIT]
    k, _ = parse_part(str(config.getoption("--part")))

    def kept(item: pytest.Item) -> bool:
        name = item.nodeid.split("::", 1)[0]
        return name in mine or (name not in files and k == 1)  # a file found no other way: part 1's

    dropped = [item for item in items if not kept(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if kept(item)]
