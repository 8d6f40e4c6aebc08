"""Fixtures of the system tests: the servers of each topology, and `make run` on them."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from config.settings import Settings
from scripts import servers
from scripts.cluster import RedisClusterServers, cluster_servers
from scripts.sentinel_group import SentinelGroup
from tests.support.pgbouncer import PgBouncer
from tests.support.records import clear_records
from tests.system.shipped import ShippedStack
from tests.system.topologies import stack_env

#: A master of the cluster silent this long is failed over (redis.conf's cluster-node-timeout).
CLUSTER_NODE_TIMEOUT_MS = 2_000

StartStack = Callable[[dict[str, str]], ShippedStack]


@pytest.fixture
def test_database(settings: Settings, engine: Engine) -> Iterator[str]:
    """The test database (migrated, questionnaire seeded), emptied of records before and after."""

    clear_records(engine)
    yield settings.database_url
    clear_records(engine)


@pytest.fixture
def start_stack(tmp_path: Path) -> Iterator[StartStack]:
    """`make run` on a topology's environment, in a state folder of its own; stopped at the end,
    nothing of it left running. A test asks for it after its servers' fixtures, so that the
    stack stops before its servers do (fixtures end in the reverse order of their start)."""
    started: list[ShippedStack] = []
    with servers.temporary_directory("mi-system-") as folder:
        # Under /tmp, reachable by the `postgres` account (pytest's own folder is 0700 under root)
        # for the embedded PostgreSQL, and short enough for supervisord's unix socket path.

        def start(topology: dict[str, str]) -> ShippedStack:
            state = folder / f"state-{len(started)}"
            stack = ShippedStack(
                env=stack_env(topology), state=state, log_path=tmp_path / f"make-run-{len(started)}.log"
            )
            started.append(stack)
            stack.wait_ready()
            return stack

        try:
            yield start
        finally:
            for n, stack in enumerate(started):
                stack.stop()
                # The processes' logs outlive the state folder, in pytest's folder of the test.
                if (stack.state / "logs").is_dir():
                    shutil.copytree(stack.state / "logs", tmp_path / f"logs-{n}")


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelGroup]:
    """A master, a replica and three Sentinels."""
    group = SentinelGroup(tmp_path / "sentinel")
    try:
        yield group.start()
    finally:
        group.stop()


@pytest.fixture
def cluster() -> Iterator[RedisClusterServers]:
    """Three masters with a replica each."""
    with cluster_servers(3, replicas=1, node_timeout_ms=CLUSTER_NODE_TIMEOUT_MS) as nodes:
        yield nodes


@pytest.fixture
def bouncer(test_database: str) -> Iterator[PgBouncer]:
    """PgBouncer in transaction mode in front of the test database."""
    server = PgBouncer(test_database)
    try:
        yield server.start()
    finally:
        server.stop()
