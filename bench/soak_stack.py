"""The soak's stack: `make run` (python -m scripts.run_stack, the Procfile as it ships, its
default worker shape) on a private Redis and PostgreSQL, each reached through a FaultProxy;
or (`redis="sentinel"`) on a private Redis Sentinel deployment (scripts/sentinel_group.py:
a master, two replicas, three Sentinels, `min-replicas-to-write 2`; REDIS_URL the
`redis+sentinel://` URL docs/configuration.md documents), which no proxy can stand in front of:
Sentinel hands out the servers' own addresses, so Redis's faults are then the servers'
(failover, master killed or hung).

The servers are the soak's own (scripts/servers.py), so it may restart them; the stack's
processes are found by the marker run_stack puts in their environment and told apart by
their command line. Should `make run` end (its supervisord was SIGKILLed: run_stack then
stops everything), it is started again on the same state folder and port, as an operator
or a service manager would.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from scripts import servers
from scripts.faults import FaultProxy
from scripts.processes import SessionProcess, wait_until
from scripts.sentinel_group import SentinelGroup

#: The soak's Redis deployments: one server behind a fault proxy, or Sentinel's.
REDIS_TOPOLOGIES = ("single", "sentinel")

DATABASE = "mi_soak"
#: Documented settings (docs/configuration.md) that make a lost job heal in seconds rather than
#: in 40 s; the Procfile's shape (web 2 workers, worker 2 x 32) is left as it ships.
SETTINGS = {
    "RECONCILE_GRACE_MS": "5000",
    "RECONCILE_INTERVAL_MS": "1000",
    "MI_STOP_TIMEOUT_S": "15",
}
#: Variables of the caller's shell that would point the stack elsewhere or reshape it.
CLEARED_PREFIXES = ("HOTPATH_", "RECONCILE_", "WORKER_", "WEB_", "BROKER_", "MI_", "dramatiq_", "HONCHO_")
CLEARED = {"DATABASE_URL", "REDIS_URL", "REDIS_HASH_TAGS", "SECRET_KEY", "ADMIN_TOKENS", "PORT"}
READY_TIMEOUT_S = 180.0


def process_type(cmdline: str) -> str | None:
    """Which of the stack's processes a command line is."""
    if "supervisord" in cmdline:
        return "supervisor"
    if "gunicorn" in cmdline:
        return "web"
    if "actors.run_worker" in cmdline or "dramatiq" in cmdline or "actors.worker" in cmdline:
        return "worker"
    if "-m hotpath" in cmdline:
        return "hotpath"
    if "-m reconciler" in cmdline:
        return "reconciler"
    return None


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class SoakStack:
    def __init__(self, folder: Path, redis_topology: str = "single") -> None:
        if redis_topology not in REDIS_TOPOLOGIES:
            raise ValueError(f"redis topology {redis_topology!r}: one of {', '.join(REDIS_TOPOLOGIES)}")
        self.folder = folder
        self.state = folder / "state"
        self.topology = redis_topology
        self.redis = servers.RedisServer(folder / "redis", appendonly=True)
        # The deployment docs/scaling.md recommends where no acknowledged write may be lost: two
        # replicas, and a master refuses writes unless both are connected. With 1 (either
        # replica enough) the soak lost ~1 s of writes per switch-over: the old master kept
        # the other replica until the Sentinels reconfigured it, so it took writes the
        # promoted one never saw (docs/reliability.md, "On Redis Sentinel").
        self.sentinels = (
            SentinelGroup(folder / "sentinel", replicas=2, min_replicas_to_write=2)
            if redis_topology == "sentinel"
            else None
        )
        self.pg = servers.PostgresServer(folder / "pg")
        self.redis_proxy: FaultProxy | None = None
        self.pg_proxy: FaultProxy | None = None
        self.port = servers.free_port()
        self.run: SessionProcess | None = None
        self.restarts = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    # -- servers ---------------------------------------------------------------------------

    @property
    def database_url(self) -> str:
        """The database, directly (the checker's way in, never through a proxy)."""
        return self.pg.url(DATABASE)

    @property
    def redis_url(self) -> str:
        """Redis's current master, directly (the checker's and the faults' way in)."""
        if self.sentinels is None:
            return self.redis.url
        return f"redis://127.0.0.1:{self.sentinels.master_port()}/0"

    def start(self) -> SoakStack:
        if self.sentinels is None:
            self.redis.start()
            self.redis_proxy = FaultProxy(self.redis.url)
        else:
            self.sentinels.start()
        self.pg.start()
        servers.ensure_database(self.pg.admin_url, DATABASE)
        self.pg_proxy = FaultProxy(self.pg.url(DATABASE))
        self._launch()
        self.wait_ready()
        threading.Thread(target=self._keep_running, name="soak-stack", daemon=True).start()
        return self

    def restart_redis(self, down_s: float) -> None:
        self.redis.stop()
        time.sleep(down_s)
        self.redis.start()
        assert self.redis_proxy is not None
        self.redis_proxy.upstream = ("127.0.0.1", self.redis.port)

    def restart_pg(self, down_s: float) -> None:
        self.pg.stop()
        time.sleep(down_s)
        self.pg.start()
        assert self.pg_proxy is not None
        self.pg_proxy.upstream = ("127.0.0.1", self.pg.port)

    # -- make run ----------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        assert self.pg_proxy is not None
        env = {k: v for k, v in os.environ.items() if k not in CLEARED and not k.startswith(CLEARED_PREFIXES)}
        env.update(SETTINGS)
        env.update(
            REDIS_URL=self.sentinels.url if self.sentinels is not None else self._proxied_redis_url(),
            DATABASE_URL=self.pg_proxy.url,
            PORT=str(self.port),
            MI_STATE_DIR=str(self.state),
            MI_ENV_FILE=os.devnull,
            MI_STOP_TIMEOUT_S=SETTINGS["MI_STOP_TIMEOUT_S"],
            PYTHONUNBUFFERED="1",
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        )
        return env

    def _proxied_redis_url(self) -> str:
        assert self.redis_proxy is not None
        return self.redis_proxy.url

    def _launch(self) -> None:
        self.run = SessionProcess(
            [sys.executable, "-m", "scripts.run_stack"],
            env=self._env(),
            log_path=self.folder / f"make-run-{self.restarts}.log",
            stdin=subprocess.DEVNULL,
        )

    def _keep_running(self) -> None:
        while not self._stopping.wait(0.5):
            with self._lock:
                if self.run is not None and not self.run.alive() and not self._stopping.is_set():
                    servers.log(
                        f"soak: make run ended (exit {self.run.process.returncode}); starting it again"
                    )
                    self.run.stop()
                    self.restarts += 1
                    self._launch()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def secrets(self) -> dict[str, str]:
        return dict(json.loads((self.state / "secrets.json").read_text()))

    def wait_ready(self) -> None:
        def ready() -> bool:
            if not (self.state / "stack.json").exists():
                return False
            try:
                return requests.get(f"{self.base_url}/readyz", timeout=5).status_code == 200
            except requests.RequestException:
                return False

        wait_until(ready, timeout=READY_TIMEOUT_S, what="make run to serve /readyz", interval=0.3)

    def pids(self) -> dict[int, str]:
        """The stack's live processes by pid: their type (web, worker, hotpath, reconciler, supervisor)."""
        found = {}
        for pid in servers.pids_with_env("MI_STACK_STATE", str(self.state)):
            kind = process_type(cmdline(pid))
            if kind is not None:
                found[pid] = kind
        return found

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            if self.run is not None:
                self.run.stop(timeout=60)
        for proxy in (self.redis_proxy, self.pg_proxy):
            if proxy is not None:
                proxy.close()
        with contextlib.suppress(Exception):
            self.pg.stop()
        with contextlib.suppress(Exception):
            if self.sentinels is not None:
                self.sentinels.stop()
            else:
                self.redis.stop()
