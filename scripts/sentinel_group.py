"""A private Redis Sentinel deployment for the failover tests and the soak: one master, one replica,
three Sentinels.

Debian's `redis-server` and `redis-sentinel`, each on a free loopback port, in a
temporary folder, in sessions of their own; `stop` ends every process it started. The
Sentinels are tuned for a test: a master silent for `DOWN_AFTER_MS` is down, and the
quorum of two starts the failover at once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.sentinel import Sentinel

from scripts import lifeline
from scripts.processes import wait_until
from scripts.servers import free_port

SERVICE = "mymaster"
#: How long a silent master takes to be judged down by a Sentinel.
DOWN_AFTER_MS = 1_000
FAILOVER_TIMEOUT_MS = 5_000


def sentinel_binary() -> str | None:
    found = shutil.which("redis-sentinel")
    if found:
        return found
    return "/usr/bin/redis-sentinel" if os.access("/usr/bin/redis-sentinel", os.X_OK) else None


@dataclass
class _Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    binary: str


@dataclass
class SentinelGroup:
    """`replicas` replicas ("replica", "replica-2", …); `min_replicas_to_write` is each server's
    `min-replicas-to-write`: a master with fewer replicas connected refuses writes, so one cut
    off by a failover (its replicas gone to the promoted one) refuses them instead of taking
    writes a resync will discard (docs/scaling.md, "Redis Sentinel")."""

    directory: Path
    replicas: int = 1
    min_replicas_to_write: int = 0
    servers: dict[str, _Server] = field(default_factory=dict)
    sentinel_ports: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def _start(self, name: str, binary: str, config: str | None) -> _Server:
        """Start `name` on `config` (None: the file it had, as the Sentinels last rewrote it)."""
        folder = self.directory / name
        folder.mkdir(parents=True, exist_ok=True)
        if config is None:
            config = (folder / "redis.conf").read_text()
        else:
            (folder / "redis.conf").write_text(config)  # Sentinels rewrite it: it must be writable
        log = folder / "out.log"
        with log.open("ab") as out:
            process = subprocess.Popen(
                [binary, str(folder / "redis.conf")],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=folder,
            )
        lifeline.track(process.pid)  # ends with the test run, however it ends
        port = int(config.split("port ", 1)[1].split("\n", 1)[0])
        server = self.servers[name] = _Server(name, port, process, log, binary)
        wait_until(lambda: _answers(port), timeout=10, what=f"{name} on port {port}")
        return server

    def start(self) -> SentinelGroup:
        server_binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        sentinel = sentinel_binary()
        if sentinel is None:
            raise RuntimeError("redis-sentinel is not installed (scripts/bootstrap.sh installs it)")
        base = (
            'bind 127.0.0.1\nprotected-mode no\nsave ""\nappendonly no\ndaemonize no\n'
            f"min-replicas-to-write {self.min_replicas_to_write}\n"
        )
        master = self._start("master", server_binary, f"port {free_port()}\n{base}")
        for index in range(self.replicas):
            self._start(
                "replica" if index == 0 else f"replica-{index + 1}",
                server_binary,
                f"port {free_port()}\n{base}replicaof 127.0.0.1 {master.port}\n",
            )
        wait_until(self._in_sync, timeout=15, what="the replicas to sync")
        for index in range(3):
            port = free_port()
            self.sentinel_ports.append(port)
            self._start(
                f"sentinel-{index}",
                sentinel,
                f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {master.port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {SERVICE} 1\n",
            )
        # Every Sentinel must know the replica and the other Sentinels before a failover can be voted.
        wait_until(self._settled, timeout=30, what="the Sentinels to discover each other and the replica")
        return self

    def _settled(self) -> bool:
        for port in self.sentinel_ports:
            with redis.Redis(port=port, decode_responses=True) as client:
                state: dict[str, str] = client.sentinel_master(SERVICE)
            if int(state["num-other-sentinels"]) < 2 or int(state["num-slaves"]) < self.replicas:
                return False
        return True

    def master_port(self) -> int:
        manager = Sentinel([("127.0.0.1", p) for p in self.sentinel_ports], socket_timeout=1)
        try:
            return int(manager.discover_master(SERVICE)[1])
        finally:
            for client in manager.sentinels:
                client.close()

    def kill(self, name: str) -> None:
        """SIGKILL one server (no shutdown, no last replication)."""
        server = self.servers[name]
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=10)

    def restart(self, name: str) -> None:
        """Start a server killed before again, on its own port: a master killed comes back as
        a master of old data until the Sentinels make it a replica of the one they promoted."""
        server = self.servers[name]
        self._start(name, server.binary, None)

    def pause(self, name: str) -> None:
        """SIGSTOP one server: silent, its connections open (a hung host)."""
        os.killpg(self.servers[name].process.pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        os.killpg(self.servers[name].process.pid, signal.SIGCONT)

    def failover(self, timeout: float = 20.0) -> tuple[int, int]:
        """`SENTINEL FAILOVER` (an operator's switch-over): the master's port before and after."""
        before = self.master_port()
        with redis.Redis(port=self.sentinel_ports[0], socket_timeout=5) as client:
            client.execute_command("SENTINEL", "FAILOVER", SERVICE)
        wait_until(lambda: self._master_port_or(before) != before, timeout=timeout, what="the failover")
        return before, self.master_port()

    def wait_promoted(self, old_port: int, timeout: float = 30.0) -> int:
        """Until the Sentinels name another master than `old_port`: its port."""
        wait_until(lambda: self._master_port_or(old_port) != old_port, timeout=timeout, what="a promotion")
        return self.master_port()

    def wait_in_sync(self, timeout: float = 60.0) -> None:
        """Until the master the Sentinels name has all its replicas online (the deployment can
        lose its master again without losing its data)."""
        wait_until(self._in_sync, timeout=timeout, what="the master and its replicas in sync", interval=0.2)

    def _in_sync(self) -> bool:
        try:
            port = self.master_port() if self.sentinel_ports else self.servers["master"].port
            with redis.Redis(port=port, socket_timeout=2, decode_responses=True) as client:
                info = client.info("replication")
        except redis.RedisError:
            return False
        online = [info.get(f"slave{index}", {}).get("state") == "online" for index in range(self.replicas)]
        return info.get("role") == "master" and all(online)

    def _master_port_or(self, default: int) -> int:
        try:
            return self.master_port()
        except redis.RedisError:
            return default

    def name_of(self, port: int) -> str:
        return next(s.name for s in self.servers.values() if s.port == port)

    def stop(self) -> None:
        for server in self.servers.values():
            if server.process.poll() is None:
                os.killpg(server.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for server in self.servers.values():
            try:
                server.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(server.process.pid, signal.SIGKILL)
                server.process.wait(timeout=5)


def _answers(port: int) -> bool:
    try:
        with redis.Redis(port=port, socket_timeout=1) as client:
            return bool(client.ping())
    except redis.RedisError:
        return False
