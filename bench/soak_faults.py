"""The soak's faults: a seeded schedule of overlapping faults, and their injection.

`schedule(seed, seconds)` draws the whole schedule up front from the seed (what, when, how
long, which process of a type), so a run is reproduced by its seed; faults start every few
seconds and last several, so most of the time more than one is under way. Each fault
records when it really began and ended (wall clock), which the checker uses to excuse a
retry made late by a fault (bench/soak_check.py).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from dataclasses import dataclass

import redis

from bench.soak_stack import SoakStack
from scripts import servers

PROCESS_TYPES = ("web", "worker", "hotpath", "reconciler")
#: Kind -> (weight, shortest, longest duration in s).
KINDS: dict[str, tuple[float, float, float]] = {
    **{f"kill:{kind}": (3.0, 0.0, 0.0) for kind in PROCESS_TYPES},
    **{f"stop:{kind}": (2.0, 2.0, 20.0) for kind in PROCESS_TYPES},
    "kill:supervisor": (0.5, 0.0, 0.0),
    "stop:supervisor": (1.0, 2.0, 20.0),
    "restart:redis": (1.5, 0.5, 4.0),
    "restart:postgres": (1.5, 0.5, 6.0),
    "latency:redis": (1.5, 3.0, 30.0),
    "latency:postgres": (1.5, 3.0, 30.0),
    "drop:redis": (1.5, 0.0, 0.0),
    "drop:postgres": (1.5, 0.0, 0.0),
    "half_close:redis": (1.0, 0.0, 0.0),
    "half_close:postgres": (1.0, 0.0, 0.0),
    # A server that stops answering (SIGSTOPped, a network that black-holes): bounded, since
    # a PostgreSQL silent for good holds the threads waiting on it for good (no client-side
    # bound on a query's reply; found by this soak, its own issue).
    "hang:redis": (1.0, 2.0, 10.0),
    "hang:postgres": (1.0, 2.0, 10.0),
    "maxmemory:redis": (1.5, 3.0, 20.0),
}
#: On a Sentinel deployment (`--redis sentinel`) Redis's faults are the servers' own, one at
#: a time (a lock): a switch-over (`SENTINEL FAILOVER`), the master SIGKILLed (started again
#: once a replica is promoted: it has no persistence, so it must come back as a replica) or
#: SIGSTOPped past `down-after-milliseconds` (promoted around it, demoted when it wakes).
SENTINEL_KINDS: dict[str, tuple[float, float, float]] = {
    **{kind: weights for kind, weights in KINDS.items() if not kind.endswith(":redis")},
    "failover:redis": (2.0, 0.0, 0.0),
    "kill:redis-master": (1.5, 2.0, 10.0),
    "hang:redis-master": (1.0, 2.0, 10.0),
    "maxmemory:redis": KINDS["maxmemory:redis"],
}
#: Mean seconds between two fault starts (exponential): with the lengths above, two faults
#: or more are under way most of the time (the report's `overlap_share`).
MEAN_GAP_S = 2.0


@dataclass
class Fault:
    at: float  # seconds after the run began
    kind: str
    duration: float
    pick: float  # which process of the type, as a fraction of the sorted pids
    latency_s: float = 0.0
    began: float = 0.0  # wall clock, once run
    ended: float = 0.0
    note: str = ""


def schedule(seed: int, seconds: float, redis_topology: str = "single") -> list[Fault]:
    rng = random.Random(seed)
    table = SENTINEL_KINDS if redis_topology == "sentinel" else KINDS
    kinds = list(table)
    weights = [table[k][0] for k in kinds]
    faults = []
    at = rng.uniform(2.0, 6.0)
    while at < seconds:
        kind = rng.choices(kinds, weights)[0]
        _, shortest, longest = table[kind]
        duration = min(rng.uniform(shortest, longest), max(0.0, seconds - at))
        faults.append(Fault(at, kind, duration, rng.random(), latency_s=rng.uniform(0.05, 0.4)))
        at += rng.expovariate(1 / MEAN_GAP_S)
    return faults


class Injector:
    """Runs a schedule against a SoakStack: one thread per fault, a lock per server."""

    def __init__(self, stack: SoakStack, faults: list[Fault]) -> None:
        self.stack = stack
        self.faults = faults
        self.locks = {name: threading.Lock() for name in ("redis", "postgres")}
        self._threads: list[threading.Thread] = []
        self._stopped: set[int] = set()
        self._stopped_lock = threading.Lock()

    def start(self, began: float) -> None:
        for fault in self.faults:
            thread = threading.Thread(target=self._run, args=(fault, began), daemon=True)
            thread.start()
            self._threads.append(thread)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        self.heal()

    def heal(self) -> None:
        """Whatever a fault left: processes continued, proxies normal, Redis's memory unbounded."""
        with self._stopped_lock:
            stopped, self._stopped = set(self._stopped), set()
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        for proxy in (self.stack.redis_proxy, self.stack.pg_proxy):
            if proxy is not None:
                proxy.latency(0)
                proxy.up()
        with contextlib.suppress(redis.RedisError):
            self._redis().config_set("maxmemory", 0)

    def _redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.stack.redis_url, socket_timeout=5)

    def _run(self, fault: Fault, began: float) -> None:
        time.sleep(max(0.0, began + fault.at - time.time()))
        fault.began = time.time()
        try:
            self._inject(fault)
        except Exception as exc:  # a fault that could not be made is reported, not fatal
            fault.note = f"not injected: {exc!r}"[:200]
        fault.ended = time.time()

    def _process_fault(self, fault: Fault, action: str, target: str) -> None:
        """SIGKILL, or SIGSTOP for the fault's duration, one process of the type `target`."""
        pid = self._pid(target, fault.pick)
        if pid is None:
            fault.note = "no such process at that moment"
            return
        fault.note = f"pid {pid}"
        # When the signal is sent, not when the fault began to look for its process
        # (scanning /proc takes a while on a loaded machine): the checker compares it
        # with the times the product recorded.
        fault.began = time.time()
        if action == "kill":
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            return
        with self._stopped_lock:
            self._stopped.add(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
        time.sleep(fault.duration)
        with self._stopped_lock:
            self._stopped.discard(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    def _sentinel_fault(self, fault: Fault, action: str) -> None:
        """A fault of the Sentinel deployment's servers; it ends once a master and its replica
        are in sync again, so the next one never finds the deployment without a replica."""
        group = self.stack.sentinels
        assert group is not None
        fault.began = time.time()
        if action == "failover":
            before, after = group.failover()
            fault.note = f"master {before} -> {after}"
        else:
            port = group.master_port()
            name = group.name_of(port)
            fault.note = f"{name} ({port})"
            if action == "kill":
                group.kill(name)
                group.wait_promoted(port)
                time.sleep(fault.duration)
                group.restart(name)
            else:
                group.pause(name)
                try:
                    time.sleep(fault.duration)
                finally:
                    group.resume(name)
        group.wait_in_sync()
        fault.note += f"; master {group.master_port()}"

    def _pid(self, kind: str, pick: float) -> int | None:
        pids = sorted(pid for pid, k in self.stack.pids().items() if k == kind)
        return pids[int(pick * len(pids))] if pids else None

    def _inject(self, fault: Fault) -> None:
        action, _, target = fault.kind.partition(":")
        if target == "redis-master" or action == "failover":
            with self.locks["redis"]:
                self._sentinel_fault(fault, action)
            return
        if action in ("kill", "stop"):
            self._process_fault(fault, action, target)
            return
        if action == "restart":
            with self.locks[target]:
                if target == "redis":
                    self.stack.restart_redis(fault.duration)
                else:
                    self.stack.restart_pg(fault.duration)
            return
        if action == "maxmemory":
            with self.locks["redis"]:
                client = self._redis()
                used = int(client.info("memory")["used_memory"])
                client.config_set("maxmemory", used + 256 * 1024)
                fault.note = f"maxmemory {used + 256 * 1024}"
                time.sleep(fault.duration)
                self._redis().config_set("maxmemory", 0)
            return
        proxy = self.stack.redis_proxy if target == "redis" else self.stack.pg_proxy
        assert proxy is not None
        if action == "latency":
            fault.note = f"{fault.latency_s * 1000:.0f} ms"
            proxy.latency(fault.latency_s)
            time.sleep(fault.duration)
            proxy.latency(0)
        elif action == "drop":
            proxy.drop()
        elif action == "half_close":
            proxy.half_close()
        elif action == "hang":
            proxy.hang()
            time.sleep(fault.duration)
            proxy.up()
        else:
            servers.log(f"soak: unknown fault {fault.kind}")
