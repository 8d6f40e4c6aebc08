"""A private three-master Redis Cluster on loopback ports, for the hash-tagged mode's tests
and benchmarks (tests/integration/test_redis_cluster.py, bench/cluster.py).

Debian's `redis-server --cluster-enabled yes`, three times, in a temporary folder, joined
with `redis-cli --cluster create ... --cluster-yes`; stopped and removed afterwards.
Each node also needs its cluster bus port (port + 10000) free.
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


@contextmanager
def redis_cluster(masters: int = 3) -> Iterator[str]:
    """Start the cluster; yields its `redis+cluster://` URL (every node listed)."""
    server = shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    if server is None or cli is None:
        raise RuntimeError("redis-server and redis-cli are needed (apt-get install redis-server)")
    base = Path(tempfile.mkdtemp(prefix="mi-cluster-"))
    ports = free_cluster_ports(masters)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for port in ports:
            folder = base / str(port)
            folder.mkdir(mode=0o700)
            procs.append(
                subprocess.Popen(
                    [
                        server,
                        "--port", str(port),
                        "--bind", "127.0.0.1",
                        "--dir", str(folder),
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", "5000",
                        "--save", "",
                        "--appendonly", "no",
                        "--logfile", "redis.log",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )  # fmt: skip
            lifeline.track(procs[-1].pid)  # a test's or a benchmark's cluster ends with it
        for port in ports:
            _wait(functools.partial(_answers, port), f"node {port} to answer")
        subprocess.run(
            [cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports], "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        for port in ports:
            _wait(functools.partial(_sees_cluster_ok, port), f"node {port} to see the cluster ok")
        yield "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(base, ignore_errors=True)
