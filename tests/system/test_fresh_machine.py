"""`make test`'s start on a new machine, both cases CI can meet, in CI itself.

A new machine of this kind has PostgreSQL and Redis on the default ports but no test
database yet; a user's machine has no servers at all. Either way the parts of
`scripts.test_shards` (what `make test` runs after lint) start at the same moment and
must each get servers, a database and a Redis db index of their own. The bug this guards
against: two shards found no `mi_assessment_test`, both ran CREATE DATABASE, and the
loser died at start (UniqueViolation), so `make test` failed on every new machine.

Each case runs in a network namespace of its own (`unshare --net`: its own loopback,
nothing listening), so the host's servers are neither reused nor touched.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.system]

ROOT = Path(__file__).resolve().parents[2]

#: Three tests, each needing PostgreSQL and Redis: the first starts a Redis of its own as well,
#: the second creates databases concurrently, the third serves HTTP.
SELECTION = (
    "tests/integration/test_server_ownership.py::test_a_redis_started_on_a_taken_port_moves_to_another_and_is_its_own",
    "tests/integration/test_test_databases.py",
    "tests/integration/test_web_user_api.py::test_submit_returns_before_generation",
)


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False)
    return probe.returncode == 0


needs_netns = pytest.mark.skipif(not _can_unshare(), reason="needs root and `unshare --net`")


def _in_empty_network(*argv: str) -> subprocess.CompletedProcess[str]:
    """`argv` in a network namespace of its own with only its loopback up, as a user runs
    `make test` (the suite's own settings removed from the environment)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEST_", "MI_", "PYTEST_")) and k not in {"DATABASE_URL", "REDIS_URL"}
    }
    script = 'ip link set lo up && exec "$@"'
    return subprocess.run(
        ["unshare", "--net", "sh", "-c", script, "sh", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


#: Parts of the nested runs: two starting at once prove what four would, for half the processes.
NESTED_PARTS = 2


def _shards(*extra: str) -> list[str]:
    return [sys.executable, "-m", "scripts.test_shards", "--parts", str(NESTED_PARTS), *extra, *SELECTION]


def _claims(output: str) -> dict[str, tuple[str, str]]:
    """Each shard's database and Redis, from the lines scripts.with_test_services prints."""
    found: dict[str, dict[str, str]] = {}
    for shard, kind, url in re.findall(r"^\[([\w-]+)\] \[servers\] (database|redis) +(\S+)$", output, re.M):
        found.setdefault(shard, {})[kind] = url
    return {shard: (urls["database"], urls["redis"]) for shard, urls in found.items()}


SHARDS = tuple(f"part-{k}" for k in range(1, NESTED_PARTS + 1))


def _assert_every_shard_passed(result: subprocess.CompletedProcess[str]) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    exits = re.findall(r"shard (part-\d+): exit (\d+)", output)
    assert sorted(exits) == [(shard, "0") for shard in SHARDS], output[-3000:]
    # The three tests ran, each once, in whichever parts they fell to (the others had none).
    passed = [int(n) for n in re.findall(r"^\[part-\d+\] =+ (\d+) passed", output, re.M)]
    assert sum(passed) == 3, output[-3000:]


@needs_netns
@pytest.mark.timeout(600)
def test_make_test_with_servers_on_the_default_ports_and_no_test_database_yet() -> None:
    result = _in_empty_network(sys.executable, "-m", "tests.support.default_port_servers", "--", *_shards())
    _assert_every_shard_passed(result)
    claims = _claims(result.stdout)
    assert set(claims) == set(SHARDS), result.stdout[-3000:]
    databases = {database for database, _ in claims.values()}
    redis_dbs = {redis_url for _, redis_url in claims.values()}
    # All on the default ports' servers, each in a database and a db index of its own.
    assert len(databases) == len(SHARDS), claims
    assert len(redis_dbs) == len(SHARDS), claims
    assert all("@127.0.0.1:5432/mi_assessment_test" in database for database in databases), claims
    assert all(redis_url.startswith("redis://127.0.0.1:6379/") for redis_url in redis_dbs), claims


@needs_netns
@pytest.mark.timeout(600)
def test_make_test_on_a_machine_without_any_server_starts_private_ones() -> None:
    result = _in_empty_network(*_shards())
    _assert_every_shard_passed(result)
    output = result.stdout
    for shard in SHARDS:
        assert f"[{shard}] [servers] starting a private PostgreSQL" in output, output[-3000:]
        assert f"[{shard}] [servers] starting a private Redis" in output, output[-3000:]
    claims = _claims(output)
    ports = {database.split("@127.0.0.1:")[1].split("/")[0] for database, _ in claims.values()}
    assert len(ports) == len(SHARDS), claims
    assert "5432" not in ports, claims
