"""A private Redis Cluster on loopback ports, for the hash-tagged mode's tests and benchmarks
(tests/integration/test_redis_cluster.py, bench/cluster.py) and the system tests' topology
with a replica per master (tests/system/).

Debian's `redis-server --cluster-enabled yes`, once per node, in a temporary folder, joined
with `redis-cli --cluster create ... [--cluster-replicas N] --cluster-yes`; stopped and
removed afterwards. Each node also needs its cluster bus port (port + 10000) free.
"""

from __future__ import annotations

import functools
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from scripts import lifeline

#: How long the cluster may take to agree on its slots.
READY_TIMEOUT_S = 30.0


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_ports(count: int) -> list[int]:
    """`count` ports, each free on 127.0.0.1 together with its cluster bus port (+10000)."""
    ports: list[int] = []
    while len(ports) < count:
        port = random.randrange(20_000, 55_000)
        if port not in ports and _free(port) and _free(port + 10_000):
            ports.append(port)
    return ports


def _wait(check: Callable[[], bool], what: str, timeout: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def _answers(port: int) -> bool:
    with redis.Redis(port=port, socket_timeout=1) as client:
        return bool(client.ping())


def _sees_cluster_ok(port: int) -> bool:
    with redis.Redis(port=port, socket_timeout=1) as client:
        return bool(client.cluster("info")["cluster_state"] == "ok")


@dataclass
class ClusterNode:
    """One `redis-server --cluster-enabled yes` of a cluster started here."""

    port: int
    folder: Path
    process: subprocess.Popen[bytes]

    @property
    def log(self) -> Path:
        return self.folder / "redis.log"


@dataclass
class RedisClusterServers:
    """The nodes of a cluster started by `cluster_servers` (masters first, then replicas)."""

    nodes: list[ClusterNode] = field(default_factory=list)
    masters: int = 0

    @property
    def url(self) -> str:
        """The `redis+cluster://` URL naming the masters it was created with."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[: self.masters])

    def node(self, port: int) -> ClusterNode:
        return next(n for n in self.nodes if n.port == port)

    def alive(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.process.poll() is None]

    def master_of(self, key: str) -> int:
        """The port of the master serving `key`'s slot, as the live nodes see it (CLUSTER SHARDS
        needs Redis 7: CLUSTER SLOTS lists the master of each range first)."""
        for node in self.alive():
            try:
                with redis.Redis(port=node.port, socket_timeout=1) as client:
                    slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
                    for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                        if int(start) <= slot <= int(end):
                            return int(master[1])
            except (redis.RedisError, OSError):
                continue
        raise RuntimeError(f"no live node knows the master of {key!r}")

    def kill(self, port: int) -> None:
        """SIGKILL one node (no shutdown, no last replication)."""
        node = self.node(port)
        node.process.kill()
        node.process.wait(timeout=10)


@contextmanager
def cluster_servers(
    masters: int = 3, *, replicas: int = 0, node_timeout_ms: int = 5000
) -> Iterator[RedisClusterServers]:
    """Start a cluster of `masters` masters with `replicas` replicas each; stopped and removed on exit.

    `node_timeout_ms` is the nodes' `cluster-node-timeout`: how long a master may be silent
    before the others mark it failing and one of its replicas takes over.
    """
    server = shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    if server is None or cli is None:
        raise RuntimeError("redis-server and redis-cli are needed (apt-get install redis-server)")
    base = Path(tempfile.mkdtemp(prefix="mi-cluster-"))
    ports = free_cluster_ports(masters * (1 + replicas))
    cluster = RedisClusterServers(masters=masters)
    try:
        for port in ports:
            folder = base / str(port)
            folder.mkdir(mode=0o700)
            process = subprocess.Popen(
                [
                    server,
                    "--port", str(port),
                    "--bind", "127.0.0.1",
                    "--dir", str(folder),
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(node_timeout_ms),
                    "--save", "",
                    "--appendonly", "no",
                    "--logfile", "redis.log",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
            lifeline.track(process.pid)  # a test's or a benchmark's cluster ends with it
            cluster.nodes.append(ClusterNode(port, folder, process))
        for port in ports:
            _wait(functools.partial(_answers, port), f"node {port} to answer")
        # redis-cli makes the first `masters` nodes masters and the rest their replicas.
        subprocess.run(
            [
                cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                "--cluster-replicas", str(replicas), "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )  # fmt: skip
        for port in ports:
            _wait(functools.partial(_sees_cluster_ok, port), f"node {port} to see the cluster ok")
        if replicas:
            for port in ports:
                _wait(functools.partial(_replica_synced, port), f"node {port}'s replication to be up")
        yield cluster
    finally:
        for node in cluster.nodes:
            if node.process.poll() is None:
                node.process.terminate()
        for node in cluster.nodes:
            try:
                node.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait()
        shutil.rmtree(base, ignore_errors=True)


def _replica_synced(port: int) -> bool:
    """A master, or a replica whose link to its master is up."""
    with redis.Redis(port=port, socket_timeout=1, decode_responses=True) as client:
        info = client.info("replication")
    return bool(info["role"] == "master" or info.get("master_link_status") == "up")


@contextmanager
def redis_cluster(masters: int = 3) -> Iterator[str]:
    """Start a cluster of `masters` masters and no replica; yields its `redis+cluster://` URL."""
    with cluster_servers(masters) as cluster:
        yield cluster.url
